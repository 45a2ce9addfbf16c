package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
)

var timeZero time.Time

// pipeline is the delivery subsystem (R8): an event recorded (emit) fans out
// to the subscriptions that take it (Fanout, offer), is held through quiet
// hours and digests (hold, Release), buffered per watcher for the coalescing
// window (release, Flush), kept back by the wake limit into a summary
// (Summary), and delivered as one event prompt into the watcher (deliver);
// heartbeats, stall scans and the all-idle check feed it too. It sees the
// store only as recordStore and deliveryStore, and the rest of the relay
// only through pipelineHost.
type pipeline struct {
	st    pipelineStore
	enq   Enqueuer
	clk   clock.Clock
	now   func() time.Time
	log   *slog.Logger
	met   Metrics
	opts  *Options // the relay's: names, limits, timing
	relay pipelineHost
}

// pipelineStore is the store as the delivery pipeline sees it.
type pipelineStore interface {
	recordStore
	deliveryStore
}

// pipelineHost is what delivery asks of the rest of the relay: queueing the
// event prompt into a watcher (queue.go), the sessions' views (sessions.go),
// ending a subscription (subscribe.go) and telling the console (notify.go).
type pipelineHost interface {
	queue(ctx context.Context, p prompt) (*store.Turn, error)
	views(ctx context.Context, ss []*store.Session) ([]*view, error)
	endSubscription(ctx context.Context, sub *store.Subscription, reason string) error
	notify(ctx context.Context, what string)
}

// asynq keeps due times in whole seconds (truncating), so a job can start up
// to a second early; the handlers sleep that rest off (early) rather than
// rounding up here, which would make every timed delivery up to a second late.
func (p *pipeline) schedule(ctx context.Context, kind string, payload any, id string, at time.Time) error {
	if !at.After(p.now()) {
		return p.enq.Enqueue(ctx, kind, payload, id, timeZero)
	}
	return p.enq.Enqueue(ctx, kind, payload, id, p.clk.Wall(at))
}

