package web

import (
	"html/template"
	"strings"

	"github.com/oar/relay"
)

// foldAfter is the longest run of tool-call lines shown one by one; a
// longer run is one line, "N tool calls", that opens in place (R23.3).
const foldAfter = 3

// convItem is one line of a conversation as the page shows it: a message,
// a tool call, or a folded run of tool calls.
type convItem struct {
	Msg  *msgView
	Act  *actView
	Fold []*actView // more than foldAfter tool calls in a row
}

// ID names the item's element; a fold is named after its first call, so it
// stays the same element (open or closed) as calls are added to it.
func (it convItem) ID() string {
	switch {
	case it.Msg != nil:
		return "m-" + it.Msg.ID
	case it.Act != nil:
		return "m-" + it.Act.ID
	case len(it.Fold) > 0:
		return "fold-" + it.Fold[0].ID
	}
	return ""
}

// msgView is a message: its machine header lines apart, its body as
// sanitised Markdown (or, for the relay's own event lines, plain text).
type msgView struct {
	relay.Message
	CreatedAtText string
	Headers       []string      // `[relay event · …]`, `[Prompt from an agent …]`, `[relay schedule …]` (R23.2)
	Body          template.HTML // Markdown, sanitised
	Plain         string        // the relay's own lines (events): shown as they are
}

// actView is one tool call or activity line (R17.3, R23.3):
// "🛰️ ACTION → RELAY session ID8" with the call's outcome, or an agent's
// "🔧 TITLE: STATUS".
type actView struct {
	ID, At  string
	Icon    string
	What    string // the action, or the tool's title
	Target  string // "RELAY · session ID8"
	Outcome string // completed, failed, "ok, replied", REMOTE_RELAY_FORBIDDEN, … ("" when the line has none)
	Failed  bool
}

// conversation turns a session's messages into the page's lines.
func conversation(md *Markdown, msgs []relay.Message) []convItem {
	var out []convItem
	var run []*actView
	flush := func() {
		switch {
		case len(run) > foldAfter:
			out = append(out, convItem{Fold: run})
		default:
			for _, a := range run {
				out = append(out, convItem{Act: a})
			}
		}
		run = nil
	}
	for i := range msgs {
		m := msgs[i]
		if m.Role == "activity" {
			run = append(run, parseActivity(m))
			continue
		}
		flush()
		out = append(out, convItem{Msg: newMsgView(md, m)})
	}
	flush()
	return out
}

func newMsgView(md *Markdown, m relay.Message) *msgView {
	v := &msgView{Message: m, CreatedAtText: str(m.CreatedAt)}
	body := m.Text
	if m.Role != "user" && m.Role != "assistant" {
		v.Headers, body = headerLines(body)
	}
	if m.Role == "event" {
		v.Plain = strings.TrimSpace(body)
	} else {
		v.Body = md.HTML(body)
	}
	return v
}

// headerPrefixes start the header lines the relay writes before a message
// it passes on (domain: events.Header, PromptLine, scheduleHeader).
var headerPrefixes = []string{"[relay event", "[Prompt from an agent", "[Remote prompt from an agent", "[relay schedule"}

// headerLines takes the machine header lines off the start of text.
func headerLines(text string) ([]string, string) {
	var heads []string
	for {
		line, rest, _ := strings.Cut(text, "\n")
		l := strings.TrimSpace(line)
		if !isHeader(l) {
			return heads, text
		}
		heads = append(heads, l)
		text = rest
	}
}

func isHeader(line string) bool {
	if !strings.HasSuffix(line, "]") {
		return false
	}
	for _, p := range headerPrefixes {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// parseActivity reads an activity line into its parts.
func parseActivity(m relay.Message) *actView {
	a := &actView{ID: m.ID, At: str(m.CreatedAt)}
	line := strings.TrimSpace(m.Text)
	switch {
	case strings.HasPrefix(line, "🛰️"):
		a.Icon = "🛰️"
		rest := strings.TrimSpace(strings.TrimPrefix(line, "🛰️"))
		what, target, ok := strings.Cut(rest, " → ")
		a.What = what
		if ok {
			relayName, sid, hasSession := strings.Cut(target, " session ")
			a.Target = relayName
			if hasSession {
				a.Target += " · session " + sid
			}
		}
		// The call's outcome, added once it had its result: "ok[, STATUS]",
		// else an error code (R23.3).
		a.Outcome = m.Outcome
		a.Failed = a.Outcome != "" && a.Outcome != "ok" && !strings.HasPrefix(a.Outcome, "ok, ")
		return a
	case strings.HasPrefix(line, "🔧"):
		a.Icon = "🔧"
		rest := strings.TrimSpace(strings.TrimPrefix(line, "🔧"))
		if i := strings.LastIndex(rest, ": "); i >= 0 {
			rest, a.Outcome = rest[:i], rest[i+2:]
		}
		a.What = rest
	default:
		a.Icon, a.What = "•", line
	}
	a.Failed = a.Outcome == "failed"
	return a
}

// conversationFuncs are the template functions of conversation.html.
func conversationFuncs(md *Markdown) template.FuncMap {
	return template.FuncMap{
		"conversation": func(msgs []relay.Message) []convItem { return conversation(md, msgs) },
		// A running turn's partial reply is new on every refresh: rendered,
		// never kept in the cache (it would push the messages out).
		"markdown": md.render,
		// deref is a typed result's optional text ("" for none): a nil
		// pointer printed as it is would show "<nil>" (R23.4).
		"deref": str,
	}
}
