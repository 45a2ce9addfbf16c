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
	st       turnQueueStore
	enq      Enqueuer
	log      *slog.Logger
	opts     *Options // the relay's: name, limits, timing, the clock of the durations of work
	now      func() time.Time
	hub      *hub
	pipeline *pipeline
	drainer  *drainer
	cards    *cards // the longest wait (maxWait)
	reads    *reads // a turn's pending questions (turnResult)
	relay    turnQueueHost
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

// prompt is a prompt to queue (turnQueue.queue).
type prompt struct {
	s    *store.Session
	text string
	role string // user (the owner), agent, schedule or event
	// from is the agent that speaks (nil: the owner, a schedule, an event):
	// its prompt line goes before the text (R4.8, R18.15).
	from   *store.Ref
	origin store.Origin
	caller string // the calling conversation (store.Turn.Caller; "" = none)
	// enforce: the 4-at-work cap refuses the prompt (agent prompts, R6.1).
	enforce bool
	// waitFor > 0 marks, before the turn can run, that the caller waits on
	// its reply (the no-echo rule must know it before the turn_end can fan
	// out); such a prompt may start its drain here (drainer.go).
	waitFor time.Duration
	// id is the turn's id, chosen by a caller who listens for the turn's
	// notifications before it can run ("" = a new one).
	id string
	// loopOf, when set, is the conversation whose loop-protection count the
	// prompt takes in the same step (R5.2.6); a used-up count queues nothing
	// (*store.LoopUsedError).
	loopOf string
}

// queue appends a prompt to a session and starts its drain (enforcing the
// cap for agent prompts, p.enforce).
func (tq *turnQueue) queue(ctx context.Context, p prompt) (*store.Turn, error) {
	s := p.s
	if isExternal(s) {
		return nil, notPromptable(s, nothingSent) // R17.7: no turn can run there
	}
	if p.id == "" {
		p.id = store.NewID(16)
	}
	text, unlockFrom := tq.promptLine(p.text, p.from)
	t := &store.Turn{ID: p.id, Session: s.ID, Role: p.role, From: p.from, Origin: p.origin, Caller: p.caller, CreatedAt: tq.now(), Text: text}
	o := tq.queueOpts(p, unlockFrom)
	// A waited prompt starts its drain here when a slot is free (drainer.go):
	// the push then takes the drain's first step too.
	here := p.waitFor > 0 && tq.drainer.reserveDirect()
	if here {
		o.StartOwner, o.LeaseTTL, o.History = tq.drainer.newLeaseOwner(), leaseTTL, tq.drainer.drainHistory
	}
	// One step: the loop count, the waiting mark (set before the turn can
	// run), the prompt, the owner's console notified (R19.6), and the drain's
	// first step.
	q, err := tq.st.QueueTurn(ctx, t, o)
	if here && (err != nil || q.Drain == nil) {
		tq.notHere(ctx, t, o.StartOwner, q, err)
	}
	if err != nil {
		return nil, tq.queueError(s, err)
	}
	tq.startDrain(ctx, s.ID, o, q)
	t.Status = store.TurnQueued
	return t, nil
}

// notHere gives back the slot of a drain that was to start where its
// prompt was queued and did not (the push failed, or did not take the
// drain's first step for owner).
func (tq *turnQueue) notHere(ctx context.Context, t *store.Turn, owner string, q *store.Queued, err error) {
	tq.drainer.releaseDirect()
	if (err != nil && !refused(err)) || (err == nil && q.Again) {
		// The push may have run with its answer lost, taking the turn for
		// a drain that will not run: give the turn back (undoStart).
		tq.undoStart(ctx, t.Session, t.ID, owner, q)
	}
}

// promptLine is an agent's prompt text with its prompt line (R4.8, R18.15:
// the agent learns that another agent speaks, from this relay or another;
// the line is part of the stored text, R13.1), and the paired relay it
// unlocks here (R4.4 b; "" for none). from nil: text as it is.
func (tq *turnQueue) promptLine(text string, from *store.Ref) (string, string) {
	if from == nil {
		return text, ""
	}
	local := from.Relay == "" || strings.EqualFold(from.Relay, tq.opts.Name)
	text = PromptLine(from, local) + "\n" + text
	if local {
		return text, ""
	}
	// R4.4(b): the other relay is unlocked here, in the push (when this
	// relay has paired it: one pairing direction is enough to be written to).
	return text, from.Relay
}

// queueOpts are the push's settings for prompt p: the caps, the drain it
// may start, the waiting mark, the loop count and the unlock.
func (tq *turnQueue) queueOpts(p prompt, unlockFrom string) store.QueueOpts {
	waiting := time.Duration(0)
	if p.waitFor > 0 {
		waiting = p.waitFor + waitingSlack
	}
	lim := tq.opts.Limits
	return store.QueueOpts{Orchestrator: orchestrator(tq.opts.Name, p.s), Limit: lim.ActiveSessions, Enforce: p.enforce,
		PeerLimit: lim.ActiveSessionsPerPeerToken, DrainID: "drain:" + p.s.ID + ":" + store.NewID(6), Waiting: waiting,
		LoopOf: p.loopOf, LoopLimit: lim.AgentPromptsBeforeCard, UnlockFrom: unlockFrom}
}

