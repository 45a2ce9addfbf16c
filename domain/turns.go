package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oar/relay"
	"github.com/oar/relay/clock"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/otelx"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// Causes a running turn's context is cancelled with.
var (
	errStopped  = errors.New("stopped")
	errTimeout  = errors.New("turn timeout")
	errShutdown = errors.New("process shutting down")
	// errLeaseLost: the drain no longer holds its session's lease (this
	// process was paused or cut off past it); another process ends the turn.
	errLeaseLost = errors.New("session lease lost")
)

// ErrRetryLater tells the worker to run the drain again later (the session's
// lease is held elsewhere, or this process is shutting down and handed the
// turn back to the queue).
var ErrRetryLater = errors.New("retry the drain later")

// leaseTTL is how long a session's lease outlives its last renewal (every
// leaseTTL/3): a dead worker's turn is found by the drain sweep (every 5 s)
// once its lease is gone, within 30 s of the death (R18.11).
const leaseTTL = 15 * time.Second

// Drain runs the next queued turn of a session (one turn per job, in order,
// under the session's lease) and starts the job for the one after it.
func (dr *drainer) Drain(ctx context.Context, sid string) error {
	if dr.isStopping() {
		return ErrRetryLater
	}
	owner := dr.newLeaseOwner()
	// One round trip: the session, its lease, and (no turn left running, one
	// queued) the next turn popped and marked running, the console notified
	// (R19.6), whether anything watches the session, the turn's history.
	d, err := dr.st.StartDrain(ctx, sid, owner, leaseTTL, dr.now(), dr.drainHistory)
	if err != nil {
		return fmt.Errorf("start the drain: %w", err) // RunJob names the session
	}
	return dr.drainFrom(ctx, sid, owner, d)
}

// newLeaseOwner names a drain's hold on a session's lease; its prefix is this
// process's worker id (resumable).
func (dr *drainer) newLeaseOwner() string { return dr.opts.WorkerID + ":" + store.NewID(4) }

// drainFrom is Drain after its first step d, taken for owner (by StartDrain,
// or with the prompt's push when the drain starts where it was queued).
func (dr *drainer) drainFrom(ctx context.Context, sid, owner string, d *store.Drain) error {
	var err error
	switch d.State {
	case store.DrainNoSession:
		return nil
	case store.DrainLeaseHeld:
		return ErrRetryLater
	}
	s := d.Session
	run := &drainRun{s: s, orch: orchestrator(dr.opts.Name, s), l: drainLease{fence: owner}}
	rel := &leaseRelease{owner: owner}
	defer func() {
		if rel.released {
			return // with the turn's outcome (EndTurn)
		}
		rctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
		defer cancel()
		_ = dr.st.ReleaseLease(rctx, sid, owner)
	}()
	id, t := "", d.Turn
	// The claim on the turn this drain takes goes with the drain, unless
	// its agent started here and its outcome was not written (unclaim).
	defer func() {
		if id != "" {
			dr.unclaim(id)
		}
	}()
	if t != nil {
		id = t.ID
		dr.claim(id)
		if d.Watched {
			dr.pipeline.busyAgain(ctx, sid)
		}
	} else {
		if id, t, err = dr.nextTurn(ctx, run); err != nil || t == nil {
			return err
		}
		d.History = nil // read when the turn starts
	}
	// From here, the turn's outcome may release the lease when nothing more
	// is queued (one round trip less).
	run.l.rel = rel
	var more bool
	if s.Archived {
		more, err = dr.finish(ctx, run, turnEnd{id: id, status: store.TurnStopped, errText: "the session was archived"})
	} else {
		more, err = dr.run(ctx, run, t, d.History)
	}
	if err != nil {
		return err
	}
	if more {
		// The lease goes before the next drain is enqueued: a worker that
		// takes that drain at once must find the session free, or it would
		// wait out a retry (1 s) for nothing.
		if !rel.released {
			rel.released = true
			if err := dr.st.ReleaseLease(ctx, sid, owner); err != nil {
				dr.log.Warn("release the lease before the next drain; it expires on its own", "session", id8(sid), "err", err)
			}
		}
		// The next turn is another caller's: its drain starts no part of this trace.
		if err := dr.enqueueDrain(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), sid); err != nil {
			return err
		}
	}
	return nil
}

