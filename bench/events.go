package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/config"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/jobs/asynqjobs"
	"github.com/oar/relay/store"
)

// ---- (e) events: fan-out to delivery ----
//
// Layout (fixed): 1,000 sessions = 99 watchers + 901 watched sessions;
// 1,000 subscriptions, each watching one session, each held by a watcher
// (about 10 per watcher, under subscriptions_per_conversation 20).
//
//	100-subscription phase:  T0..T49 watched by 1 subscription each (50),
//	                         H0..H4 watched by 10 each, 10 distinct watchers (50)
//	1,000-subscription phase: + T50..T889 by 1 each (840), + H5..H10 by 10 each (60)
//
// The hot sessions T0..T49 and H0..H4 keep the same subscriptions in both
// phases: only the total changes. Watchers are never watched, so a delivery's
// own turn in the watcher ends without a fan-out.
const (
	evWatchers   = 99
	evOneSmall   = 50  // sessions with 1 subscription in the 100-subscription phase
	evTenSmall   = 5   // sessions with 10 subscriptions in the 100-subscription phase
	evOne        = 890 // sessions with 1 subscription at 1,000
	evTen        = 11  // sessions with 10 subscriptions at 1,000
	evSmallTotal = evOneSmall + 10*evTenSmall
	evTotal      = evOne + 10*evTen
)

// fanCell is per-event fan-out of one (total, matching) cell: Relay.Fanout
// called in-process, one event at a time.
type fanCell struct {
	lat []time.Duration
	rts int64 // Redis round trips made by the calls (context-tagged)
}

func (c *fanCell) n() int  { return len(c.lat) }
func (c *fanCell) d() dist { return newDist(c.lat) }
func (c *fanCell) mean() time.Duration {
	if len(c.lat) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range c.lat {
		s += d
	}
	return s / time.Duration(len(c.lat))
}
func (c *fanCell) rtsPer() float64 { return float64(c.rts) / float64(max(1, len(c.lat))) }

// flowResult is events driven by real turns: owner messages to watched
// sessions, each turn's turn_end fanned out by the worker and delivered into
// the watcher as an event message.
type flowResult struct {
	sent      int           // owner messages (one turn, one turn_end each)
	offered   float64       // messages per second offered (0: all at once)
	delivered int           // of those events, found in a watcher's event message
	lat       dist          // event At → the watcher's event message createdAt
	emitWall  time.Duration // first event At → last event At
	flowWall  time.Duration // first event At → last delivery
	sendWall  time.Duration // sending the owner messages
	batched   int           // event messages that carried more than one of these events
	cost      snapshot      // from the first message sent to the last delivery found
	pending   float64       // mean pending tasks of the events queue (sampled every 10 ms)
	active    float64
}

func (f flowResult) emitRate() float64 { return rate(f.delivered, f.emitWall) }
func (f flowResult) flowRate() float64 { return rate(f.delivered, f.flowWall) }

type eventsResult struct {
	sessions, watchers, watched int
	cells                       map[[3]int]*fanCell // {total, matching, isolated}
	paced, burst, jobs          flowResult
}

type evBench struct {
	rp       *relayProc
	r        *domain.Relay
	rdb      redis.UniversalClient // this program's client (reads)
	cc       *ctxCounter
	watchers []string
	one      []string // sessions with 1 subscription (in order: the first evOneSmall also at 100)
	ten      []string // sessions with 10 subscriptions
	titles   map[string]string
	queues   []string
	turnsQ   string
	insp     *asynq.Inspector // on the relay's client (shared: not closed)
	stalled  int
	nextW    int
}