// early handles a job that asynq ran before its due time (ProcessAt can run
// up to about a second early): a short wait is slept off; a longer one is
// scheduled again under a fresh task id. It reports whether the caller must stop.
func (p *pipeline) early(ctx context.Context, due time.Time, kind string, payload any, id string) (bool, error) {
	now := p.now()
	if !now.Before(due) {
		return false, nil
	}
	// asynq's earliness is in wall time (whole seconds): a short one, measured
	// on the wall, is slept off on the clock.
	if p.clk.Wall(due).Sub(p.clk.Wall(now)) <= earlyWaitMax {
		t := p.clk.NewTimer(due.Sub(now))
		defer t.Stop()
		select {
		case <-t.C():
			return false, nil
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	return true, p.schedule(ctx, kind, payload, id+":"+store.NewID(3), due)
}

func quietOf(sub *store.Subscription) *scheduler.Quiet {
	if sub.Quiet == nil {
		return nil
	}
	q, err := scheduler.ParseQuiet(sub.Quiet.From, sub.Quiet.To, sub.Quiet.TZ)
	if err != nil {
		return nil
	}
	return q
}

// takes reports whether a subscription takes an event (R8.4, R8.5, R8.7).
func (p *pipeline) takes(sub *store.Subscription, ev *store.Event) bool {
	if sub.EndReason != "" {
		return false
	}
	if ev.Sub != "" && ev.Sub != sub.ID {
		return false
	}
	if ev.Session != "" && ev.Session == sub.Watcher {
		return false // the own conversation is never watched
	}
	if ev.Session != "" && slices.Contains(sub.Exclude, ev.Session) {
		return false
	}
	if !slices.Contains(sub.Events, ev.Kind) {
		return false
	}
	if sub.Match != "" {
		re, err := regexp.Compile("(?i)" + sub.Match)
		if err != nil || !re.MatchString(EventLine(ev)) {
			return false
		}
	}
	return true
}

// Fanout matches an event against the subscriptions that watch its session
// (an index per session plus the "all" ones: the cost follows the matching
// subscriptions, not all of them) and offers it to each.
func (p *pipeline) Fanout(ctx context.Context, ev *store.Event) error {
	if ev.Watcher != "" { // addressed to one conversation (an ask's answer): no subscription needed
		return p.release(ctx, ev.Watcher, store.Batch{Kind: "plain", Events: []store.Event{*ev}, Urgent: urgent(ev.Kind)})
	}
	subs, ok, err := p.fanoutSubs(ctx, ev)
	if err != nil || !ok {
		return err
	}
	// The event's turn, read once for the no-echo rule (R8.18).
	var turn *store.Turn
	turnOf := func() (*store.Turn, error) {
		if turn == nil {
			if turn, err = p.st.GetTurn(ctx, ev.Turn); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
		}
		return turn, nil
	}
	for _, sub := range subs {
		if !p.takes(sub, ev) {
			continue
		}
		if err := p.fanoutTo(ctx, sub, ev, turnOf); err != nil {
			return err
		}
	}
	if ev.Sub == "" && (ev.Kind == EvTurnEnd || ev.Kind == EvTaskFinished || ev.Kind == EvTaskFailed || ev.Kind == EvSubagentFinished) {
		return p.checkAllIdle(ctx, watching(subs, ev.Session))
	}
	return nil
}

// fanoutTo offers ev to sub, a subscription that takes it, under the once
// and no-echo rules (R8.18); turnOf reads the event's turn.
func (p *pipeline) fanoutTo(ctx context.Context, sub *store.Subscription, ev *store.Event, turnOf func() (*store.Turn, error)) error {
	// A paired relay's conversation watches (R8.20): the event goes into
	// the subscription's stream only once it is to be delivered (after the
	// once and no-echo rules below), for its relay to poll; digest and
	// quiet hours are applied there (R8.21). Every other subscription's
	// stream keeps what it took, for replay.
	peerWatched := isPeerConversation(sub.Watcher)
	if !peerWatched {
		if err := p.st.AppendSubEvent(ctx, sub.ID, ev, int64(p.opts.Limits.ReplayEvents), p.opts.Timing.ReplayKeep); err != nil {
			return fmt.Errorf("keep event %s for subscription %s: %w", ev.ID, sub.ID, err)
		}
	}
	if sub.Once {
		if first, err := p.fireOnce(ctx, sub, ev); err != nil || !first {
			return err
		}
	}
	// No echo (R8.18): the watcher's own prompt whose reply it received or still waits for.
	if ev.Kind == EvTurnEnd && ev.Turn != "" && !sub.Once {
		turn, err := turnOf()
		if err != nil {
			return err
		}
		if echo, err := p.isEcho(ctx, sub, ev, turn); err != nil || echo {
			return err
		}
	}
	if peerWatched {
		if err := p.st.AppendSubEvent(ctx, sub.ID, ev, int64(p.opts.Limits.ReplayEvents), p.opts.Timing.ReplayKeep); err != nil {
			return fmt.Errorf("keep event %s for peer subscription %s: %w", ev.ID, sub.ID, err)
		}
		return nil
	}
	return p.offer(ctx, sub, ev)
}

// fireOnce marks a once subscription fired by ev and ends it: first says
// that ev is the event it fires for (else another one fired it already).
func (p *pipeline) fireOnce(ctx context.Context, sub *store.Subscription, ev *store.Event) (first bool, err error) {
	first, err = p.st.SetOnce(ctx, "fired:"+sub.ID, onceMarkKeep)
	if err != nil {
		return false, fmt.Errorf("mark subscription %s fired by event %s: %w", sub.ID, ev.ID, err)
	}
	if !first {
		return false, nil
	}
	if err := p.relay.endSubscription(ctx, sub, "fired"); err != nil {
		return false, fmt.Errorf("end subscription %s fired by event %s: %w", sub.ID, ev.ID, err)
	}
	return true, nil
}

// isEcho says whether ev, the turn_end of turn (nil: none), is an echo the
// subscription's watcher does not get (R8.18): the turn is the watcher's own
// prompt, whose reply it received, or still waits for (the event is then
// held until the wait ends).
func (p *pipeline) isEcho(ctx context.Context, sub *store.Subscription, ev *store.Event, turn *store.Turn) (bool, error) {
	if turn == nil || turn.Caller != sub.Watcher {
		return false, nil
	}
	if turn.Waited {
		return true, nil
	}
	// Seen, waiting or neither, decided in one step: the wait may end now.
	echo, err := p.st.HoldEchoIfWaiting(ctx, turn.ID, store.Batch{Kind: "plain", Sub: sub.ID, Events: []store.Event{*ev}}, sub.Watcher)
	if err != nil {
		return false, fmt.Errorf("no-echo check of event %s for subscription %s: %w", ev.ID, sub.ID, err)
	}
	return echo != store.EchoDeliver, nil
}

// fanoutSubs is the subscriptions an event goes to: the one it names (not
// ok when that one is gone), else every subscription of its session.
func (p *pipeline) fanoutSubs(ctx context.Context, ev *store.Event) ([]*store.Subscription, bool, error) {
	if ev.Sub == "" {
		subs, err := p.st.SubscriptionsOf(ctx, ev.Session)
		return subs, err == nil, err
	}
	sub, err := p.st.GetSubscription(ctx, ev.Sub)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read subscription %s of event %s: %w", ev.Sub, ev.ID, err)
	}
	return []*store.Subscription{sub}, true, nil
}

// offer delivers an event now or holds it for the subscription's digest or
// quiet hours (R8.8, R8.9, R8.11).
func (p *pipeline) offer(ctx context.Context, sub *store.Subscription, ev *store.Event) error {
	if urgent(ev.Kind) || (sub.DigestMinutes == 0 && sub.Quiet == nil) {
		return p.release(ctx, sub.Watcher, store.Batch{Kind: "plain", Sub: sub.ID, Events: []store.Event{*ev}, Urgent: urgent(ev.Kind)})
	}
	now := p.now()
	due := holdDue(sub, now)
	if !due.After(now) {
		// The digest is due already (none for N minutes): this event is that digest,
		// and the next one comes N minutes after it.
		if sub.DigestMinutes > 0 {
			if err := p.st.SetLastDigest(ctx, sub, now); err != nil {
				return fmt.Errorf("start the digest of subscription %s with event %s: %w", sub.ID, ev.ID, err)
			}
		}
		return p.release(ctx, sub.Watcher, store.Batch{Kind: "plain", Sub: sub.ID, Events: []store.Event{*ev}})
	}
	return p.hold(ctx, sub, ev, due)
}

// holdDue is when a subscription's digest and quiet hours let an event
// offered at now go: now itself when nothing holds it.
func holdDue(sub *store.Subscription, now time.Time) time.Time {
	due := now
	if sub.DigestMinutes > 0 {
		anchor := sub.CreatedAt
		if !sub.LastDigestAt.IsZero() {
			anchor = sub.LastDigestAt
		}
		if d := anchor.Add(time.Duration(sub.DigestMinutes) * time.Minute); d.After(due) {
			due = d
		}
	}
	return quietOf(sub).Defer(due)
}

// hold keeps an event for a subscription until due (or the earlier due time
// in force) and schedules the release with the first one.
func (p *pipeline) hold(ctx context.Context, sub *store.Subscription, ev *store.Event, due time.Time) error {
	inForce, first, err := p.st.HoldEvent(ctx, sub.ID, ev, due)
	if err != nil {
		return err
	}
	if first {
		return p.schedule(ctx, jobs.TypeRelease, jobs.ReleasePayload{Sub: sub.ID}, fmt.Sprintf("rel:%s:%d", sub.ID, inForce.UnixMilli()), inForce)
	}
	return nil
}

// Release delivers a subscription's held events once they are due (a job at the due time).
func (p *pipeline) Release(ctx context.Context, subID string) error {
	now := p.now()
	evs, due, err := p.st.TakeHeld(ctx, subID, now)
	if err != nil {
		return err
	}
	if evs == nil && !due.IsZero() { // asynq ran the job early
		if stop, err := p.early(ctx, due, jobs.TypeRelease, jobs.ReleasePayload{Sub: subID}, fmt.Sprintf("rel:%s:%d", subID, due.UnixMilli())); stop || err != nil {
			return err
		}
		if evs, _, err = p.st.TakeHeld(ctx, subID, p.now()); err != nil {
			return err
		}
	}
	if len(evs) == 0 {
		return nil
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) }) // oldest first
	sub, err := p.st.GetSubscription(ctx, subID)
	if err != nil {
		return err
	}
	b := store.Batch{Kind: "digest", Sub: sub.ID, Every: sub.DigestMinutes, Events: evs}
	if q := quietOf(sub); q != nil && (sub.DigestMinutes == 0 || q.In(now.Add(-time.Minute))) {
		b = store.Batch{Kind: "quiet", Sub: sub.ID, Window: q.String(), Events: evs}
	}
	if sub.DigestMinutes > 0 {
		if err := p.st.SetLastDigest(ctx, sub, now); err != nil {
			return err
		}
	}
	if p.met != nil {
		p.met.Delivery(b.Kind + "_release")
	}
	return p.release(ctx, sub.Watcher, b)
}