// nextTurn is the turn a drain runs when its first step took none, claimed
// for this process. A turn left running holds no lease any more: its worker
// died — unless this process took it and never learned it (resumable), then
// it is that turn; a dead worker's turn is ended first, and the next queued
// one popped. No turn: nothing queued.
func (dr *drainer) nextTurn(ctx context.Context, d *drainRun) (string, *store.Turn, error) {
	sid := d.s.ID
	cur, err := dr.st.CurrentTurn(ctx, sid)
	if err != nil {
		return "", nil, err
	}
	if cur != "" {
		if rt := dr.resumable(ctx, cur); rt != nil {
			dr.log.Warn("turn resumed: this process took it off its queue but the answer was lost (Redis went away); its agent had not started",
				"session", id8(sid), "turn", id8(cur))
			dr.claim(cur)
			dr.pipeline.busyAgain(ctx, sid)
			return cur, rt, nil
		}
		dr.log.Warn("turn abandoned by a dead worker", "session", sid, "turn", cur)
		if _, err := dr.finish(ctx, d, turnEnd{id: cur, status: store.TurnError,
			errText: "The worker running this turn stopped before the turn finished (its process ended); the prompt was not run again."}); err != nil {
			return "", nil, err
		}
	}
	id, err := dr.st.PopTurnBy(ctx, sid, d.orch, dr.now(), d.l.fence)
	if err != nil || id == "" {
		return "", nil, err
	}
	dr.claim(id)
	t, err := dr.st.GetTurn(ctx, id)
	if err != nil {
		return id, nil, dr.putBack(ctx, sid, id, err)
	}
	dr.pipeline.busyAgain(ctx, sid)
	dr.relay.notify(ctx, "session:"+sid) // the turn runs: the owner's console (R19.6)
	return id, t, nil
}

// claim records that this process took turn id off its queue (see resumable).
func (dr *drainer) claim(id string) {
	dr.mu.Lock()
	dr.claims[id] = false
	dr.mu.Unlock()
}

// agentStarted records that the claimed turn's agent started in this process.
func (dr *drainer) agentStarted(id string) {
	dr.mu.Lock()
	if _, ok := dr.claims[id]; ok {
		dr.claims[id] = true
	}
	dr.mu.Unlock()
}

// unclaim ends a drain's claim on a turn whose agent did not start here (a
// later drain may run it). A claim whose agent started stays until the
// turn's outcome is written (forgetClaim): if it never is (Redis stayed
// away, a panic), no later drain here runs that prompt again; one ends it
// as abandoned.
func (dr *drainer) unclaim(id string) {
	dr.mu.Lock()
	if !dr.claims[id] {
		delete(dr.claims, id)
	}
	dr.mu.Unlock()
}

// ending marks (on) or unmarks a turn whose outcome a drain of this process
// is writing: the notification of its end may wake a waiting caller here
// before the record is handed over (finishEmit).
func (dr *drainer) ending(id string, on bool) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if on {
		dr.endingNow[id] = true
	} else {
		delete(dr.endingNow, id)
	}
}

// isEnding reports whether a drain of this process is writing turn id's outcome.
func (dr *drainer) isEnding(id string) bool {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return dr.endingNow[id]
}

// forgetClaim drops the claim on a turn whose outcome was written.
func (dr *drainer) forgetClaim(id string) {
	dr.mu.Lock()
	delete(dr.claims, id)
	dr.mu.Unlock()
}

// resumable returns the turn cur, left running without a lease, when this
// process took it off its queue (its record names a lease owner of this
// process) but no drain here claimed it: the step that took it ran in Redis
// and its answer was lost (Redis stopped or the connection broke), so its
// agent never started and the turn can run now. Else nil: the turn was
// abandoned by another process, or its agent ran here.
func (dr *drainer) resumable(ctx context.Context, cur string) *store.Turn {
	t, err := dr.st.GetTurn(ctx, cur)
	if err != nil || t.Status != store.TurnRunning || !strings.HasPrefix(t.Drainer, dr.opts.WorkerID+":") {
		return nil
	}
	dr.mu.Lock()
	_, claimed := dr.claims[cur]
	dr.mu.Unlock()
	if claimed {
		return nil
	}
	return t
}

// putBack returns a turn that was taken but whose agent never started (a
// Redis error on the way) to the head of its queue, so the drain's retry runs
// it instead of finding it abandoned (R18.11). It returns cause for the retry.
func (dr *drainer) putBack(ctx context.Context, sid, turnID string, cause error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachedWriteTimeout)
	defer cancel()
	if err := dr.st.RequeueTurn(wctx, sid, turnID); err != nil {
		dr.log.Error("a taken turn could not be put back; it will end as abandoned", "session", sid, "turn", turnID, "err", err, "cause", cause)
	} else {
		dr.log.Warn("turn put back after an error before its agent started", "session", sid, "turn", turnID, "err", cause)
	}
	return fmt.Errorf("turn %s not started: %w", turnID, cause)
}

// drainLease is a drain's hold on its session's lease, handed to the turn's
// outcome (the zero value: outside a drain). fence is the owner every write
// of the turn is fenced by; rel, once set, lets the outcome release the
// lease when no more turns are queued.
type drainLease struct {
	fence string
	rel   *leaseRelease
}

// drainRun is one drain of a session: the session, the orchestrator whose
// 4-at-work cap it counts toward, and the drain's hold on its lease.
type drainRun struct {
	s    *store.Session
	orch string
	l    drainLease
}

type leaseRelease struct {
	owner    string
	released bool
}

// historyRead is how many last messages a turn's history is read from: the
// prompt is near the end unless many were queued after it.
const historyRead = 64

// finishGiveUp bounds how long a finished turn's outcome is retried while
// Redis does not answer.
const finishGiveUp = 3 * time.Minute

