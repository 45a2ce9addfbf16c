package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oar/relay/store"
)

const (
	nothingSent    = "Nothing was sent."
	nothingCreated = "No session was created."
	nothingChanged = "Nothing was changed."
	nothingDone    = "Nothing was done."
)

// promptText reads and checks the `text` argument.
func promptText(a *args, nothing string) (string, *Error) {
	text, e := a.str("text")
	if e != nil {
		return "", e
	}
	if strings.TrimSpace(text) == "" {
		return "", Errorf(CodeInvalidInput, "text is required: the prompt to send. %s", nothing)
	}
	if len(text) > MaxTextBytes {
		return "", Errorf(CodeInvalidInput, "text is %d bytes; a prompt may have at most %d bytes (1 MiB). %s", len(text), MaxTextBytes, nothing)
	}
	if !utf8.ValidString(text) {
		return "", Errorf(CodeInvalidInput, "text is not valid UTF-8. %s", nothing)
	}
	return text, nil
}

// turnQueue is the step every prompt takes and the wait for it: queueing a
// turn (R7.7) under the 4-at-work cap (R6.1) and the cap per paired relay
// (R18.21), the prompt line of an agent's prompt (R4.8, R18.15) and the
// unlock it carries (R4.4), its drain started here or through the queue, a
// start whose answer was lost given back (R18.11); the wait_seconds
// argument and its cap (R7.11); waiting for the turn, for the prompt's own
// caller with the no-echo rule (R8.18, R18.12); the result every prompting
// action returns (R7.7, R7.11, R7.13); and the wait action (R7.12). send,
// create_session, the owner's prompts, schedules and the delivery pipeline
// all queue through it. It sees the store only as recordStore and
// queueStore and reaches the rest of the relay only through turnQueueHost
// and the subsystems it points to.
type turnQueue struct {
	st    turnQueueStore
	enq   Enqueuer
	log   *slog.Logger
	opts  *Options // the relay's: name, limits, timing, the clock of the durations of work
	now   func() time.Time
	hub   *hub
	dl    *pipeline
	dr    *drainer
	cards *cards // the longest wait (maxWait)
	reads *reads // a turn's pending questions (turnResult)
	relay turnQueueHost
}

// turnQueueStore is the store as the turn queue sees it.
type turnQueueStore interface {
	recordStore
	queueStore
}

// turnQueueHost is what the turn queue asks of the rest of the relay: the
// session the wait action names (sessions.go).
type turnQueueHost interface {
	targets
	openURL(ctx context.Context, sid string) any
}

// waitArg reads wait_seconds and caps it by the longest wait (R7.11).
func (tq *turnQueue) waitArg(ctx context.Context, a *args, nothing string) (time.Duration, string, *Error) {
	n, ok, e := a.integer("wait_seconds")
	if e != nil {
		return 0, "", e
	}
	if !ok {
		return tq.capWait(ctx, tq.opts.Timing.DefaultWait)
	}
	if n < 0 {
		return 0, "", Errorf(CodeInvalidInput, "wait_seconds must be 0 or more (got %d). %s", n, nothing)
	}
	d := time.Duration(n) * time.Second
	if a.peer {
		// The longest wait is the calling agent's relay's, also when the
		// target is a paired relay (R7.11): that relay capped it and says
		// so in its note; here only the largest a relay may set bounds it.
		if d > maxPeerWait {
			return maxPeerWait, fmt.Sprintf("wait_seconds was capped at %d, the longest wait per call a relay allows.", int(maxPeerWait/time.Second)), nil
		}
		return d, "", nil
	}
	return tq.capWait(ctx, d)
}

// maxPeerWait bounds the wait of a paired relay's agent's call: the largest
// longest wait per call a relay may set (spec §14: 120–3600 s).
const maxPeerWait = 3600 * time.Second

func (tq *turnQueue) capWait(ctx context.Context, d time.Duration) (time.Duration, string, *Error) {
	max := tq.cards.maxWait(ctx)
	if d > max {
		return max, fmt.Sprintf("wait_seconds was capped at %d, the longest wait per call on relay %q.", int(max/time.Second), tq.opts.Name), nil
	}
	return d, "", nil
}

