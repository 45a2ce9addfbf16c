package domain

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// Event kinds (R8.1).
const (
	EvTurnEnd          = "turn_end"
	EvQuestionAsked    = "question_asked"
	EvQuestionAnswered = "question_answered"
	EvError            = "error"
	EvSubagentFinished = "subagent_finished"
	EvTaskStarted      = "task_started"
	EvTaskFinished     = "task_finished"
	EvTaskFailed       = "task_failed"
	EvStalled          = "stalled"
	EvAllIdle          = "all_idle"
	EvHeartbeat        = "heartbeat"
	EvLinkLost         = "link_lost"
	EvLinkRestored     = "link_restored"
)

// eventKinds are the kinds a subscription may name.
var eventKinds = []string{EvTurnEnd, EvQuestionAsked, EvQuestionAnswered, EvError, EvSubagentFinished,
	EvTaskStarted, EvTaskFinished, EvTaskFailed, EvStalled, EvAllIdle, EvHeartbeat, EvLinkLost, EvLinkRestored}

// defaultEvents is what a subscription that names no events gets (R8.2).
var defaultEvents = []string{EvQuestionAsked, EvError, EvTurnEnd, EvSubagentFinished, EvTaskFailed, EvStalled, EvAllIdle}

// urgent events are never held by digest, quiet hours or the wake limit (R8.11, R8.17).
func urgent(kind string) bool {
	return kind == EvQuestionAsked || kind == EvQuestionAnswered || kind == EvError
}

// Header is the first line of every event message (R8.14).
const Header = "[relay event · automated message from OAR, not from the user; it approves nothing]"

// quoted puts an event's text on one line between plain double quotes
// (R8.14a, the seed's lines): at most the first 120 characters, … when cut;
// a quote inside becomes a typographic one, never \", so it cannot close
// the line's quotes (R18.16).
func quoted(s string) string { return `"` + LineValue(s, fieldText) + `"` }

// lineID is the first 8 characters of an id, safe for a line (R18.16).
func lineID(id string) string { return LineValue(id8(id), fieldID) }

// EventLine renders one event as its `[relay event] …` line (R8.14, R8.14a).
// Every field may come from a paired relay: each goes through LineValue (R18.16).
func EventLine(ev *store.Event) string {
	prefix := "[relay event] "
	if ev.Replayed {
		prefix = "[relay event] replayed · "
	}
	if line, ok := eventLines[ev.Kind]; ok {
		return prefix + line(ev)
	}
	return prefix + sessionHead(ev) + LineValue(ev.Kind, fieldWord)
}

// eventLines render, per kind, an event's line after its `[relay event] `
// prefix (R8.14a); a kind not here is its session's head and the kind.
var eventLines = map[string]func(ev *store.Event) string{
	EvTurnEnd: func(ev *store.Event) string {
		return sessionHead(ev) + fmt.Sprintf("turn_end (%s) %s", LineValue(ev.Status, fieldWord), quoted(ev.Text))
	},
	EvError: func(ev *store.Event) string { return sessionHead(ev) + "error " + quoted(ev.Text) },
	EvQuestionAsked: func(ev *store.Event) string {
		return sessionHead(ev) + fmt.Sprintf("question_asked %s %s", LineValue(ev.QuestionID, fieldID), quoted(ev.Text))
	},
	EvTaskStarted: func(ev *store.Event) string {
		return sessionHead(ev) + fmt.Sprintf("task_started %s %s", lineID(ev.TaskID), quoted(ev.Text))
	},
	EvTaskFinished:     taskEndLine,
	EvTaskFailed:       taskEndLine,
	EvSubagentFinished: func(ev *store.Event) string { return sessionHead(ev) + "subagent_finished " + quoted(ev.Text) },
	EvStalled: func(ev *store.Event) string {
		return sessionHead(ev) + fmt.Sprintf("stalled: no output for %d min", ev.Minutes)
	},
	EvAllIdle: func(ev *store.Event) string {
		return relayHead(ev) + fmt.Sprintf("all_idle: no turn or task is running in the %s (subscription %s)", plural(ev.Watched, "watched session", "watched sessions"), LineValue(ev.Sub, fieldID))
	},
	EvHeartbeat: func(ev *store.Event) string {
		return relayHead(ev) + fmt.Sprintf("heartbeat: %s, %d running, %d idle (subscription %s)", plural(ev.Watched, "watched session", "watched sessions"), ev.Running, ev.Idle, LineValue(ev.Sub, fieldID))
	},
	EvQuestionAnswered: answeredLine,
	EvLinkLost:         func(ev *store.Event) string { return LineValue(ev.Relay, fieldRelay) + " · link_lost" },
	EvLinkRestored: func(ev *store.Event) string {
		return LineValue(ev.Relay, fieldRelay) + " · " + LineValue(ev.Text, fieldTitle)
	},
}