// finishLater retries writing a turn's outcome while Redis does not answer:
// each try first takes the session's lease back for this drain, so a turn
// whose agent finished during an outage is recorded as it ended instead of
// being found "abandoned" when Redis returns.
func (dr *drainer) finishLater(ctx context.Context, owner, sid string, write func(context.Context) (bool, error), first error) (bool, error) {
	dr.log.Warn("the turn's outcome could not be written; retrying until Redis answers", "session", id8(sid), "err", first)
	deadline := time.Now().Add(finishGiveUp)
	wait := finishRetryFirst
	err := first
	for time.Now().Before(deadline) {
		time.Sleep(wait)
		wait = min(2*wait, finishRetryMax)
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachedWriteTimeout)
		if owner != "" {
			if ok, lerr := dr.st.RenewLease(c, sid, owner, leaseTTL); lerr == nil && !ok {
				if got, aerr := dr.st.AcquireLease(c, sid, owner, leaseTTL); aerr == nil && !got {
					cancel()
					return false, fmt.Errorf("another drain took session %s while its outcome waited: %w", sid, first)
				}
			}
		}
		var more bool
		more, err = write(c)
		cancel()
		if err == nil {
			dr.log.Info("the turn's outcome was written after Redis came back", "session", id8(sid))
			return more, nil
		}
		if errors.Is(err, store.ErrFenced) {
			return false, err
		}
	}
	return false, fmt.Errorf("write the turn's outcome: %w", err)
}

// fenced is the end of a drain whose outcome the store refused: the session's
// lease is another drain's now, or the turn was ended by another process
// (this one was paused or cut off past the lease). Nothing of this turn is
// written — no reply, event, usage or next drain — so each turn keeps one
// outcome, in order; the drain that holds the lease took the session over.
func (dr *drainer) fenced(sid, turnID string) (bool, error) {
	dr.forgetClaim(turnID)
	dr.log.Warn("the turn's outcome was not written: this process lost the session's lease while the turn ran (paused or cut off from Redis); another process ended the turn",
		"session", id8(sid), "turn", id8(turnID))
	return false, nil
}

// turnEnd is how a drain's turn ended, as finish writes it.
type turnEnd struct {
	id      string
	status  store.TurnStatus
	reply   string
	model   string // the model that replied
	errText string
	usage   *store.UsageAdd // a turn whose agent ran: its usage, counted with the outcome of a done turn (countUsage); nil: none
}

// finish ends a turn and records its outcome; it reports whether more turns
// wait. A turn that ended in error is written and then its events emitted one
// by one (finishError); any other, with its turn_end event, in one step
// (finishEmit).
func (dr *drainer) finish(ctx context.Context, d *drainRun, e turnEnd) (bool, error) {
	now := dr.now()
	end := &store.TurnEnd{Session: d.s.ID, Orchestrator: d.orch, Turn: e.id, Fence: d.l.fence, At: now, Msg: endMessage(e, now),
		Status: e.status, Reply: e.reply, ReplyModel: e.model, Error: e.errText}
	if e.status == store.TurnError {
		return dr.finishError(ctx, d, end)
	}
	end.Usage = e.usage
	return dr.finishEmit(ctx, d, end)
}

// endMessage is the message a turn's end leaves in the conversation: its
// reply (done, or stopped with a reply so far), its error; nil for none.
func endMessage(e turnEnd, now time.Time) *store.Message {
	switch {
	case e.status == store.TurnDone || (e.status == store.TurnStopped && e.reply != ""):
		return &store.Message{ID: store.NewID(16), Role: "assistant", Text: e.reply, CreatedAt: now}
	case e.status == store.TurnError:
		return &store.Message{ID: store.NewID(16), Role: "event", Text: "The turn ended with an error: " + e.errText, CreatedAt: now}
	}
	return nil
}

// writeEnd writes a turn's end (EndTurn), even if the job's context is gone:
// the outcome must not be lost. While Redis is away (a restart, a blip) it
// keeps the outcome and writes it once Redis is back, holding the session's
// lease again first, so no other process takes the turn for abandoned
// meanwhile (finishLater).
func (dr *drainer) writeEnd(ctx context.Context, end *store.TurnEnd) (*store.TurnEnded, error) {
	var res *store.TurnEnded
	write := func(c context.Context) (bool, error) {
		r, err := dr.st.EndTurn(c, end)
		if err != nil {
			return false, err
		}
		res = r
		return r.More, nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishWriteTimeout)
	_, err := write(wctx)
	cancel()
	if err != nil && !errors.Is(err, store.ErrFenced) {
		_, err = dr.finishLater(ctx, end.Fence, end.Session, write, err)
	}
	return res, err
}