// orchestrator is the conversation whose 4-at-work cap a session counts
// toward; self is this relay's name.
func orchestrator(self string, s *store.Session) string {
	if s.StartedBy == nil {
		return ""
	}
	if s.StartedBy.Relay == self {
		return s.StartedBy.Session
	}
	// Started by another relay's agent: its conversation's stand-in here
	// counts the cap under this relay's rules (R13.1).
	return peerConversation(s.StartedBy.Relay, s.StartedBy.Session)
}

func (tq *turnQueue) fromRef(c *caller) *store.Ref {
	if c.remote != nil {
		return &store.Ref{Relay: c.remote.Relay, Session: c.remote.Session, Title: c.remote.Title, Model: c.remote.Model}
	}
	return &store.Ref{Relay: tq.opts.Name, Session: c.s.ID, Title: c.s.Title, Model: c.s.Model}
}

// queue is the door to the turn queue for the delivery pipeline's host (the
// event prompt): the pipeline is built before the turn queue, which points
// to it.
func (r *Relay) queue(ctx context.Context, s *store.Session, text, role string, from *store.Ref, origin store.Origin, callerID string, enforce bool, waitFor time.Duration) (*store.Turn, error) {
	return r.q.queue(ctx, s, text, role, from, origin, callerID, enforce, waitFor)
}

// queue appends a prompt to a session and starts its drain (enforcing the cap
// for agent prompts). role is user (owner), agent, schedule or event.
// waitFor > 0 marks, before the turn can run, that the caller waits on its
// reply (the no-echo rule must know it before the turn_end can fan out).
func (tq *turnQueue) queue(ctx context.Context, s *store.Session, text, role string, from *store.Ref, origin store.Origin, callerID string, enforce bool, waitFor time.Duration) (*store.Turn, error) {
	return tq.queueTurn(ctx, store.NewID(16), s, text, role, from, origin, callerID, enforce, waitFor, "")
}

// queueTurn is queue with the turn's id chosen by the caller (who may listen
// for the turn's notifications before it can run). loopOf, when set, is the
// conversation whose loop-protection count the prompt takes in the same step
// (R5.2.6); a used-up count queues nothing (*store.LoopUsedError).
func (tq *turnQueue) queueTurn(ctx context.Context, id string, s *store.Session, text, role string, from *store.Ref, origin store.Origin, callerID string, enforce bool, waitFor time.Duration, loopOf string) (*store.Turn, error) {
	if isExternal(s) {
		return nil, notPromptable(s, nothingSent) // R17.7: no turn can run there
	}
	unlockFrom := ""
	if from != nil {
		// R4.8, R18.15: the agent learns that another agent speaks, from this
		// relay or another; the line is part of the stored text (R13.1).
		local := from.Relay == "" || strings.EqualFold(from.Relay, tq.opts.Name)
		text = PromptLine(from, local) + "\n" + text
		if !local {
			// R4.4(b): the other relay is unlocked here, in the push (when this
			// relay has paired it: one pairing direction is enough to be written to).
			unlockFrom = from.Relay
		}
	}
	now := tq.now()
	t := &store.Turn{ID: id, Session: s.ID, Role: role, From: from, Origin: origin, Caller: callerID, CreatedAt: now, Text: text}
	drainID := "drain:" + s.ID + ":" + store.NewID(6)
	waiting := time.Duration(0)
	if waitFor > 0 {
		waiting = waitFor + waitingSlack
	}
	o := store.QueueOpts{Orchestrator: orchestrator(tq.opts.Name, s), Limit: tq.opts.Limits.ActiveSessions, Enforce: enforce,
		PeerLimit: tq.opts.Limits.ActiveSessionsPerPeerToken, DrainID: drainID, Waiting: waiting, LoopOf: loopOf, LoopLimit: tq.opts.Limits.AgentPromptsBeforeCard, UnlockFrom: unlockFrom}
	// A waited prompt starts its drain here when a slot is free (direct.go):
	// the push then takes the drain's first step too.
	here := waitFor > 0 && tq.dr.reserveDirect()
	if here {
		o.StartOwner, o.LeaseTTL, o.History = tq.dr.newLeaseOwner(), leaseTTL, tq.dr.drainHistory
	}
	// One step: the loop count, the waiting mark (set before the turn can
	// run), the prompt, the owner's console notified (R19.6), and the drain's
	// first step.
	q, err := tq.st.QueueTurn(ctx, t, o)
	if here && (err != nil || q.Drain == nil) {
		tq.dr.releaseDirect()
		if (err != nil && !refused(err)) || (err == nil && q.Again) {
			// The push may have run with its answer lost, taking the turn for
			// a drain that will not run: give the turn back (undoStart).
			tq.undoStart(ctx, s.ID, t.ID, o.StartOwner, q)
		}
	}
	if errors.Is(err, store.ErrPeerSessionLimit) {
		return nil, tq.peerCapError(s.StartedBy, nothingSent)
	}
	if errors.Is(err, store.ErrSessionLimit) {
		return nil, Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			tq.opts.Limits.ActiveSessions, tq.opts.Limits.ActiveSessions, nothingSent)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case q.Drain != nil:
		tq.dr.runHere(ctx, s.ID, o.StartOwner, q.Drain)
	case q.Start:
		if err := tq.enq.EnqueueDrain(ctx, s.ID, drainID); err != nil {
			// The prompt is queued; the recovery sweep starts the drain.
			tq.log.Warn("enqueue drain failed; the sweep will retry", "session", s.ID, "err", err)
		}
	}
	t.Status = store.TurnQueued
	return t, nil
}