// releasePeer is release for the events of one poll of a remote
// subscription (R18.33): urgent ones wake the watcher at once only once per
// coalescing window and subscription; within it they wait in the buffer for
// the window's end like any other event (they still pass the wake limit).
func (p *pipeline) releasePeer(ctx context.Context, sub *store.Subscription, b store.Batch) error {
	now := b.Urgent
	if now && p.opts.Timing.Coalesce > 0 {
		first, err := p.st.SetOnce(ctx, "peerwake:"+sub.ID, p.opts.Timing.Coalesce)
		if err != nil {
			return fmt.Errorf("urgent wake of subscription %s: %w", sub.ID, err)
		}
		now = first
	}
	return p.releaseNow(ctx, sub.Watcher, b, now)
}

// release puts events into the watcher's delivery buffer (each event once
// per watcher, R8.12); urgent ones are delivered at once with what the
// buffer holds, others when the coalescing window closes (R8.16).
func (p *pipeline) release(ctx context.Context, watcher string, b store.Batch) error {
	return p.releaseNow(ctx, watcher, b, b.Urgent)
}

// releaseNow is release; now says whether the buffer goes at once.
func (p *pipeline) releaseNow(ctx context.Context, watcher string, b store.Batch, flushNow bool) error {
	if isPeerConversation(watcher) {
		// A paired relay's conversation: its relay reads the subscription's
		// stream (held echoes, heartbeats, all_idle, stalled end up there).
		if b.Sub == "" {
			return nil
		}
		for i := range b.Events {
			if err := p.st.AppendSubEvent(ctx, b.Sub, &b.Events[i], int64(p.opts.Limits.ReplayEvents), p.opts.Timing.ReplayKeep); err != nil {
				return fmt.Errorf("keep released event %s for subscription %s: %w", b.Events[i].ID, b.Sub, err)
			}
		}
		return nil
	}
	kept := b.Events[:0:0]
	for _, ev := range b.Events {
		fresh, err := p.st.MarkDelivered(ctx, watcher, ev.ID)
		if err != nil {
			return err
		}
		if fresh {
			kept = append(kept, ev)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	b.Events = kept
	now := p.now()
	end := now.Add(p.opts.Timing.Coalesce)
	opened, window, err := p.st.BufferGroup(ctx, watcher, b, end)
	if err != nil {
		return err
	}
	if flushNow || p.opts.Timing.Coalesce <= 0 {
		return p.flush(ctx, watcher, timeZero, b.Urgent)
	}
	if opened {
		return p.schedule(ctx, jobs.TypeFlush, jobs.FlushPayload{Watcher: watcher, Window: window.UnixMilli()},
			fmt.Sprintf("flush:%s:%d", watcher, window.UnixMilli()), window)
	}
	return nil
}

// Flush delivers a watcher's buffer when its coalescing window closes.
func (p *pipeline) Flush(ctx context.Context, watcher string, window time.Time) error {
	if stop, err := p.early(ctx, window, jobs.TypeFlush, jobs.FlushPayload{Watcher: watcher, Window: window.UnixMilli()},
		fmt.Sprintf("flush:%s:%d", watcher, window.UnixMilli())); stop || err != nil {
		return err
	}
	return p.flush(ctx, watcher, window, false)
}

func (p *pipeline) flush(ctx context.Context, watcher string, window time.Time, urgentNow bool) error {
	batches, err := p.st.TakeBuffer(ctx, watcher, window)
	if err != nil || len(batches) == 0 {
		return err
	}
	hasUrgent := urgentNow
	for _, b := range batches {
		hasUrgent = hasUrgent || b.Urgent
	}
	now := p.now()
	limit := p.opts.Timing.WakeLimitPerHour
	if !hasUrgent {
		n, err := p.st.Wakes(ctx, watcher, now)
		if err != nil {
			return err
		}
		if n >= limit {
			at := now.Add(p.opts.Timing.WakeSummaryEvery)
			first, inForce, err := p.st.HoldForSummary(ctx, watcher, batches, at)
			if err != nil {
				return err
			}
			if first {
				return p.schedule(ctx, jobs.TypeSummary, jobs.SummaryPayload{Watcher: watcher}, fmt.Sprintf("sum:%s:%d", watcher, inForce.UnixMilli()), inForce)
			}
			return nil
		}
	} else {
		// An urgent event takes along what the wake limit holds.
		held, err := p.st.TakeSummary(ctx, watcher)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			batches = append(mergeSummary(held), batches...)
		}
	}
	return p.deliver(ctx, watcher, batches, "message")
}

// mergeSummary makes the wake limit's held batches one summary; digests held
// with it stay batches of their own, so that the message names both in one
// `Digest of …` line (R8.17, see [Message]).
func mergeSummary(held []store.Batch) []store.Batch {
	b := store.Batch{Kind: "summary"}
	var digests []store.Batch
	for _, h := range held {
		if h.Kind == "digest" {
			digests = append(digests, h)
			continue
		}
		b.Events = append(b.Events, h.Events...)
	}
	sort.SliceStable(b.Events, func(i, j int) bool { return b.Events[i].At.Before(b.Events[j].At) })
	return append([]store.Batch{b}, digests...)
}

// Summary delivers the events the wake limit held, as one message (R8.17).
func (p *pipeline) Summary(ctx context.Context, watcher string) error {
	due, err := p.st.SummaryDue(ctx, watcher)
	if err != nil {
		return err
	}
	if due.IsZero() {
		return nil
	}
	if stop, err := p.early(ctx, due, jobs.TypeSummary, jobs.SummaryPayload{Watcher: watcher}, fmt.Sprintf("sum:%s:%d", watcher, due.UnixMilli())); stop || err != nil {
		return err
	}
	held, err := p.st.TakeSummary(ctx, watcher)
	if err != nil || len(held) == 0 {
		return err
	}
	return p.deliver(ctx, watcher, mergeSummary(held), "summary")
}

// deliver writes one event message into the watching conversation: a new
// turn when it is idle, queued next when a turn runs (R8.15).
func (p *pipeline) deliver(ctx context.Context, watcher string, batches []store.Batch, kind string) error {
	ws, err := p.st.GetSession(ctx, watcher)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deliver events to watcher %s: %w", id8(watcher), err)
	}
	if ws.Archived {
		return nil
	}
	text := Message(batches, p.opts.Timing.WakeLimitPerHour)
	if err := p.st.AddWake(ctx, watcher, p.now()); err != nil {
		return err
	}
	if _, err := p.relay.queue(ctx, prompt{s: ws, text: text, role: "event", origin: store.Origin{Path: []string{p.opts.Name}}}); err != nil {
		return err
	}
	if p.met != nil {
		p.met.Delivery(kind)
	}
	return nil
}