// finishError is finish for a turn that ended in error: its outcome, then
// its events (R8.1: error and turn_end (error)) and the notifications.
func (dr *drainer) finishError(ctx context.Context, d *drainRun, end *store.TurnEnd) (bool, error) {
	s, id := d.s, end.Turn
	res, err := dr.writeEnd(ctx, end)
	if errors.Is(err, store.ErrFenced) {
		return dr.fenced(s.ID, id)
	}
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishWriteTimeout) // for the events below
	defer cancel()
	dr.forgetClaim(id) // the outcome is written
	dr.pipeline.emit(wctx, &store.Event{Kind: EvError, Session: s.ID, Title: s.Title, Text: end.Error, Turn: id})
	text := excerpt(end.Error, 240) // a line shows 120 characters; events and replay streams keep no whole replies
	dr.pipeline.emit(wctx, &store.Event{Kind: EvTurnEnd, Session: s.ID, Title: s.Title, Status: string(end.Status), Text: text, Turn: id})
	dr.relay.notify(wctx, "session:"+s.ID)
	defer dr.relay.turnNotice(wctx, s, id, nil, end.Status, text) // R23.10, after the waiting caller woke
	defer dr.hub.fire("turn:" + id)                               // a caller waiting in this process wakes now, not when the notification comes back
	return res.More, dr.st.Notify(wctx, "turn:"+id)
}

// finishEmit is finish for a turn that did not end in error: its outcome,
// its turn_end event (R8.1) and the notifications, in one round trip
// (EndTurn with the event), in the order finishError writes them one by
// one: the outcome, the event, "session:SID", the event's fan-out job when
// something might watch it, then "turn:ID". With the drain's leaseRelease
// (l.rel), nothing more queued and no fan-out to start, the lease is
// released in the same step (the drain has nothing left to do under it).
func (dr *drainer) finishEmit(ctx context.Context, d *drainRun, end *store.TurnEnd) (bool, error) {
	s, id := d.s, end.Turn
	end.Event = dr.turnEndEvent(ctx, s, end)
	if d.l.rel != nil {
		end.ReleaseOwner = d.l.rel.owner
	}
	// Until the caller waiting here has the record (deferred below), a
	// wake-up from the end's notification does not read the turn.
	dr.ending(id, true)
	defer dr.ending(id, false)
	res, err := dr.writeEnd(ctx, end)
	if errors.Is(err, store.ErrFenced) {
		return dr.fenced(s.ID, id)
	}
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishWriteTimeout)
	defer cancel()
	dr.forgetClaim(id) // the outcome is written
	if d.l.rel != nil && res.Released {
		d.l.rel.released = true
	}
	if dr.met != nil {
		dr.met.Event(end.Event.Kind)
	}
	// A caller waiting in this process (the drain started where the prompt
	// was queued) wakes now, with the turn as it ended, rather than when the
	// notification comes back and it reads the turn.
	defer dr.relay.turnNotice(wctx, s, id, res.Turn, end.Status, end.Reply) // R23.10, after the waiting caller woke
	defer dr.hub.fireWith("turn:"+id, res.Turn)
	if !res.Watched {
		return res.More, nil // "turn:ID" was published with the outcome
	}
	if err := dr.enq.Enqueue(wctx, jobs.TypeFanout, end.Event, "", timeZero); err != nil {
		dr.log.Warn("event fan-out not started", "kind", end.Event.Kind, "session", end.Event.Session, "err", err)
	}
	return res.More, dr.st.Notify(wctx, "turn:"+id)
}

// turnEndEvent is the turn_end event of a turn that did not end in error.
func (dr *drainer) turnEndEvent(ctx context.Context, s *store.Session, end *store.TurnEnd) *store.Event {
	ev := &store.Event{ID: "ev_" + store.NewID(8), At: dr.now(), Kind: EvTurnEnd, Session: s.ID, Title: s.Title,
		Status: string(end.Status), Text: excerpt(end.Reply, 240), Turn: end.Turn}
	if ev.Title == "" {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishWriteTimeout)
		defer cancel()
		if cur, err := dr.st.GetSession(wctx, s.ID); err == nil {
			ev.Title = cur.Title
		}
	}
	return ev
}

func (dr *drainer) isStopping() bool {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return dr.stopping
}

// Shutdown hands this process's running turns back to their queues; call it
// before stopping the worker (graceful shutdown, nothing lost).
func (dr *drainer) Shutdown() {
	dr.mu.Lock()
	dr.stopping = true
	for _, cancel := range dr.running {
		cancel(errShutdown)
	}
	dr.mu.Unlock()
}