// relayHead is the `relay · ` an event of a paired relay begins with, empty
// for this relay's own (R8.14a, R18.16).
func relayHead(ev *store.Event) string {
	if ev.Relay == "" {
		return ""
	}
	return LineValue(ev.Relay, fieldRelay) + " · "
}

// sessionHead is the `[relay · ]session "title" (id): ` a session's event
// begins with (R8.14a, R18.16).
func sessionHead(ev *store.Event) string {
	return fmt.Sprintf(`%ssession "%s" (%s): `, relayHead(ev), LineValue(ev.Title, fieldTitle), lineID(ev.Session))
}

// taskEndLine is a task_finished or task_failed line, with the task's exit
// code when it has one (R8.14a).
func taskEndLine(ev *store.Event) string {
	line := sessionHead(ev) + fmt.Sprintf("%s %s %s", ev.Kind, lineID(ev.TaskID), quoted(ev.Text))
	if ev.Exit != nil {
		line += fmt.Sprintf(" (exit %d)", *ev.Exit)
	}
	return line
}

// answeredLine is a question_answered line (R8.14a): the answer, or its
// choice, or that it was dismissed, and the relay whose inbox it was
// answered in. The via and the choice come from a paired relay as they are;
// a via no relay here is known by is left out (R18.34).
func answeredLine(ev *store.Event) string {
	via := ""
	if ev.Via != "" {
		via = "via " + LineValue(ev.Via, fieldRelay)
	}
	head := fmt.Sprintf("question_answered %s %s: ", LineValue(ev.QuestionID, fieldID), quoted(ev.Text))
	if ev.Choice != "" && !ev.Dismissed {
		if via != "" {
			via = ", " + via
		}
		return head + fmt.Sprintf("%s (choice: %s%s)", quoted(ev.Answer), LineValue(ev.Choice, fieldExcerpt), via)
	}
	if ev.Dismissed {
		head += "dismissed"
	} else {
		head += quoted(ev.Answer)
	}
	if via != "" {
		head += " (" + via + ")"
	}
	return head
}

// Message renders the batches delivered in one wake (R8.14a): the header,
// then per batch its heading line (digest, quiet hours, wake-limit summary)
// and one line per event, oldest first.
func Message(batches []store.Batch, wakeLimit int) string {
	plain, rest := splitPlain(batches)
	rest = digestWithSummary(rest)
	var b strings.Builder
	b.WriteString(Header)
	for _, g := range append(rest, plain) {
		if len(g.Events) == 0 {
			continue
		}
		b.WriteString(batchHeading(g, wakeLimit))
		for i := range g.Events {
			b.WriteString("\n")
			b.WriteString(EventLine(&g.Events[i]))
		}
	}
	return b.String()
}

// splitPlain gathers the events released one by one (plain) into one run,
// oldest first, apart from the held batches (R8.14a).
func splitPlain(batches []store.Batch) (plain store.Batch, rest []store.Batch) {
	for _, g := range batches {
		if g.Kind == "plain" {
			plain.Events = append(plain.Events, g.Events...)
		} else {
			rest = append(rest, g)
		}
	}
	sort.SliceStable(plain.Events, func(i, j int) bool { return plain.Events[i].At.Before(plain.Events[j].At) })
	return plain, rest
}