// benchEvents runs (e) in a relay of its own: coalescing window 0, the wake
// limit raised (a watcher here gets far more than 20 wakes an hour).
func benchEvents(ctx context.Context, b *bench, prefix string) (eventsResult, error) {
	o := b.o
	out := eventsResult{cells: map[[3]int]*fanCell{}}
	cc := &ctxCounter{}
	rp, err := startRelayWith(o.redisURL, prefix, o.concurrency, b.hc, func(c *config.Config) {
		c.Timing.Coalesce = 0
		c.Timing.WakeLimitPerHour = 1 << 30
	}, cc)
	if err != nil {
		return out, err
	}
	defer func() { _ = rp.stop() }()
	q := jobs.QueuesFor(prefix)
	e := &evBench{rp: rp, r: rp.app.Relay(), rdb: b.rdb, cc: cc, titles: map[string]string{}, queues: q.All(), turnsQ: q.Turns,
		insp:    asynq.NewInspectorFromRedisClient(rp.app.Redis()),
		stalled: int(config.Default().Timing.StalledDefault / time.Minute)}

	// Sessions and the 100 subscriptions.
	nWatched := evOne + evTen
	ids, err := newSessions(ctx, e.r, evWatchers+nWatched, 16, func(i int) string {
		if i < evWatchers {
			return fmt.Sprintf("Watcher %02d", i)
		}
		return fmt.Sprintf("Watched %03d", i-evWatchers)
	})
	if err != nil {
		return out, fmt.Errorf("(e) sessions: %w", err)
	}
	for i, id := range ids {
		e.titles[id] = fmt.Sprintf("Watched %03d", i-evWatchers)
		if i < evWatchers {
			e.titles[id] = fmt.Sprintf("Watcher %02d", i)
		}
	}
	e.watchers, e.one, e.ten = ids[:evWatchers], ids[evWatchers:evWatchers+evOne], ids[evWatchers+evOne:]
	out.sessions, out.watchers, out.watched = len(ids), evWatchers, nWatched
	b.logf("(e) %d sessions (%d watchers, %d watched); %d subscriptions", len(ids), evWatchers, nWatched, evTotal)
	if _, err := e.subscribe(ctx, e.one[:evOneSmall], e.ten[:evTenSmall]); err != nil {
		return out, err
	}
	extra, err := e.subscribe(ctx, e.one[evOneSmall:], e.ten[evTenSmall:])
	if err != nil {
		return out, err
	}
	if err := e.warm(ctx); err != nil {
		return out, err
	}
	// Fan-out per event at 100 and at 1,000 subscriptions in all, in
	// alternating passes (100, 1,000, 100, …): the 900 extra ones are ended
	// and made active again between them.
	b.logf("(e) fan-out per event: %d passes alternating %d and %d subscriptions in all", 2*probePasses, evSmallTotal, evTotal)
	for pass := 0; pass < 2*probePasses; pass++ {
		total := evSmallTotal
		if pass%2 == 1 {
			total = evTotal
		}
		if err := e.setActive(ctx, extra, total == evTotal); err != nil {
			return out, err
		}
		if err := e.probePass(ctx, out.cells, total, pass, max(1, o.probes/probePasses)); err != nil {
			return out, err
		}
	}

	// Real turn_end events through the worker.
	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	nPaced := o.eventRate * o.eventSecs
	b.logf("(e) paced: %d owner messages at %d/s to sessions with 1 subscription", nPaced, o.eventRate)
	if out.paced, err = e.flow(ctx, m, q.Events, "p", nPaced, float64(o.eventRate), e.ownerMessage(ctx)); err != nil {
		return out, err
	}
	if err := waitQueuesIdle(ctx, e.rdb, e.queues, 2*time.Minute); err != nil {
		return out, err
	}
	b.logf("(e) burst: %d owner messages at once", o.burst)
	if out.burst, err = e.flow(ctx, m, q.Events, "b", o.burst, 0, e.ownerMessage(ctx)); err != nil {
		return out, err
	}
	if err := waitQueuesIdle(ctx, e.rdb, e.queues, 2*time.Minute); err != nil {
		return out, err
	}
	b.logf("(e) fan-out jobs: %d events appended and their fan-out jobs enqueued at once (emit's two steps, no turn on the watched side)", o.burst)
	aq := asynq.NewClientFromRedisClient(rp.app.Redis()) // shares the relay's client: not closed here
	if out.jobs, err = e.flow(ctx, m, q.Events, "j", o.burst, 0, e.emitDirect(ctx, asynqjobs.NewClient(aq, nil, q))); err != nil {
		return out, err
	}
	if err := waitQueuesIdle(ctx, e.rdb, e.queues, 2*time.Minute); err != nil {
		return out, err
	}
	return out, nil
}

// subscribe writes the subscriptions straight through the store (as the
// subscribe action does once its first-subscribe card is allowed: that card
// needs a running turn of the watcher): one on each session of one, ten on
// each session of ten (ten distinct watchers), events [turn_end].
func (e *evBench) subscribe(ctx context.Context, one, ten []string) ([]*store.Subscription, error) {
	var subs []*store.Subscription
	add := func(watcher, watched string) {
		subs = append(subs, &store.Subscription{ID: "sub_" + store.NewID(5), Watcher: watcher, Sessions: []string{watched},
			Events: []string{domain.EvTurnEnd}, StalledMinutes: e.stalled, CreatedAt: time.Now()})
	}
	for _, s := range one {
		add(e.watchers[e.nextW%evWatchers], s)
		e.nextW++
	}
	for _, s := range ten {
		for k := 0; k < 10; k++ {
			add(e.watchers[e.nextW%evWatchers], s)
			e.nextW++
		}
	}
	st := e.rp.app.Store()
	return subs, parallel(ctx, len(subs), 16, func(i int) error { return st.SaveSubscription(ctx, subs[i]) })
}