// endWait ends a caller's wait on a turn (R8.18, R18.12). gotReply says that
// the call's result carries the turn's finished reply. The reply counts as
// seen only once that result reached the caller (see [Delivery]): then the
// turn is marked seen (no echo of its turn_end from now on) and the echoes held
// meanwhile are dropped; a result that did not reach the caller (the client
// went away) releases them as normal events instead. With no delivery d
// (calls made in-process) the result has reached the caller when CallTool
// returns, so that is settled here at once. The error is that of marking the
// turn seen when that is settled at once.
func (p *pipeline) endWait(ctx context.Context, d *Delivery, turnID string, gotReply bool) error {
	ctx = context.WithoutCancel(ctx) // also runs after the call returned or was cut off
	finish := func(seen bool) error {
		// Marked seen, then the wait ended, in one step (one round trip).
		held, err := p.st.SeenEndWaiting(ctx, turnID, seen)
		if err != nil {
			if seen {
				return err
			}
			p.log.Warn("end wait", "turn", turnID, "err", err)
			return nil
		}
		if seen {
			return nil
		}
		for watcher, bs := range held {
			for _, b := range bs {
				if err := p.release(ctx, watcher, b); err != nil {
					p.log.Warn("release held echo", "turn", turnID, "err", err)
				}
			}
		}
		return nil
	}
	if d == nil || !gotReply {
		return finish(gotReply)
	}
	// The turn stays marked as waited on (its turn_end held) until the transport
	// knows whether the result was written to the client.
	d.after(func(delivered bool) {
		if err := finish(delivered); err != nil {
			p.log.Warn("mark reply seen", "turn", turnID, "err", err)
		}
	})
	return nil
}