func (dr *drainer) run(ctx context.Context, d *drainRun, t *store.Turn, msgs []store.Message) (bool, error) {
	s := d.s
	p, ok := dr.models.providers[s.Provider]
	if !ok {
		return dr.finish(ctx, d, turnEnd{id: t.ID, status: store.TurnError, errText: fmt.Sprintf("provider %q is not configured on this relay", s.Provider)})
	}
	st, err := dr.relay.settings(ctx)
	if err != nil {
		return false, dr.putBack(ctx, s.ID, t.ID, err)
	}
	// R18.3: the folder is checked again when the turn starts (a symlink may
	// have been changed to point elsewhere); the agent runs in the resolved one.
	cwd := s.Cwd
	if cwd != "" {
		resolved, why := dr.relay.folderAllowed(cwd)
		if why != "" {
			return dr.finish(ctx, d, turnEnd{id: t.ID, status: store.TurnError, errText: why + " Nothing was run."})
		}
		cwd = resolved
	}
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tr := &turnRun{drainRun: d, t: t, cancel: cancel, lim: startTurnLimit(dr.opts.Timers, st.MaxTurnSeconds, cancel)}
	defer tr.lim.timer.Stop()
	settingsCh, unsubSettings := dr.hub.sub("settings")
	defer unsubSettings()
	defer dr.track(t.ID, cancel)()
	// R18.19: an agent process gets a token of its own for this turn (the
	// session's token is stored as a hash and cannot be handed out again).
	turnTok, dropTok, err := dr.tokens.mintTurnToken(ctx, p, s.ID)
	if err != nil {
		return false, dr.putBack(ctx, s.ID, t.ID, err)
	}
	tr.token = turnTok
	defer dropTok() // once the outcome is written: no round trip in front of the reply (the agent is gone by then)
	// Stop requests arrive through the notification hub.
	stopCh, unsub := dr.hub.sub("stop:" + t.ID)
	defer unsub()
	defer dr.keepTurn(ctx, tr, stopCh, settingsCh)() // the lease renewer is joined before the lease is released
	if t.StopRequested {
		cancel(errStopped)
	}
	pt, err := dr.providerTurn(ctx, p, tr, st, cwd, msgs)
	if err != nil {
		return false, dr.putBack(ctx, s.ID, t.ID, err)
	}
	return dr.runAgent(ctx, tctx, p, tr, pt)
}

// turnRun is a drain's turn while its agent runs.
type turnRun struct {
	*drainRun
	t      *store.Turn
	token  string                  // the turn's own token (R18.19)
	cancel context.CancelCauseFunc // stops the agent, with the cause
	lim    *turnLimit
}

// runAgent runs the turn's agent on provider p, in tctx (the turn's context,
// cancelled with its cause), and finishes the turn as it ended (or hands it
// back).
func (dr *drainer) runAgent(ctx, tctx context.Context, p provider.Provider, tr *turnRun, pt provider.Turn) (bool, error) {
	s, t := tr.s, tr.t
	// R25.1: the provider's turn span; the agent process gets its
	// TRACEPARENT. Ids only: never the prompt, the reply or the token.
	tctx, span := otelx.Tracer().Start(tctx, "turn", trace.WithAttributes(otelx.KeyProvider.String(s.Provider),
		otelx.KeyTurn.String(t.ID), otelx.KeySession.String(s.ID)))
	defer span.End()
	pt.TraceEnv = otelx.Env(tctx)
	h := &host{drainer: dr, sid: s.ID, turn: t.ID, prov: s.Provider, fence: tr.l.fence}
	h.output()
	dr.turnStarted(s, t.ID)
	stopProgress := dr.turnProgress(s, t.ID, h, tr.lim)
	out, runErr := p.Run(tctx, pt, h)
	stopProgress()
	out.Text = provider.BoundReply(out.Text) // R18.4, whatever the provider
	cause := context.Cause(tctx)
	if tctx.Err() == nil {
		cause = nil
	}
	if handedBack(cause) {
		return dr.handBack(ctx, s, t.ID, tr.l.fence, cause)
	}
	e := dr.turnOutcome(h, tr.lim, out.Text, cause, runErr)
	if e.status == store.TurnError {
		span.SetStatus(codes.Error, "the turn ended in an error") // not the error's text: it may quote the agent
	}
	dr.turnEnded(s, t.ID, e.status, e.errText, tr.lim.started)
	e.usage = dr.usage.countUsage(ctx, s.Provider, e.status, out) // tokens, cost, a usage limit (R7.3, R17.3)
	e.model = out.Model
	if e.model == "" {
		e.model = s.Model
	}
	dr.usage.noteModel(ctx, s, t.ID, e.status, out.Model)
	return dr.finish(ctx, tr.drainRun, e)
}

// turnLimit is max_turn_seconds for one running turn (R18.13): it counts
// from the turn's start, with the setting as it is now; a change meanwhile
// moves the deadline (no queue job timeout ever ends a running turn).
type turnLimit struct {
	started time.Time   // wall time (what the turn took is measured by it)
	clk     clock.Clock // the clock of the durations of work (Options.Timers)
	at      time.Time   // clk's time at the start
	secs    atomic.Int64
	timer   clock.Timer
}

func startTurnLimit(clk clock.Clock, secs int, cancel context.CancelCauseFunc) *turnLimit {
	l := &turnLimit{started: time.Now(), clk: clk, at: clk.Now()}
	l.secs.Store(int64(secs))
	l.timer = clk.AfterFunc(time.Duration(secs)*time.Second, func() { cancel(errTimeout) })
	return l
}

// recheck reads the setting from Redis, not the process cache (this may run
// before the cache was dropped for the same notification), and moves the
// deadline when it changed.
func (dr *drainer) recheckLimit(ctx context.Context, l *turnLimit) {
	cur, ok, err := dr.st.LoadSettings(context.WithoutCancel(ctx))
	if err != nil || !ok || int64(cur.MaxTurnSeconds) == l.secs.Load() || cur.MaxTurnSeconds <= 0 {
		return
	}
	l.secs.Store(int64(cur.MaxTurnSeconds))
	l.timer.Reset(l.at.Add(time.Duration(cur.MaxTurnSeconds) * time.Second).Sub(l.clk.Now()))
}