// setActive ends subscriptions (as unsubscribe does: out of every index) or
// makes them active again (back in the indexes).
func (e *evBench) setActive(ctx context.Context, subs []*store.Subscription, active bool) error {
	st := e.rp.app.Store()
	now := time.Now()
	return parallel(ctx, len(subs), 16, func(i int) error {
		sub := *subs[i]
		sub.EndReason, sub.EndedAt = "", time.Time{}
		if !active {
			sub.EndReason, sub.EndedAt = "unsubscribed", now
		}
		return st.SaveSubscription(ctx, &sub)
	})
}

func (e *evBench) probeEvent(sid, text string) *store.Event {
	return &store.Event{ID: "ev_" + store.NewID(8), Kind: domain.EvTurnEnd, Session: sid, Title: e.titles[sid],
		At: time.Now(), Status: string(store.TurnDone), Text: text}
}

// warm makes unmeasured fan-outs first (connections, the settings cache).
func (e *evBench) warm(ctx context.Context) error {
	for i := 0; i < 20; i++ {
		if err := e.r.Fanout(ctx, e.probeEvent(e.one[i%evOneSmall], fmt.Sprintf("echo: warm-%d", i))); err != nil {
			return err
		}
	}
	return waitQueuesIdle(ctx, e.rdb, e.queues, time.Minute)
}

// probePasses is how many passes each total gets.
const probePasses = 4

// probePass measures Relay.Fanout per event, one event at a time, for events
// matching 0 (a session nobody watches: the fixed part), 1 and 10
// subscriptions, n of each, interleaved event by event (so drift hits all
// three alike), two ways: back to back (beside the watcher turns the
// deliveries start, ten times as many after a 10-matching event, on the same
// CPUs) and isolated (the turns queue is paused meanwhile, so those turns
// wait until the run ends: the fan-out alone). The queues run empty first.
func (e *evBench) probePass(ctx context.Context, cells map[[3]int]*fanCell, total, pass, n int) error {
	sets := map[int][]string{0: e.watchers[:evOneSmall], 1: e.one[:evOneSmall], 10: e.ten[:evTenSmall]}
	ms := []int{0, 1, 10}
	tctx := e.cc.tagged(ctx)
	for _, iso := range []int{0, 1} {
		if err := waitQueuesIdle(ctx, e.rdb, e.queues, time.Minute); err != nil {
			return err
		}
		if iso == 1 {
			if err := e.insp.PauseQueue(e.turnsQ); err != nil {
				return err
			}
		}
		for i := 0; i < n*len(ms); i++ {
			m := ms[(i+i/len(ms))%len(ms)] // the order rotates from round to round
			key := [3]int{total, m, iso}
			c := cells[key]
			if c == nil {
				c = &fanCell{}
				cells[key] = c
			}
			set := sets[m]
			ev := e.probeEvent(set[(i/len(ms))%len(set)], fmt.Sprintf("echo: probe-%d-%d-%d-%d-%d", total, m, iso, pass, i))
			r0 := e.cc.n.Load()
			t0 := time.Now()
			err := e.r.Fanout(tctx, ev)
			c.lat = append(c.lat, time.Since(t0))
			c.rts += e.cc.n.Load() - r0
			if err != nil {
				_ = e.insp.UnpauseQueue(e.turnsQ)
				return fmt.Errorf("fanout: %w", err)
			}
		}
		if iso == 1 {
			if err := e.insp.UnpauseQueue(e.turnsQ); err != nil {
				return err
			}
		}
	}
	return waitQueuesIdle(ctx, e.rdb, e.queues, time.Minute)
}

var (
	deliveredRe = regexp.MustCompile(`turn_end \(done\) "echo: (ev-[a-z]-\d{6})"`)
	emittedRe   = regexp.MustCompile(`^echo: (ev-[a-z]-\d{6})$`)
)

// ownerMessage is the production source of a turn_end: the owner writes
// text in a session with one subscription; its turn's reply is "echo: "+text.
func (e *evBench) ownerMessage(ctx context.Context) func(i int, text string) error {
	return func(i int, text string) error {
		_, err := e.r.OwnerMessage(ctx, e.one[i%len(e.one)], text)
		return err
	}
}

// emitDirect does what emit does for a turn_end, without the turn: append
// the event to the relay's stream, then enqueue its fan-out job (the
// worker's side of fan-out and delivery alone, not bounded by turns).
func (e *evBench) emitDirect(ctx context.Context, enq *asynqjobs.Client) func(i int, text string) error {
	st := e.rp.app.Store()
	return func(i int, text string) error {
		sid := e.one[i%len(e.one)]
		ev := e.probeEvent(sid, "echo: "+text)
		if _, err := st.AppendEvent(ctx, ev); err != nil {
			return err
		}
		return enq.Enqueue(ctx, jobs.TypeFanout, ev, "", time.Time{})
	}
}