// peerCapError is the refusal by a paired relay's cap here (R18.21): the
// sessions all its conversations started here, together, per peer token.
func (tq *turnQueue) peerCapError(by *store.Ref, nothing string) *Error {
	name := ""
	if by != nil {
		name = by.Relay
	}
	n := tq.opts.Limits.ActiveSessionsPerPeerToken
	return Errorf(CodeSessionLimit, "Relay %q already has %d prompts at work here (sessions its conversations started on relay %q with a turn queued or running, all of them together); the limit is %d per paired relay. Wait for one to finish. %s",
		name, n, tq.opts.Name, n, nothing)
}

// refused reports a push's refusals, which wrote nothing.
func refused(err error) bool {
	var used *store.LoopUsedError
	return errors.Is(err, store.ErrSessionLimit) || errors.As(err, &used)
}

// undoStart gives back a turn that a push run with the drain's first step for
// owner took while its answer was lost (q.Again; or err, when q is nil and it
// is not known whether it ran): the turn goes back to the head of its queue,
// owner's lease is released and the drain goes to the queue. Nothing is
// done when the turn was not taken by owner; what cannot be done now (Redis
// away) the drain sweep recovers (R18.11).
func (tq *turnQueue) undoStart(ctx context.Context, sid, turnID, owner string, q *store.Queued) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachedWriteTimeout)
	defer cancel()
	drainer := ""
	if q != nil {
		drainer = q.Drainer
	} else if t, err := tq.st.GetTurn(ctx, turnID); err == nil {
		drainer = t.Drainer
	}
	if drainer != owner {
		return
	}
	if err := tq.st.RequeueTurn(ctx, sid, turnID); err != nil {
		tq.log.Warn("give back a turn whose push answer was lost; the drain sweep will", "session", id8(sid), "turn", id8(turnID), "err", err)
		return
	}
	if err := tq.st.ReleaseLease(ctx, sid, owner); err != nil {
		tq.log.Warn("release the lease of a turn given back", "session", id8(sid), "err", err)
	}
	if err := tq.dr.enqueueDrain(ctx, sid); err != nil {
		tq.log.Warn("hand a drain to the queue; the sweep will restart it", "session", id8(sid), "err", err)
	}
}