// Delivery holds what a tool call records only once its result reached the
// client, until the transport settles whether it did. A transport that writes
// the result after [Relay.CallTool] returned (MCP over HTTP) passes one to the
// call and then calls [Delivery.Settle] once, with whether the result was
// written to the client: what the call records only once the caller has its
// result — a prompt's reply seen, which suppresses that turn's turn_end (no
// echo, R8.18) — is recorded then, or not at all (R18.12). A nil *Delivery
// (the calls providers make in-process) counts as delivered when CallTool
// returns.
type Delivery struct {
	mu        sync.Mutex
	settled   bool
	delivered bool
	pending   []func(delivered bool)
}

// NewDelivery returns an unsettled delivery for one tool call.
func NewDelivery() *Delivery { return &Delivery{} }

// Settle records whether the call's result was written to the client and runs
// the work that waited on it before it returns; later calls do nothing.
func (d *Delivery) Settle(delivered bool) {
	d.mu.Lock()
	if d.settled {
		d.mu.Unlock()
		return
	}
	d.settled, d.delivered = true, delivered
	fns := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, fn := range fns {
		fn(delivered)
	}
}

// after runs fn when the delivery is settled (at once if it is already).
func (d *Delivery) after(fn func(delivered bool)) {
	d.mu.Lock()
	if d.settled {
		delivered := d.delivered
		d.mu.Unlock()
		fn(delivered)
		return
	}
	d.pending = append(d.pending, fn)
	d.mu.Unlock()
}