// track records a turn this process runs, so Shutdown can hand it back (a
// process already stopping cancels it at once); the func forgets it.
func (dr *drainer) track(turn string, cancel context.CancelCauseFunc) func() {
	dr.mu.Lock()
	if dr.stopping {
		dr.mu.Unlock()
		cancel(errShutdown)
	} else {
		dr.running[turn] = cancel
		dr.mu.Unlock()
	}
	return func() {
		dr.mu.Lock()
		delete(dr.running, turn)
		dr.mu.Unlock()
	}
}

// stopHere stops turn at once when it runs in this process (Kill session,
// R23.6: the turn ends as stopped, whatever its agent's end says).
func (dr *drainer) stopHere(turn string) bool {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	cancel := dr.running[turn]
	if cancel != nil {
		cancel(errStopped)
	}
	return cancel != nil
}

// keepTurn watches a running turn until the returned func is called (it
// joins the goroutine): a stop request ends it, a settings change moves its
// deadline, and every leaseTTL/3 the session's lease and the turn's token
// are renewed and a missed stop is looked for. A lease found lost stops the
// agent, and nothing more of the turn is written (another drain may run
// the session now).
func (dr *drainer) keepTurn(ctx context.Context, tr *turnRun, stopCh, settingsCh <-chan struct{}) func() {
	sid, turn, cancel := tr.s.ID, tr.t.ID, tr.cancel
	done := make(chan struct{})
	renewer := make(chan struct{})
	go func() {
		defer close(renewer)
		renew := time.NewTicker(leaseTTL / 3)
		defer renew.Stop()
		for {
			select {
			case <-done:
				return
			case <-stopCh:
				// The hub also wakes every waiter when its subscription came
				// back (hub.fireAll): only a stop asked for stops the turn
				// (StopTurn writes the request before it publishes).
				if cur, err := dr.st.GetTurn(context.WithoutCancel(ctx), turn); err == nil && cur.StopRequested {
					cancel(errStopped)
				}
			case <-settingsCh: // also fired after a lost notification subscription (hub.fireAll)
				dr.recheckLimit(ctx, tr.lim)
			case <-renew.C:
				if ok, err := dr.st.RenewLease(context.WithoutCancel(ctx), sid, tr.l.fence, leaseTTL); err == nil && !ok {
					dr.log.Warn("session lease lost: the agent is stopped", "session", id8(sid), "turn", id8(turn))
					cancel(errLeaseLost)
				}
				if tr.token != "" {
					_, _ = dr.st.RenewTurnToken(context.WithoutCancel(ctx), tr.token, turnTokenTTL)
				}
				// A stop whose notification was missed.
				if cur, err := dr.st.GetTurn(context.WithoutCancel(ctx), turn); err == nil && cur.StopRequested {
					cancel(errStopped)
				}
			}
		}
	}()
	return func() { close(done); <-renewer }
}

// providerTurn is what the provider is given for turn t: the history when
// it wants one, where the relay's API listens, and relay_tool's URL while
// agent sessions are on or a relay is paired (R4.2 Decision).
func (dr *drainer) providerTurn(ctx context.Context, p provider.Provider, tr *turnRun, st store.Settings, cwd string, msgs []store.Message) (provider.Turn, error) {
	s, t := tr.s, tr.t
	var history []provider.HistoryItem
	switch {
	case !p.Info().WantsHistory: // the agent keeps its own conversation, or needs none
	case msgs != nil: // read when the turn was popped
		history = historyOf(msgs, t.ID)
	default:
		var err error
		if history, err = dr.history(ctx, s.ID, t.ID); err != nil {
			return provider.Turn{}, err
		}
	}
	base := dr.publicURL(ctx)
	pt := provider.Turn{SessionID: s.ID, TurnID: t.ID, Prompt: t.Text, Model: s.Model, Effort: s.Effort, Mode: s.Mode,
		Cwd: cwd, History: history, Token: tr.token, RelayURL: base, Relay: dr.opts.Name, AgentSession: agentSessionOf(s)}
	dr.updates.claudeSettings(p, s, &pt)
	if base != "" && (st.AgentSessions || dr.relay.anyPairing(ctx)) {
		pt.MCPURL = base + "/mcp"
	}
	return pt, nil
}

// publicURL is the relay's public URL: this process's API, or in a
// worker-only process the one the API recorded ("" when none is known).
func (dr *drainer) publicURL(ctx context.Context) string {
	if dr.opts.BaseURL != "" {
		return dr.opts.BaseURL
	}
	base, _ := dr.st.APIURL(ctx)
	return base
}

// handedBack says whether a turn that ended for cause is handed back rather
// than finished: its lease was lost, this process shuts down, or the job's
// own context ended (its process is going away; drain jobs have no timeout
// of their own, R18.13).
func handedBack(cause error) bool {
	return cause != nil && !errors.Is(cause, errStopped) && !errors.Is(cause, errTimeout)
}