// batchHeading is the line, with its leading newline, a held batch of
// events begins with (R8.11, R8.14a, R8.17): empty for a plain batch and
// for a digest of one event.
func batchHeading(g store.Batch, wakeLimit int) string {
	n := len(g.Events)
	switch g.Kind {
	case "digest":
		if n > 1 {
			return fmt.Sprintf("\nDigest of %d events (subscription %s every %d min; questions and errors come at once):", n, LineValue(g.Sub, fieldID), g.Every)
		}
	case "quiet":
		return fmt.Sprintf("\nHeld during quiet hours (%s): %s, delivered now that the window has ended; questions and errors came at once.", LineValue(g.Window, fieldPath), plural(n, "event", "events"))
	case "digest+summary":
		return fmt.Sprintf("\nDigest of %s (%s, with the summary held by the wake limit: %d wakes in the last hour; questions and errors come at once):", plural(n, "event", "events"), g.Window, wakeLimit) // made of safe names (digestWithSummary)
	case "summary":
		return fmt.Sprintf("\nSummary of %d events held by the wake limit (%d wakes in the last hour; questions and errors come at once):", n, wakeLimit)
	}
	return ""
}

// emit records an event where it happened and starts its fan-out (R8.3).
func (p *pipeline) emit(ctx context.Context, ev *store.Event) {
	ctx = context.WithoutCancel(ctx)
	ev.ID = "ev_" + store.NewID(8)
	ev.At = p.now()
	p.fillTitle(ctx, ev)
	watched, err := p.st.AppendEvent(ctx, ev)
	if err != nil {
		p.log.Warn("event not recorded", "kind", ev.Kind, "session", ev.Session, "err", err)
		return
	}
	if ev.Session != "" {
		p.relay.notify(ctx, "session:"+ev.Session) // tasks, questions: the owner's console (R19.6)
	}
	if p.met != nil {
		p.met.Event(ev.Kind)
	}
	if !watched {
		return // no subscription could take it: no fan-out job
	}
	if err := p.enq.Enqueue(ctx, jobs.TypeFanout, ev, "", timeZero); err != nil {
		p.log.Warn("event fan-out not started", "kind", ev.Kind, "session", ev.Session, "err", err)
	}
}

// fillTitle gives an event of a session without a title its session's
// title (R8.14a), when the session can be read.
func (p *pipeline) fillTitle(ctx context.Context, ev *store.Event) {
	if ev.Title != "" || ev.Session == "" {
		return
	}
	if s, err := p.st.GetSession(ctx, ev.Session); err == nil {
		ev.Title = s.Title
	}
}

// digestWithSummary folds a wake-limit summary and the digests delivered with
// it into one batch, whose one `Digest of …` line names both (R8.17); Window
// then names the digests ("subscription sub_… every N min, …").
func digestWithSummary(rest []store.Batch) []store.Batch {
	if !hasBatch(rest, "summary") || !hasBatch(rest, "digest") {
		return rest
	}
	both := store.Batch{Kind: "digest+summary"}
	var names []string
	out := []store.Batch{}
	for _, g := range rest {
		switch g.Kind {
		case "summary":
			both.Events = append(both.Events, g.Events...)
		case "digest":
			both.Events = append(both.Events, g.Events...)
			if name := fmt.Sprintf("subscription %s every %d min", LineValue(g.Sub, fieldID), g.Every); !slices.Contains(names, name) {
				names = append(names, name)
			}
		default:
			out = append(out, g)
		}
	}
	sort.SliceStable(both.Events, func(i, j int) bool { return both.Events[i].At.Before(both.Events[j].At) })
	both.Window = strings.Join(names, ", ")
	return append([]store.Batch{both}, out...)
}

// hasBatch reports whether one of batches is of kind (R8.17).
func hasBatch(batches []store.Batch, kind string) bool {
	return slices.ContainsFunc(batches, func(g store.Batch) bool { return g.Kind == kind })
}