// watchedSessions lists the sessions a subscription watches now.
func (p *pipeline) watchedSessions(ctx context.Context, sub *store.Subscription) ([]*store.Session, error) {
	ids := sub.Sessions
	if sub.All {
		all, _, err := p.st.ListSessionIDs(ctx, "active", 100000)
		if err != nil {
			return nil, fmt.Errorf("sessions watched by subscription %s: %w", sub.ID, err)
		}
		ids = all
	}
	ss, err := p.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("sessions watched by subscription %s: %w", sub.ID, err)
	}
	out := ss[:0]
	for _, s := range ss {
		if s == nil || s.ID == sub.Watcher || slices.Contains(sub.Exclude, s.ID) || (sub.All && s.Archived) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// checkAllIdle emits all_idle for subscriptions whose watched sessions all
// went idle (a transition: once until something runs again).
func (p *pipeline) checkAllIdle(ctx context.Context, subs []*store.Subscription) error {
	for _, sub := range subs {
		if sub.EndReason != "" || !slices.Contains(sub.Events, EvAllIdle) {
			continue
		}
		ss, err := p.watchedSessions(ctx, sub)
		if err != nil {
			return err
		}
		vs, err := p.relay.views(ctx, ss)
		if err != nil {
			return err
		}
		idle := true
		for _, v := range vs {
			if v.state != StateIdle {
				idle = false
				break
			}
		}
		if !idle {
			continue
		}
		first, err := p.st.SetOnce(ctx, "idle:"+sub.ID, onceMarkKeep)
		if err != nil {
			return fmt.Errorf("mark subscription %s all idle: %w", sub.ID, err)
		}
		if first {
			p.emit(ctx, &store.Event{Kind: EvAllIdle, Sub: sub.ID, Watched: len(vs)})
		}
	}
	return nil
}

// watching keeps the subscriptions that really watch a session: not its own
// watcher's, not those that exclude it.
func watching(subs []*store.Subscription, sid string) []*store.Subscription {
	var out []*store.Subscription
	for _, s := range subs {
		if s.Watcher != sid && !slices.Contains(s.Exclude, sid) {
			out = append(out, s)
		}
	}
	return out
}

// busyAgain re-arms all_idle for the subscriptions watching a session that started work.
func (p *pipeline) busyAgain(ctx context.Context, sid string) {
	all, err := p.st.SubscriptionsOf(ctx, sid)
	if err != nil {
		return
	}
	subs := watching(all, sid)
	if len(subs) == 0 {
		return
	}
	names := make([]string, 0, len(subs))
	for _, s := range subs {
		names = append(names, "idle:"+s.ID)
	}
	_ = p.st.ClearOnce(ctx, names...)
}

// Heartbeat emits a subscription's heartbeat and schedules the next (R8.1, R8.9).
func (p *pipeline) Heartbeat(ctx context.Context, subID string, at time.Time) error {
	sub, err := p.st.GetSubscription(ctx, subID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil || sub.EndReason != "" || sub.HeartbeatMinutes == 0 {
		return err
	}
	if stop, err := p.early(ctx, at, jobs.TypeHeartbeat, jobs.HeartbeatPayload{Sub: subID, At: at.UnixMilli()}, fmt.Sprintf("hb:%s:%d", subID, at.UnixMilli())); stop || err != nil {
		return err
	}
	now := p.now()
	next := at.Add(time.Duration(sub.HeartbeatMinutes) * time.Minute)
	for !next.After(now) {
		next = next.Add(time.Duration(sub.HeartbeatMinutes) * time.Minute)
	}
	if err := p.schedule(ctx, jobs.TypeHeartbeat, jobs.HeartbeatPayload{Sub: subID, At: next.UnixMilli()}, fmt.Sprintf("hb:%s:%d", subID, next.UnixMilli()), next); err != nil {
		return fmt.Errorf("schedule the next heartbeat of %s: %w", subID, err)
	}
	if q := quietOf(sub); q != nil && q.In(now) {
		return nil // no heartbeat inside the quiet window
	}
	ss, err := p.watchedSessions(ctx, sub)
	if err != nil {
		return err
	}
	vs, err := p.relay.views(ctx, ss)
	if err != nil {
		return err
	}
	running := 0
	for _, v := range vs {
		if v.state != StateIdle {
			running++
		}
	}
	p.emit(ctx, &store.Event{Kind: EvHeartbeat, Sub: sub.ID, Watched: len(vs), Running: running, Idle: len(vs) - running})
	return nil
}

// StallScan emits `stalled` for running turns and tasks of watched sessions
// that gave no output for the subscription's stalled_minutes (once each).
func (p *pipeline) StallScan(ctx context.Context) error {
	subs, err := p.st.AllSubscriptions(ctx)
	if err != nil {
		return err
	}
	now := p.now()
	for _, sub := range subs {
		if !slices.Contains(sub.Events, EvStalled) || sub.StalledMinutes <= 0 {
			continue
		}
		ss, err := p.watchedSessions(ctx, sub)
		if err != nil {
			return err
		}
		for _, s := range ss {
			if err := p.stallScanSession(ctx, sub, s, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// stallScanSession is StallScan for one watched session of sub: its running
// turn and its running tasks.
func (p *pipeline) stallScanSession(ctx context.Context, sub *store.Subscription, s *store.Session, now time.Time) error {
	cur, err := p.st.CurrentTurn(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("scan subscription %s for stalls: %w", sub.ID, err)
	}
	if cur != "" {
		if t, err := p.st.GetTurn(ctx, cur); err == nil && t.Status == store.TurnRunning {
			last := t.StartedAt
			if t.PartialAt.After(last) {
				last = t.PartialAt
			}
			if err := p.stalled(ctx, sub, s, "turn:"+t.ID+":"+fmt.Sprint(last.UnixMilli()), now.Sub(last)); err != nil {
				return err
			}
		}
	}
	tasks, err := p.st.Tasks(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("scan subscription %s for stalls: %w", sub.ID, err)
	}
	for _, t := range tasks {
		if t.Status != "running" {
			continue
		}
		last := t.StartedAt
		if t.LastOutputAt.After(last) {
			last = t.LastOutputAt
		}
		if err := p.stalled(ctx, sub, s, "task:"+t.ID+":"+fmt.Sprint(last.UnixMilli()), now.Sub(last)); err != nil {
			return err
		}
	}
	return nil
}

// stalled emits `stalled` for what (a turn or task and its last output) of
// session s once, when it gave no output for sub's stalled_minutes (idle:
// how long it gave none).
func (p *pipeline) stalled(ctx context.Context, sub *store.Subscription, s *store.Session, what string, idle time.Duration) error {
	if idle < time.Duration(sub.StalledMinutes)*time.Minute {
		return nil
	}
	first, err := p.st.SetOnce(ctx, "stall:"+sub.ID+":"+what, occurrenceMarkKeep)
	if err != nil || !first {
		return err
	}
	p.emit(ctx, &store.Event{Kind: EvStalled, Sub: sub.ID, Session: s.ID, Title: s.Title, Minutes: int(idle / time.Minute)})
	return nil
}