// handBack returns a turn to its queue, fenced by the lease (a lost lease
// writes nothing).
func (dr *drainer) handBack(ctx context.Context, s *store.Session, turn, leaseOwner string, cause error) (bool, error) {
	if errors.Is(cause, errLeaseLost) {
		return dr.fenced(s.ID, turn)
	}
	if err := dr.st.RequeueTurnBy(context.WithoutCancel(ctx), s.ID, turn, leaseOwner); errors.Is(err, store.ErrFenced) {
		return dr.fenced(s.ID, turn)
	} else if err != nil {
		return false, err
	}
	if errors.Is(cause, errShutdown) {
		dr.log.Info("turn handed back (shutdown)", "session", id8(s.ID), "turn", id8(turn), "provider", s.Provider)
	}
	return false, ErrRetryLater
}

// turnStarted counts and logs a turn's start (R18.9: ids and provider,
// never the prompt) and marks its agent started (resumable).
func (dr *drainer) turnStarted(s *store.Session, turn string) {
	if dr.met != nil {
		dr.met.TurnStarted(s.Provider)
	}
	dr.log.Info("turn started", "session", id8(s.ID), "turn", id8(turn), "provider", s.Provider)
	dr.agentStarted(turn)
}

// turnOutcome is how a turn that is not handed back ended: done, stopped
// (its reply so far), over max_turn_seconds, or failed.
func (dr *drainer) turnOutcome(h *host, lim *turnLimit, reply string, cause, runErr error) turnEnd {
	e := turnEnd{id: h.turn, status: store.TurnDone, reply: reply}
	switch {
	case errors.Is(cause, errStopped):
		if e.reply == "" {
			e.reply = h.partialText()
		}
		e.status = store.TurnStopped
	case errors.Is(cause, errTimeout):
		e.status, e.errText = store.TurnError, fmt.Sprintf("The turn ran longer than max_turn_seconds (%d s) and was stopped.", lim.secs.Load())
	case runErr != nil:
		e.status, e.errText = store.TurnError, turnErrorText(runErr)
		if e.errText == "" {
			dr.log.Error("turn failed inside the relay", "session", h.sid, "turn", h.turn, "err", runErr)
			e.errText = "The turn failed inside the relay (the log has the detail)."
		}
	}
	return e
}

// turnEnded counts and logs a turn's end (R18.9: ids and provider, never the prompt).
func (dr *drainer) turnEnded(s *store.Session, turn string, status store.TurnStatus, errText string, started time.Time) {
	if dr.met != nil {
		dr.met.TurnFinished(s.Provider, string(status), time.Since(started))
	}
	took := time.Since(started).Round(time.Millisecond)
	if status == store.TurnError {
		dr.log.Warn("turn ended", "session", id8(s.ID), "turn", id8(turn), "provider", s.Provider, "status", status, "duration", took, "cause", errText)
	} else {
		dr.log.Info("turn ended", "session", id8(s.ID), "turn", id8(turn), "provider", s.Provider, "status", status, "duration", took)
	}
}

// defaultTurnLogEvery is timing.turn_log_every when the config gives none (R25.2).
const defaultTurnLogEvery = 5 * time.Minute

// turnProgress logs one INFO line every timing.turn_log_every while the turn
// runs (R25.2): ids, provider, how long it has run and the seconds since the
// agent's last output (never the prompt). On the wall clock, as the lease
// renewal: a domain test's Sim clock of work sees no timer of it. The
// returned func stops it (and joins its goroutine).
func (dr *drainer) turnProgress(s *store.Session, turn string, h *host, lim *turnLimit) func() {
	every := dr.opts.Timing.TurnLogEvery
	if every <= 0 {
		every = defaultTurnLogEvery
	}
	done := make(chan struct{})
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				dr.log.Info("turn running", "session", id8(s.ID), "turn", id8(turn), "provider", s.Provider,
					"elapsed", now.Sub(lim.started).Round(time.Second), "since_output_s", int64(now.Sub(h.lastOutput())/time.Second))
			}
		}
	}()
	return func() { close(done); <-joined }
}

// history is the conversation before a turn's prompt (at most 50 messages).
func (dr *drainer) history(ctx context.Context, sid, turnID string) ([]provider.HistoryItem, error) {
	msgs, err := dr.st.LastMessages(ctx, sid, historyRead)
	if err != nil {
		return nil, fmt.Errorf("read the history of turn %s of session %s: %w", id8(turnID), id8(sid), err)
	}
	return historyOf(msgs, turnID), nil
}

// historyOf is the history before turnID's prompt in msgs, the session's last messages.
func historyOf(msgs []store.Message, turnID string) []provider.HistoryItem {
	end := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].ID == turnID {
			end = i
			break
		}
	}
	start := end - 50
	if start < 0 {
		start = 0
	}
	out := make([]provider.HistoryItem, 0, end-start)
	for _, m := range msgs[start:end] {
		if m.Role == "activity" {
			continue // 🛰️ lines record the agent's own tool calls; its history has those calls itself
		}
		out = append(out, provider.HistoryItem{Role: m.Role, Text: m.Text})
	}
	return out
}