// listen is the notifications of turn id (its end, a question), from now
// on: a caller that listens before the turn is queued misses none.
func (tq *turnQueue) listen(id string) (<-chan struct{}, func()) {
	return tq.hub.sub("turn:" + id)
}

// waitTurn waits until the turn ends, waits on a question, or d passes.
func (tq *turnQueue) waitTurn(ctx context.Context, id string, d time.Duration) (*store.Turn, error) {
	ch, unsub := tq.listen(id)
	defer unsub()
	return tq.waitTurnOn(ctx, id, d, ch, nil)
}

// waitTurnOn is waitTurn on ch, the turn's notifications. queued is the turn
// as just queued when ch listened before it was queued (no notification can
// have been missed): the first read is then skipped while d > 0.
func (tq *turnQueue) waitTurnOn(ctx context.Context, id string, d time.Duration, ch <-chan struct{}, queued *store.Turn) (*store.Turn, error) {
	timer := tq.opts.Timers.NewTimer(d)
	defer timer.Stop()
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	t := queued
	for hooked := false; ; hooked = true {
		if t == nil || d <= 0 {
			var err error
			if t, err = tq.st.GetTurn(ctx, id); err != nil {
				return nil, fmt.Errorf("wait on turn %s: %w", id8(id), err)
			}
			if t.Status == store.TurnDone || t.Status == store.TurnError || t.Status == store.TurnStopped || t.Question != "" || d <= 0 {
				return t, nil
			}
		}
		if !hooked {
			waitBegins(ctx, "", id) // R24.1: the call waits now; a client that takes tasks has its task
		}
		select {
		case <-ch:
			// The turn ended in this process: its record as it ended.
			if ft, _ := tq.hub.val("turn:" + id).(*store.Turn); ft != nil && ft.Status.Ended() {
				cp := *ft
				return &cp, nil
			}
			if tq.dr.isEnding(id) {
				// A drain here is writing the turn's end: it hands the
				// record over right after the notification this wake-up
				// came from (the 2 s re-check reads it should it not).
				continue
			}
		case <-recheck.C:
		case <-timer.C():
			return tq.st.GetTurn(ctx, id)
		case <-ctx.Done():
			if t == queued { // not read yet
				return tq.st.GetTurn(context.WithoutCancel(ctx), id)
			}
			return t, nil
		}
		t = nil
	}
}

// sent finishes a prompt an agent sent to another agent once it is queued:
// it waits for the reply (R7.11); its loop-protection count was taken with
// the card check (loopCard). done says what already happened, for an error
// from here on.
func (tq *turnQueue) sent(ctx context.Context, c *caller, t *store.Turn, wait time.Duration, done string) (*store.Turn, *Error) {
	return tq.sentOn(ctx, c.delivery, t, wait, nil, done)
}

// sentOn is sent with ch, the turn's notifications listened to since before
// it was queued (nil: listen from now). queue already marked the wait
// (waitFor), so it is not marked again.
func (tq *turnQueue) sentOn(ctx context.Context, d *Delivery, t *store.Turn, wait time.Duration, ch <-chan struct{}, done string) (*store.Turn, *Error) {
	var err error
	if ch != nil {
		t, err = tq.waitReplyOn(ctx, d, t.ID, wait, ch, t)
	} else {
		t, err = tq.waitReplyQueued(ctx, d, t.ID, wait)
	}
	if err != nil {
		return nil, internalAfter(err, done)
	}
	return t, nil
}

func terminal(status store.TurnStatus) bool { return status.Ended() }

// waitReply is waitTurn for the prompt's own caller: while it waits, the
// turn's turn_end is held from its subscriptions and dropped once the reply
// reached it (no echo, R8.18). A reply counts as seen only once the call's
// result was written to the client (endWait, R18.12); a wait cut off because
// the client went away (ctx ended) ends at once.
func (tq *turnQueue) waitReply(ctx context.Context, dl *Delivery, id string, d time.Duration) (*store.Turn, error) {
	if d > 0 {
		if err := tq.st.SetWaiting(ctx, id, d+waitingSlack); err != nil { // wait: the caller comes back for it
			return nil, err
		}
	}
	return tq.waitReplyQueued(ctx, dl, id, d)
}