// flow makes n turn_end events (text "echo: ev-TAG-NNNNNN") with src on the
// sessions with one subscription, at rate per second (0: all at once from
// 16 goroutines), and follows each to the watcher's event message.
func (e *evBench) flow(ctx context.Context, m meter, eventsQueue, tag string, n int, perSec float64, src func(i int, text string) error) (flowResult, error) {
	out := flowResult{sent: n, offered: perSec}
	if n <= 0 {
		return out, nil
	}
	st := e.rp.app.Store()
	evKey := store.KeyBase(e.rp.prefix) + "events"
	// Where the watchers' conversations and the event stream stand now.
	offs := make([]int64, len(e.watchers))
	for i, w := range e.watchers {
		k, err := st.MessageCount(ctx, w)
		if err != nil {
			return out, err
		}
		offs[i] = int64(k)
	}
	streamFrom := fmt.Sprintf("%d", time.Now().Add(-time.Millisecond).UnixMilli())

	s0 := m.snap(ctx)
	stopSampling := make(chan struct{})
	sampled := make(chan [3]float64, 1)
	go func() { sampled <- sampleQueue(ctx, m.rdb, eventsQueue, stopSampling) }()
	text := func(i int) string { return fmt.Sprintf("ev-%s-%06d", tag, i) }
	send := func(i int) error { return src(i, text(i)) }
	t0 := time.Now()
	var sendErr error
	if perSec > 0 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		interval := time.Duration(float64(time.Second) / perSec)
		for i := 0; i < n && ctx.Err() == nil; i++ {
			if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := send(i); err != nil {
					mu.Lock()
					sendErr = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	} else {
		sendErr = parallel(ctx, n, 16, send)
	}
	out.sendWall = time.Since(t0)
	if sendErr != nil {
		close(stopSampling)
		return out, fmt.Errorf("(e) %s: %w", tag, sendErr)
	}

	// Follow the deliveries until all are found or nothing new came for 15 s.
	got := map[string]time.Time{}
	lastNew := time.Now()
	for len(got) < n && time.Since(lastNew) < 15*time.Second && ctx.Err() == nil {
		before := len(got)
		cmds := make([]*redis.StringSliceCmd, len(e.watchers))
		_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, w := range e.watchers {
				cmds[i] = p.LRange(ctx, store.KeyBase(e.rp.prefix)+"msgs:"+w, offs[i], -1)
			}
			return nil
		})
		if err != nil {
			close(stopSampling)
			return out, err
		}
		for i, c := range cmds {
			offs[i] += int64(len(c.Val()))
			for _, raw := range c.Val() {
				var msg store.Message
				if json.Unmarshal([]byte(raw), &msg) != nil || msg.Role != "event" {
					continue
				}
				ms := deliveredRe.FindAllStringSubmatch(msg.Text, -1)
				if len(ms) > 1 {
					out.batched++
				}
				for _, sm := range ms {
					if _, ok := got[sm[1]]; !ok {
						got[sm[1]] = msg.CreatedAt
					}
				}
			}
		}
		if len(got) > before {
			lastNew = time.Now()
		}
		if len(got) < n {
			time.Sleep(100 * time.Millisecond)
		}
	}
	out.cost = m.snap(ctx).sub(s0)
	close(stopSampling)
	if q := <-sampled; q[2] > 0 {
		out.pending, out.active = q[0]/q[2], q[1]/q[2]
		out.cost.cmds -= 2 * int64(q[2])
	}

	// The events' own times, from the relay's event stream.
	msgs, err := e.rdb.XRange(ctx, evKey, streamFrom, "+").Result()
	if err != nil {
		return out, err
	}
	var first, lastAt, lastDlv time.Time
	var lats []time.Duration
	for _, xm := range msgs {
		v, _ := xm.Values["e"].(string)
		var ev store.Event
		if json.Unmarshal([]byte(v), &ev) != nil || ev.Kind != domain.EvTurnEnd {
			continue
		}
		sm := emittedRe.FindStringSubmatch(ev.Text)
		if sm == nil || sm[1][3:4] != tag {
			continue
		}
		dlv, ok := got[sm[1]]
		if !ok {
			continue
		}
		lats = append(lats, dlv.Sub(ev.At))
		if first.IsZero() || ev.At.Before(first) {
			first = ev.At
		}
		if ev.At.After(lastAt) {
			lastAt = ev.At
		}
		if dlv.After(lastDlv) {
			lastDlv = dlv
		}
	}
	out.delivered = len(lats)
	out.lat = newDist(lats)
	out.emitWall, out.flowWall = lastAt.Sub(first), lastDlv.Sub(first)
	return out, nil
}