// queueError is a push's error as the caller sees it: a cap's refusal
// (R6.1, R18.21), else err.
func (tq *turnQueue) queueError(s *store.Session, err error) error {
	if errors.Is(err, store.ErrPeerSessionLimit) {
		return tq.peerCapError(s.StartedBy, nothingSent)
	}
	if errors.Is(err, store.ErrSessionLimit) {
		return Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			tq.opts.Limits.ActiveSessions, tq.opts.Limits.ActiveSessions, nothingSent)
	}
	return err
}

// startDrain starts the drain a push asked for: here, from the first step it
// took (q.Drain), or through the queue (q.Start).
func (tq *turnQueue) startDrain(ctx context.Context, sid string, o store.QueueOpts, q *store.Queued) {
	switch {
	case q.Drain != nil:
		tq.drainer.runHere(ctx, sid, o.StartOwner, q.Drain)
	case q.Start:
		if err := tq.enq.EnqueueDrain(ctx, sid, o.DrainID); err != nil {
			// The prompt is queued; the recovery sweep starts the drain.
			tq.log.Warn("enqueue drain failed; the sweep will retry", "session", sid, "err", err)
		}
	}
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
	if err := tq.drainer.enqueueDrain(ctx, sid); err != nil {
		tq.log.Warn("hand a drain to the queue; the sweep will restart it", "session", id8(sid), "err", err)
	}
}

// listen is the notifications of turn id (its end, a question), from now
// on: a caller that listens before the turn is queued misses none.
func (tq *turnQueue) listen(id string) (<-chan struct{}, func()) {
	return tq.hub.sub("turn:" + id)
}

// turnWait is a wait on a turn (await): until it ends, waits on a question,
// or d passes.
type turnWait struct {
	id string
	d  time.Duration
	// own: the waiter is the prompt's own caller, whose call's result is
	// written through dl (nil: in-process). While it waits, the turn's
	// turn_end is held from its subscriptions and dropped once the reply
	// reached it (no echo, R8.18). A reply counts as seen only once the
	// call's result was written to the client (endWait, R18.12); a wait cut
	// off because the client went away (ctx ended) ends at once.
	own      bool
	delivery *Delivery
	// mark: the wait is marked first (SetWaiting, for an own caller who
	// comes back for a turn: a prompt queued with waitFor is marked already).
	mark bool
	// ch is the turn's notifications, listened to since before it was queued
	// (nil: listen from now); queued is the turn as just queued then (no
	// notification can have been missed): the first read is skipped while
	// d > 0.
	ch     <-chan struct{}
	queued *store.Turn
}

// await is the one wait on a turn, for every caller: send and
// create_session for their prompt's reply (R7.11), the wait action (R7.12).
func (tq *turnQueue) await(ctx context.Context, w turnWait) (*store.Turn, error) {
	if w.own && w.mark && w.d > 0 {
		if err := tq.st.SetWaiting(ctx, w.id, w.d+waitingSlack); err != nil { // wait: the caller comes back for it
			return nil, err
		}
	}
	if w.ch == nil {
		ch, unsub := tq.listen(w.id)
		defer unsub()
		w.ch, w.queued = ch, nil
	}
	t, err := tq.awaitEnd(ctx, w)
	if !w.own {
		return t, err
	}
	got := err == nil && terminal(t.Status)
	if serr := tq.pipeline.endWait(ctx, w.delivery, w.id, got); serr != nil {
		return nil, serr
	}
	return t, err
}

// awaitEnd is await's loop on w.ch, the turn's notifications.
func (tq *turnQueue) awaitEnd(ctx context.Context, w turnWait) (*store.Turn, error) {
	id, d := w.id, w.d
	timer := tq.opts.Timers.NewTimer(d)
	defer timer.Stop()
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	t := w.queued
	for hooked := false; ; hooked = true {
		if t == nil || d <= 0 {
			var err error
			if t, err = tq.st.GetTurn(ctx, id); err != nil {
				return nil, fmt.Errorf("wait on turn %s: %w", id8(id), err)
			}
			if settled(t) || d <= 0 {
				return t, nil
			}
		}
		if !hooked {
			waitBegins(ctx, "", id) // R24.1: the call waits now; a client that takes tasks has its task
		}
		select {
		case <-w.ch:
			if ft := tq.endedHere(id); ft != nil {
				return ft, nil
			}
			if tq.drainer.isEnding(id) {
				// A drain here is writing the turn's end: it hands the
				// record over right after the notification this wake-up
				// came from (the 2 s re-check reads it should it not).
				continue
			}
		case <-recheck.C:
		case <-timer.C():
			return tq.st.GetTurn(ctx, id)
		case <-ctx.Done():
			if t == w.queued { // not read yet
				return tq.st.GetTurn(context.WithoutCancel(ctx), id)
			}
			return t, nil
		}
		t = nil
	}
}

func terminal(status store.TurnStatus) bool { return status.Ended() }

// settled says whether a wait on turn t is over: the turn ended, or it waits
// on a question.
func settled(t *store.Turn) bool { return t.Status.Ended() || t.Question != "" }

// endedHere is the record of turn id as it ended, when it ended in this
// process (a drain here handed it over with the notification); else nil.
func (tq *turnQueue) endedHere(id string) *store.Turn {
	ft, _ := tq.hub.val("turn:" + id).(*store.Turn)
	if ft == nil || !ft.Status.Ended() {
		return nil
	}
	cp := *ft
	return &cp
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
	own := t.Caller == c.s.ID
	t, err = tq.await(ctx, turnWait{id: t.ID, d: wait, own: own, delivery: c.delivery, mark: own})
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