// waitReplyQueued is waitReply for a turn whose wait was marked when it was
// queued.
func (tq *turnQueue) waitReplyQueued(ctx context.Context, dl *Delivery, id string, d time.Duration) (*store.Turn, error) {
	ch, unsub := tq.listen(id)
	defer unsub()
	return tq.waitReplyOn(ctx, dl, id, d, ch, nil)
}

// waitReplyOn is waitReplyQueued on ch (see waitTurnOn for queued).
func (tq *turnQueue) waitReplyOn(ctx context.Context, dl *Delivery, id string, d time.Duration, ch <-chan struct{}, queued *store.Turn) (*store.Turn, error) {
	t, err := tq.waitTurnOn(ctx, id, d, ch, queued)
	got := err == nil && terminal(t.Status)
	if serr := tq.dl.endWait(ctx, dl, id, got); serr != nil {
		return nil, serr
	}
	return t, err
}

// turnResult fills the fields every prompting action returns (R7.7, R7.11)
// and returns them for the action to complete.
func (tq *turnQueue) turnResult(ctx context.Context, res *result, t *store.Turn) *promptResult {
	status := t.Status
	if status == store.TurnRunning && t.Question != "" {
		status = "question" // what the agent sees: the turn waits on a question card (R7.11)
	}
	u, _ := tq.relay.openURL(ctx, t.Session).(string)
	pr := &promptResult{Status: status, Session: t.Session, MessageID: t.ID, OpenURL: strPtr(u)}
	res.body = pr
	switch status {
	case store.TurnDone:
		pr.Reply = &turnReply{Text: t.Reply, Model: t.ReplyModel}
		if t.ModelAsked != "" && t.ReplyModel != "" && t.ModelAsked != t.ReplyModel { // R7.13
			pr.ModelNote = fmt.Sprintf("The turn ran on model '%s', not on '%s' as asked: the provider chose it.", t.ReplyModel, t.ModelAsked)
		}
		res.what = fmt.Sprintf("done, reply %d chars", utf8.RuneCountInString(t.Reply))
	case store.TurnError:
		pr.TurnError = some(t.Error)
		res.what = "error: " + t.Error
	case "question":
		qs, _ := tq.reads.pendingQuestions(ctx, t.Session)
		pr.PendingQuestions = some(qs)
		res.what = "waiting on a question"
	case store.TurnRunning:
		// R7.11: what the reply has so far, its last 2,000 characters.
		p := []rune(t.Partial)
		if len(p) > 2000 {
			p = p[len(p)-2000:]
		}
		pr.Partial = some(string(p))
		res.what = string(status)
	default:
		res.what = string(status)
	}
	return pr
}

// groupLine names a card's group: "Group: NAME (ID)", or "(new)" for one to create.
func groupLine(name, id string) string {
	return fmt.Sprintf("Group: %s (%s)", LineValue(name, fieldTitle), LineValue(id, fieldID))
}

// settingsLine is a card's line of the model, effort and mode (R18.16: one line).
func settingsLine(model, effort, mode string) string {
	parts := []string{"Model: " + firstNonEmpty(LineValue(model, fieldModel), "default")}
	if effort = LineValue(effort, fieldModel); effort != "" {
		parts = append(parts, "Effort: "+effort)
	}
	if mode = LineValue(mode, fieldModel); mode != "" {
		parts = append(parts, "Mode: "+mode)
	}
	return strings.Join(parts, " · ")
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

func excerpt(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	rs := []rune(s)
	return string(rs[:n]) + "…"
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v && v != "" {
			return true
		}
	}
	return false
}