// host is the relay as a provider sees it during one turn.
type host struct {
	drainer *drainer
	sid     string
	turn    string
	prov    string
	fence   string // the drain's lease owner: the turn's writes are fenced by it

	mu      sync.Mutex
	partial string
	last    time.Time

	// out is when the agent last showed output (unix nanos, wall clock):
	// the turn's progress lines say how long ago (R25.2).
	out atomic.Int64
}

var _ provider.OutputHost = (*host)(nil)

// output notes that the agent showed something now.
func (h *host) output() { h.out.Store(time.Now().UnixNano()) }

// Output is provider.OutputHost: an agent CLI printed something (any line,
// stderr too).
func (h *host) Output() { h.output() }

func (h *host) lastOutput() time.Time { return time.Unix(0, h.out.Load()) }

// Activity appends an activity line of the running turn to the conversation
// (role "activity", R17.3). A 🛰️ line a provider reports is dropped: the
// relay writes that line itself for every relay_tool call (noteCall), so it
// comes once whatever the provider.
func (h *host) Activity(line string) {
	h.output()
	if strings.HasPrefix(line, relayCallMark) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveWriteTimeout)
	defer cancel()
	m := &store.Message{ID: store.NewID(16), Role: "activity", Text: line, CreatedAt: h.drainer.now()}
	if err := h.drainer.st.AppendMessage(ctx, h.sid, m); err != nil {
		h.drainer.log.Warn("activity line not stored", "session", h.sid, "err", err)
		return
	}
	h.drainer.relay.notify(ctx, "session:"+h.sid) // the owner's console shows it live
}

// SetAgentSession stores the agent CLI's conversation id with the session (R17.2).
func (h *host) SetAgentSession(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), liveWriteTimeout)
	defer cancel()
	if err := h.drainer.st.SetAgentSession(ctx, h.sid, h.prov, id); err != nil {
		h.drainer.log.Warn("agent conversation id not stored", "session", h.sid, "err", err)
	}
}

func (h *host) CallTool(ctx context.Context, args json.RawMessage) json.RawMessage {
	h.output()
	out, _ := h.drainer.relay.CallTool(ctx, h.sid, args, nil)
	return out
}

func (h *host) Partial(text string) {
	h.output()
	text = provider.BoundPartial(text)
	h.mu.Lock()
	h.partial = text
	if time.Since(h.last) < partialEvery {
		h.mu.Unlock()
		return
	}
	h.last = time.Now()
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), liveWriteTimeout)
	defer cancel()
	if err := h.drainer.st.SetTurnPartial(ctx, h.sid, h.turn, h.fence, text, h.drainer.now()); err != nil {
		return // fenced (another drain holds the session) or Redis away: no notification either
	}
	h.drainer.relay.notify(ctx, "session:"+h.sid) // the partial reply, live in the console (R19.6)
}

func (h *host) partialText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.partial
}

func (h *host) StartTask(ctx context.Context, spec provider.TaskSpec) (provider.Task, error) {
	h.output()
	return h.drainer.tasks.startTask(ctx, h.sid, spec)
}

func (h *host) AskUser(ctx context.Context, text string, options []string) (string, error) {
	h.output()
	dr := h.drainer
	q := &store.Question{ID: "q_" + store.NewID(8), Session: h.sid, Turn: h.turn, Kind: "ask_user", Question: text,
		Options: options, Status: "pending", CreatedAt: dr.now()}
	ch, unsub := dr.hub.sub("q:" + q.ID)
	defer unsub()
	if err := dr.st.SaveQuestion(ctx, q); err != nil {
		return "", fmt.Errorf("ask the user in turn %s: %w", id8(h.turn), err)
	}
	if err := dr.st.SetTurnQuestion(ctx, h.turn, q.ID); err != nil {
		return "", fmt.Errorf("ask the user in turn %s: %w", id8(h.turn), err)
	}
	dr.pipeline.emit(ctx, &store.Event{Kind: EvQuestionAsked, Session: h.sid, QuestionID: q.ID, Text: text})
	dr.relay.notify(ctx, "turn:"+h.turn)
	dr.relay.ownerNotice(ctx, relay.NoticeAsk, h.sid, "", text) // R23.10: the question card waits for the owner
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	for {
		cur, err := dr.st.GetQuestion(ctx, q.ID)
		if err == nil && cur.Status == "answered" {
			_ = dr.st.SetTurnQuestion(ctx, h.turn, "")
			return cur.Answer, nil
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
			q.Status = "cancelled"
			_ = dr.st.SaveQuestion(wctx, q)
			cancel()
			return "", ctx.Err()
		}
	}
}

// turnErrorText is what the agent sees of a provider's error: a TurnError's
// own words; "" for anything else (a store or host failure: logged, not shown).
func turnErrorText(err error) string {
	var te *provider.TurnError
	if errors.As(err, &te) {
		return te.Msg
	}
	return ""
}