func (tq *turnQueue) wait(ctx context.Context, c *caller, a *args) (*result, *Error) {
	wait, note, e := tq.waitArg(ctx, a, nothingDone)
	if e != nil {
		return nil, e
	}
	mid, e := a.str("message_id")
	if e != nil {
		return nil, e
	}
	if mid == "" {
		return nil, Errorf(CodeInvalidInput, "message_id is required: the message_id that send or create_session returned. Nothing was done.")
	}
	s, e := tq.relay.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "wait cannot wait on the calling conversation itself. Nothing was done.")
	}
	tid, n, err := tq.st.ResolveTurnID(ctx, strings.ToLower(mid))
	if err != nil {
		return nil, internal("wait: ResolveTurnID", err)
	}
	if n > 1 {
		return nil, Errorf(CodeInvalidInput, "message_id %q matches more than one message; give more characters. Nothing was done.", mid)
	}
	if tid == "" || len(mid) < 8 {
		return nil, Errorf(CodeNotFound, "Session %s on relay %q has no message %q. Nothing was done.", id8(s.ID), tq.opts.Name, mid)
	}
	t, err := tq.st.GetTurn(ctx, tid)
	if err != nil || t.Session != s.ID {
		return nil, Errorf(CodeNotFound, "Session %s on relay %q has no message %q. Nothing was done.", id8(s.ID), tq.opts.Name, mid)
	}
	if t.Caller == c.s.ID {
		t, err = tq.waitReply(ctx, c.delivery, t.ID, wait)
	} else {
		t, err = tq.waitTurn(ctx, t.ID, wait)
	}
	if err != nil {
		return nil, internal("wait: waitTurn", err)
	}
	res := newResult(s.ID, "")
	tq.turnResult(ctx, res, t).Note = note
	return res, nil
}

// unreserve gives back a 4-at-work slot taken for a session that did not
// start after all. A failure is logged at ERROR with both ids: that slot
// then stays taken in Redis (P:busy:ORCH) until someone removes the member.
func (tq *turnQueue) unreserve(ctx context.Context, orch, sid string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachedWriteTimeout)
	defer cancel()
	if err := tq.st.Unreserve(wctx, orch, sid); err != nil {
		tq.log.Error("give back a 4-at-work slot", "orchestrator", id8(orch), "session", id8(sid), "err", err)
	}
}

// precheckCap refuses a prompt that would make one more session of its
// orchestrator's busy beyond the 4-at-work cap (R6.1), or of a paired
// relay's conversations beyond the cap per paired relay (R18.21); both are
// checked again atomically when queued.
func (tq *turnQueue) precheckCap(ctx context.Context, s *store.Session) *Error {
	orch := orchestrator(tq.opts.Name, s)
	if orch == "" {
		return nil
	}
	cur, err := tq.st.CurrentTurn(ctx, s.ID)
	if err != nil {
		return internal("precheckCap: CurrentTurn", err)
	}
	q, err := tq.st.QueuedTurns(ctx, s.ID)
	if err != nil {
		return internal("precheckCap: QueuedTurns", err)
	}
	if cur != "" || len(q) > 0 {
		return nil // busy already: the prompt just queues
	}
	n, err := tq.st.BusyCount(ctx, orch)
	if err != nil {
		return internal("precheckCap: BusyCount", err)
	}
	if n >= tq.opts.Limits.ActiveSessions {
		return Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			n, tq.opts.Limits.ActiveSessions, nothingSent)
	}
	return tq.precheckPeerCap(ctx, orch, s.StartedBy, nothingSent)
}

// precheckPeerCap refuses a prompt that would make one more session of a
// paired relay's conversations busy beyond the cap per paired relay (checked
// again atomically when queued); nil for a conversation on this relay.
func (tq *turnQueue) precheckPeerCap(ctx context.Context, orch string, by *store.Ref, nothing string) *Error {
	if tq.opts.Limits.ActiveSessionsPerPeerToken <= 0 || !isPeerConversation(orch) {
		return nil
	}
	n, err := tq.st.PeerBusyCount(ctx, orch)
	if err != nil {
		return internal("precheckPeerCap: PeerBusyCount", err)
	}
	if n >= tq.opts.Limits.ActiveSessionsPerPeerToken {
		return tq.peerCapError(by, nothing)
	}
	return nil
}
