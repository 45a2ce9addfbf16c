package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/app"
	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
	"github.com/oar/relay/worker"
)

// The goals of the performance issue, each measured in this run (row h):
//  1. send→reply p50 at 1 client ≤ 1.3 × (bare MCP call p50 + bare asynq hop p50)
//  2. ≥ 600 send→reply round trips/s, 32 agents, ≤ 12 Redis round trips and ≤ 0.8 ms relay CPU each
//  3. an idle relay ≤ 10 Redis commands/s (issue 36; ≤ 50 before), a hop as fast as asynq polling every 10 ms
//  4. two worker processes ≥ 1.7 × the turn throughput of one (50 ms agent turns)
//  5. 100,000 idle sessions and 10,000 subscriptions: memory, list_sessions p99, fan-out ∝ matching

type goalSizes struct {
	rounds     int // interleaved rounds (goals 1–3)
	n1         int // goal 1: calls per variant per round
	agents     int // goal 2: concurrent agents
	targets    int // goal 2: target sessions
	n2         int // goal 2: round trips per agent per round
	idleSecs   int // goal 3: idle window
	hops3      int // goal 3: idle-gapped hops per variant per round
	rounds4    int // goal 4: interleaved pairs of rounds (one worker, two)
	conc4      int // goal 4: asynq concurrency of each worker
	sessions4  int // goal 4: sessions
	turns4     int // goal 4: turns per round
	sessions5  int // goal 5: idle sessions
	subs5      int // goal 5: subscriptions
	calls5     int // goal 5: list_sessions calls
	probes5    int // goal 5: Fanout calls per (total, matching) cell and pass
	turnMillis int // goal 4: the agent's scripted sleep
}

func goalSizesFor(quick bool) goalSizes {
	if quick {
		return goalSizes{rounds: 1, n1: 10, agents: 8, targets: 10, n2: 3, idleSecs: 3, hops3: 5, rounds4: 3, conc4: 4, sessions4: 16,
			turns4: 160, sessions5: 1500, subs5: 300, calls5: 40, probes5: 6, turnMillis: 50}
	}
	return goalSizes{rounds: 5, n1: 60, agents: 32, targets: 50, n2: 40, idleSecs: 20, hops3: 30, rounds4: 5, conc4: 8, sessions4: 64,
		turns4: 480, sessions5: 100000, subs5: 10000, calls5: 800, probes5: 40, turnMillis: 50}
}

type goalsResult struct {
	sz goalSizes
	// goal 1: per-round p50s
	send1, mcp1, hop1 []time.Duration
	// goal 1, per round: the relay client's Redis round trips per send and
	// their p50 while it ran
	rts1    []float64
	rtP50s1 []time.Duration
	// goal 2: per round
	thr2, rts2, cmds2, cpu2 []float64
	p50s2                   []time.Duration
	// goal 2's floor, per round: process CPU (ms) per call of a bare go-sdk
	// no-op tool and per round trip of a bare go-redis client, at the same
	// concurrency
	mcpCPU2, rtCPU2 []float64
	// goal 3
	idleSecs                     float64
	idleRTs, idleCmds, idleSrv   float64 // per second: relay client round trips, commands it sent, server-wide commands (commandstats)
	idleTop                      string
	hopWake, hopPoll10           []time.Duration // per-round p50 of idle-gapped hops
	asynqIdle10, asynqIdleWake   float64         // server-wide commands/s of a bare idle asynq server (10 ms polling) and with the waker
	asynqIdleRT10, asynqIdleRTWk float64         // its client's round trips/s
	// goal 4
	one4, two4 []float64     // turns/s per round
	second4    []float64     // per two-worker round: the share of its turns the second worker ran
	turn4      dist          // the turns' own length (turn record StartedAt → EndedAt)
	load4      string        // the machine's load over the measured rounds
	cpu4       time.Duration // CPU of this process (both workers, the senders) per turn
	// goal 5
	n5, subs5             int
	used5, usage5, keys5  int64
	subUsed5, subUsage5   int64
	list5                 callResult
	cells5                map[[3]int]*fanCell
	small5, total5        int
	createWall5, subWall5 time.Duration
}

// liveHeapMiB collects and returns the live heap, in MiB.
func liveHeapMiB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

func medianD(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// cmdCounter is a go-redis hook counting the commands a client sends, by name.
type cmdCounter struct {
	mu sync.Mutex
	by map[string]int64
}

func (c *cmdCounter) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]int64{}
	}
	for _, cmd := range cmds {
		c.by[strings.ToLower(cmd.Name())]++
	}
	c.mu.Unlock()
}

func (c *cmdCounter) snap() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for k, v := range c.by {
		out[k] = v
	}
	return out
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.add(cmd); return next(ctx, cmd) }
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.add(cmds...); return next(ctx, cmds) }
}

func totalCommands(ctx context.Context, rdb redis.UniversalClient) int64 {
	s := takeSnapshot(ctx, rdb, &rtCounter{}, nil)
	return s.cmds
}

// runGoals measures goals 1–5.
func (b *bench) runGoals(ctx context.Context) (goalsResult, error) {
	sz := goalSizesFor(b.o.quick)
	out := goalsResult{sz: sz, cells5: map[[3]int]*fanCell{}}
	if strings.ContainsAny(b.o.goals, "123") {
		if err := b.goals123(ctx, &out); err != nil {
			return out, fmt.Errorf("goals 1–3: %w", err)
		}
	}
	if strings.Contains(b.o.goals, "4") {
		if err := b.goal4(ctx, &out); err != nil {
			return out, fmt.Errorf("goal 4: %w", err)
		}
	}
	if strings.Contains(b.o.goals, "5") {
		if err := b.goal5(ctx, &out); err != nil {
			return out, fmt.Errorf("goal 5: %w", err)
		}
	}
	return out, nil
}

func (b *bench) goals123(ctx context.Context, out *goalsResult) error {
	sz := out.sz
	cc := &cmdCounter{}
	b.logf("(h) goals 1–3: relay %s", b.g1Prefix)
	rp, err := startRelayWith(b.o.redisURL, b.g1Prefix, b.o.concurrency, b.hc, nil, cc)
	if err != nil {
		return err
	}
	defer func() { _ = rp.stop() }()
	if err := rp.enableAgentSessions(ctx); err != nil {
		return err
	}
	w, err := workerConfig(ctx, b.rdb, jobs.QueuesFor(b.g1Prefix).Turns)
	if err != nil {
		return err
	}
	nOrch := max(sz.agents, 1)
	orch := make([]sessionRef, nOrch)
	targets := make([]string, sz.targets)
	for i := range orch {
		if orch[i], err = rp.createSession(ctx, fmt.Sprintf("Agent %02d", i)); err != nil {
			return err
		}
	}
	for i := range targets {
		t, err := rp.createSession(ctx, fmt.Sprintf("Target %02d", i))
		if err != nil {
			return err
		}
		targets[i] = t.ID
	}
	bare, err := startBare("{}")
	if err != nil {
		return err
	}
	defer bare.stop()
	cl := clients{inproc: b.o.inproc, tr: b.tr}
	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	hopRedis := b.ropts

	if strings.Contains(b.o.goals, "2") && !b.o.quick {
		// A round of goal 2 and of its floor that is not counted: the first round
		// at 32 clients runs while the process's heap, its kept goroutines and the
		// connection pools grow (it measured 20–30% above the rounds after it).
		b.logf("(h) goal 2 warm-up round (not counted): %d agents × %d round trips, and the floor", sz.agents, sz.n2)
		if _, err := benchSend(ctx, cl, rp, m, jobs.QueuesFor(b.g1Prefix).Turns, orch, targets[:len(orch)], 2, sz.n2); err != nil {
			return err
		}
		if _, err := runCalls(ctx, cl, meter{rdb: b.rdb, rt: &rtCounter{}}, bare.url, "x", "noop", map[string]any{}, sz.agents, sz.agents*sz.n2, 2); err != nil {
			return err
		}
	}
	for r := 0; r < sz.rounds; r++ {
		// Goal 1: one client each, interleaved within the round.
		b.logf("(h) goal 1 round %d/%d: 1 client, %d calls each: send→reply, bare MCP no-op, bare asynq hop", r+1, sz.rounds, sz.n1)
		s, err := benchSend(ctx, cl, rp, m, jobs.QueuesFor(b.g1Prefix).Turns, orch[:1], targets[:1], 2, sz.n1)
		if err != nil {
			return err
		}
		out.send1 = append(out.send1, s.lat.p50())
		out.rts1 = append(out.rts1, s.cost.per(s.n).rts)
		out.rtP50s1 = append(out.rtP50s1, s.rtLat.p50())
		nm := meter{rdb: b.rdb, rt: &rtCounter{}}
		c, err := runCalls(ctx, cl, nm, bare.url, "x", "noop", map[string]any{}, 1, sz.n1, 2)
		if err != nil {
			return err
		}
		out.mcp1 = append(out.mcp1, c.lat.p50())
		h, err := benchHopWith(ctx, hopRedis, b.rdb, b.g1Prefix, jobs.QueuesFor(b.g1Prefix).Turns, w, 1, 2, sz.n1, true)
		if err != nil {
			return err
		}
		if h.errs > 0 {
			return fmt.Errorf("hop: %w", h.err)
		}
		out.hop1 = append(out.hop1, h.lat.p50())

		if strings.Contains(b.o.goals, "2") {
			// Goal 2: agents at once, each to its own target.
			b.logf("(h) goal 2 round %d/%d: %d agents × %d round trips", r+1, sz.rounds, sz.agents, sz.n2)
			stopProf := b.profileStart(fmt.Sprintf("goal2-%d", r+1))
			s2, err := benchSend(ctx, cl, rp, m, jobs.QueuesFor(b.g1Prefix).Turns, orch, targets[:len(orch)], 2, sz.n2)
			stopProf()
			b.logf("(h) goal 2 round %d/%d: the bench process's live heap after it (relay and clients' bookkeeping): %.1f MiB", r+1, sz.rounds, liveHeapMiB())
			if err != nil {
				return err
			}
			p := s2.cost.per(s2.n)
			out.thr2 = append(out.thr2, rate(s2.n, s2.wall))
			out.rts2 = append(out.rts2, p.rts)
			out.cmds2 = append(out.cmds2, p.cmds)
			out.cpu2 = append(out.cpu2, float64(p.procCPU)/float64(time.Millisecond))
			out.p50s2 = append(out.p50s2, s2.lat.p50())
			// Its floor: what go-sdk alone costs per call and go-redis per
			// round trip at the same concurrency, in this process.
			c2, err := runCalls(ctx, cl, meter{rdb: b.rdb, rt: &rtCounter{}}, bare.url, "x", "noop", map[string]any{}, sz.agents, sz.agents*sz.n2, 2)
			if err != nil {
				return err
			}
			out.mcpCPU2 = append(out.mcpCPU2, float64(c2.cost.per(c2.n).procCPU)/float64(time.Millisecond))
			rtCPU, err := redisRTCPU(ctx, hopRedis, b.rdb, sz.agents, sz.agents*sz.n2*8)
			if err != nil {
				return err
			}
			out.rtCPU2 = append(out.rtCPU2, rtCPU)
		}
		if strings.Contains(b.o.goals, "3") {
			// Goal 3, the hop: idle-gapped hops, the relay's config (waker) vs asynq polling every 10 ms.
			b.logf("(h) goal 3 round %d/%d: %d idle-gapped hops with the waker and with 10 ms polling", r+1, sz.rounds, sz.hops3)
			for _, wake := range []bool{true, false} {
				d, _, _, err := idleHops(ctx, hopRedis, b.rdb, b.g1Prefix, wake, sz.hops3, 0)
				if err != nil {
					return err
				}
				if wake {
					out.hopWake = append(out.hopWake, d.p50())
				} else {
					out.hopPoll10 = append(out.hopPoll10, d.p50())
				}
			}
		}
	}

	if !strings.Contains(b.o.goals, "3") {
		return nil
	}
	// Goal 3, the idle load: the relay with no turns and nothing due.
	if err := waitQueuesIdle(ctx, b.rdb, jobs.QueuesFor(b.g1Prefix).All(), time.Minute); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	b.logf("(h) goal 3: the idle relay for %d s", sz.idleSecs)
	by0, rt0, srv0 := cc.snap(), rp.rt.n.Load(), totalCommands(ctx, b.rdb)
	t0 := time.Now()
	time.Sleep(time.Duration(sz.idleSecs) * time.Second)
	el := time.Since(t0).Seconds()
	by1, rt1, srv1 := cc.snap(), rp.rt.n.Load(), totalCommands(ctx, b.rdb)
	var total int64
	type kv struct {
		k string
		v int64
	}
	var top []kv
	for k, v := range by1 {
		if d := v - by0[k]; d > 0 {
			total += d
			top = append(top, kv{k, d})
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].v > top[j].v })
	var parts []string
	for i, x := range top {
		if i == 8 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f/s", x.k, float64(x.v)/el))
	}
	out.idleSecs = el
	out.idleRTs = float64(rt1-rt0) / el
	out.idleCmds = float64(total) / el
	out.idleSrv = float64(srv1-srv0-2) / el // minus the two INFO calls of this measure
	out.idleTop = strings.Join(parts, ", ")

	// A bare idle asynq server, the same queues: with 10 ms polling and with the waker.
	for _, wake := range []bool{false, true} {
		_, rts, srv, err := idleHops(ctx, hopRedis, b.rdb, b.g1Prefix, wake, 0, min(sz.idleSecs, 10))
		if err != nil {
			return err
		}
		if wake {
			out.asynqIdleRTWk, out.asynqIdleWake = rts, srv
		} else {
			out.asynqIdleRT10, out.asynqIdle10 = rts, srv
		}
	}
	return nil
}

// redisRTCPU is the process CPU (ms) a bare go-redis client spends per round
// trip: conc goroutines sending n one-key GETs in all, one at a time each.
func redisRTCPU(ctx context.Context, opts *redisurl.URL, info redis.UniversalClient, conc, n int) (float64, error) {
	rdb := opts.NewClient()
	defer func() { _ = rdb.Close() }()
	key := fmt.Sprintf("bench-rt-%d", time.Now().UnixNano()) // never written: GET answers nil
	m := meter{rdb: info, rt: &rtCounter{}}
	s0 := m.snap(ctx)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range conc {
		wg.Go(func() {
			for range n / conc {
				if err := rdb.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, fmt.Errorf("bare round trips: %w", err)
	}
	cost := m.snap(ctx).sub(s0)
	return float64(cost.procCPU) / float64(time.Millisecond) / float64(n/conc*conc), nil
}

// idleHops runs a bare asynq server on two queues of prefix (like the relay
// worker's): with the waker (TaskCheckInterval 1 ms) or asynq polling every
// 10 ms (DelayedTaskCheckInterval 100 ms). It makes n hops, each after 150 ms
// of idling (the processor has gone back to waiting), and returns their
// Enqueue→handler start times; with idleSecs > 0 it first measures the
// server idle: its client's round trips/s and the server-wide commands/s.
func idleHops(ctx context.Context, opts *redisurl.URL, info redis.UniversalClient, prefix string, wake bool, n, idleSecs int) (dist, float64, float64, error) {
	q := jobs.Queues{Turns: prefix + ":ihop", Events: prefix + ":ihop-ev"}
	rdb := opts.NewClient()
	defer func() { _ = rdb.Close() }()
	var wk *worker.Waker
	poll := 10 * time.Millisecond
	if wake {
		wk = worker.NewWaker(rdb, q.All(), worker.DefaultIdleCheck)
		rdb.AddHook(wk)
		poll = time.Millisecond
	}
	rt := &rtCounter{}
	rdb.AddHook(rt)
	started := make(chan string, 4)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 64, Queues: map[string]int{q.Turns: 1, q.Events: 1},
		TaskCheckInterval: poll, DelayedTaskCheckInterval: 100 * time.Millisecond, ShutdownTimeout: 8 * time.Second,
		Logger: asynqLogger{slog.New(slog.NewTextHandler(os.Stderr, nil))}, LogLevel: asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(hopTaskType, func(_ context.Context, t *asynq.Task) error {
		select {
		case started <- string(t.Payload()):
		default:
		}
		return nil
	})
	if wk != nil {
		wk.Start()
	}
	if err := srv.Start(mux); err != nil {
		return nil, 0, 0, err
	}
	defer func() {
		if wk != nil {
			wk.Shutdown()
		}
		srv.Shutdown()
	}()
	time.Sleep(1500 * time.Millisecond) // subscribed, heartbeat written, settled
	var rts, srvRate float64
	if idleSecs > 0 {
		r0, s0 := rt.n.Load(), totalCommands(ctx, info)
		t0 := time.Now()
		time.Sleep(time.Duration(idleSecs) * time.Second)
		el := time.Since(t0).Seconds()
		rts, srvRate = float64(rt.n.Load()-r0)/el, float64(totalCommands(ctx, info)-s0-2)/el
	}
	client := asynq.NewClientFromRedisClient(rdb)
	defer func() { _ = client.Close() }()
	var lat []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		time.Sleep(150 * time.Millisecond)
		id := fmt.Sprintf("ihop:%s:%d", store.NewID(6), i)
		t0 := time.Now()
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(hopTaskType, []byte(id), asynq.Queue(q.Turns), asynq.TaskID(id),
			asynq.MaxRetry(1000), asynq.Timeout(time.Hour))); err != nil {
			return nil, 0, 0, err
		}
		for got := ""; got != id; {
			select {
			case got = <-started:
			case <-time.After(10 * time.Second):
				return nil, 0, 0, fmt.Errorf("hop %s did not start within 10 s", id)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	return newDist(lat), rts, srvRate, ctx.Err()
}

// goal4 measures turns/s with one worker and with two (a second relay process
// in worker mode on the same prefix and configuration), in interleaved rounds.
//
// A worker runs at most its asynq concurrency of turns at once (a drain task
// holds its slot for the whole turn: relay.Drain runs the agent and writes the
// outcome before it returns), so a worker's bound is concurrency ÷ the slot
// time of a turn: the agent's 50 ms plus the relay's own work around it (the
// drain's preamble, the outcome, the next drain's hop). Every round checks that
// each turn ended done and ran at least the agent's sleep: a turn that fails
// at once (for example a second worker whose configuration does not allow the
// sessions' folder) would otherwise count as throughput.
func (b *bench) goal4(ctx context.Context, out *goalsResult) error {
	sz := out.sz
	prefix := b.g4Prefix
	b.logf("(h) goal 4: relay %s, %d sessions, agent turns of %d ms, concurrency %d per worker", prefix, sz.sessions4, sz.turnMillis, sz.conc4)
	rp, err := startRelay(b.o.redisURL, prefix, sz.conc4, b.hc)
	if err != nil {
		return err
	}
	defer func() { _ = rp.stop() }()
	r := rp.app.Relay()
	ids, err := newSessions(ctx, r, sz.sessions4, 16, func(i int) string { return fmt.Sprintf("Worker test %02d", i) })
	if err != nil {
		return err
	}
	text := fmt.Sprintf(`{"script":[{"sleep_ms":%d},{"reply":"ok"}]}`, sz.turnMillis)
	q := jobs.QueuesFor(prefix)
	st := rp.app.Store()
	var all4 []string
	// round sends turns4 owner messages (16 senders) and waits until every
	// one of those turns has ended (its turn record's EndedAt), polling every
	// 5 ms; then it checks every turn ended done after at least the agent's sleep.
	round := func() (float64, error) {
		t0 := time.Now()
		msgs := make([]string, sz.turns4)
		defer func(m []string) { all4 = append(all4, m...) }(msgs)
		err := parallel(ctx, sz.turns4, 16, func(i int) error {
			res, err := r.OwnerMessage(ctx, ids[i%len(ids)], text)
			if err != nil {
				return err
			}
			msgs[i] = res.MessageID
			if msgs[i] == "" {
				return fmt.Errorf("owner message: no message_id in %v", res)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		deadline := time.Now().Add(2 * time.Minute)
		for left := msgs; len(left) > 0; {
			tr, err := st.GetTurn(ctx, left[0])
			if err != nil {
				return 0, err
			}
			if !tr.EndedAt.IsZero() {
				left = left[1:] // the rest are later in their sessions' queues or checked next
				continue
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%d turns not ended after 2 min", len(left))
			}
			time.Sleep(5 * time.Millisecond)
		}
		el := time.Since(t0)
		bad, short, first := 0, 0, ""
		for _, id := range msgs {
			tr, err := st.GetTurn(ctx, id)
			if err != nil {
				return 0, err
			}
			switch {
			case tr.Status != store.TurnDone:
				bad++
				if first == "" {
					first = fmt.Sprintf("%s: %s", tr.Status, tr.Error)
				}
			case tr.EndedAt.Sub(tr.StartedAt) < time.Duration(sz.turnMillis)*time.Millisecond-time.Millisecond: // whole ms
				short++
			}
		}
		if bad > 0 || short > 0 {
			return 0, fmt.Errorf("%d of %d turns did not end done (first: %s), %d ended before the agent's %d ms", bad, len(msgs), first, short, sz.turnMillis)
		}
		return rate(sz.turns4, el), waitQueues(ctx, b.rdb, q.All(), time.Minute, 5*time.Millisecond, true)
	}
	// two runs a round with a second worker, started before and stopped after it.
	two := func() (float64, error) {
		wp, counter, err := startWorkerProc(b.o.redisURL, prefix, rp.dir, sz.conc4)
		if err != nil {
			return 0, err
		}
		n0 := counter.started.Load()
		thr, err := round()
		ran := counter.started.Load() - n0
		if serr := wp.stop(); err == nil && serr != nil {
			err = serr
		}
		out.second4 = append(out.second4, float64(ran)/float64(sz.turns4))
		return thr, err
	}
	if _, err := round(); err != nil { // warm-up
		return err
	}
	s0 := takeSnapshot(ctx, b.rdb, nil, nil)
	for i := 0; i < sz.rounds4; i++ {
		// Alternate the order (one, two; two, one; …) so a drift in the
		// machine's load does not favour either.
		for _, second := range []bool{i%2 == 1, i%2 == 0} {
			var thr float64
			var err error
			if second {
				b.logf("(h) goal 4 round %d/%d: two workers", i+1, sz.rounds4)
				thr, err = two()
				out.two4 = append(out.two4, thr)
			} else {
				b.logf("(h) goal 4 round %d/%d: one worker", i+1, sz.rounds4)
				thr, err = round()
				out.one4 = append(out.one4, thr)
			}
			if err != nil {
				return err
			}
		}
	}
	d := takeSnapshot(ctx, b.rdb, nil, nil).sub(s0)
	out.load4 = d.load(0)
	out.cpu4 = d.procCPU / time.Duration(2*sz.rounds4*sz.turns4)
	var durs []time.Duration
	for _, id := range all4 {
		if tr, err := st.GetTurn(ctx, id); err == nil && !tr.EndedAt.IsZero() && !tr.StartedAt.IsZero() {
			durs = append(durs, tr.EndedAt.Sub(tr.StartedAt))
		}
	}
	out.turn4 = newDist(durs)
	return nil
}

// turnCounter is a slog handler that counts a relay's "turn started" records
// and passes warnings and errors on.
type turnCounter struct {
	next    slog.Handler
	started *atomic.Int64
}

func (c turnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (c turnCounter) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "turn started" {
		c.started.Add(1)
	}
	if rec.Level >= slog.LevelWarn {
		return c.next.Handle(ctx, rec)
	}
	return nil
}

func (c turnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return turnCounter{next: c.next.WithAttrs(as), started: c.started}
}

func (c turnCounter) WithGroup(g string) slog.Handler {
	return turnCounter{next: c.next.WithGroup(g), started: c.started}
}

// startWorkerProc starts a second relay process in worker mode (app.ModeWorker,
// what `relay worker` runs) on prefix, with the configuration of the serve
// process whose folder is dir (a worker shares the relay's config file: the
// same folders and providers). It counts the turns the worker starts.
func startWorkerProc(redisURL, prefix, dir string, concurrency int) (*relayProc, turnCounter, error) {
	cfg := benchConfig(redisURL, dir) // the same relay as the serve process
	counter := turnCounter{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), started: &atomic.Int64{}}
	a, err := app.New(cfg, app.Options{KeyPrefix: prefix, Logger: slog.New(counter), Concurrency: concurrency, Mode: app.ModeWorker, ShutdownGrace: 2 * time.Second})
	if err != nil {
		return nil, counter, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	// dir stays "": the folder is the serve process's, removed when it stops.
	p := &relayProc{app: a, prefix: prefix, rt: &rtCounter{}, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.Run(ctx) }()
	select {
	case <-a.Started():
	case err := <-p.done:
		cancel()
		return nil, counter, fmt.Errorf("worker did not start: %w", err)
	case <-time.After(20 * time.Second):
		cancel()
		return nil, counter, fmt.Errorf("worker did not start within 20 s")
	}
	return p, counter, nil
}

// goal5 measures 100,000 idle sessions and 10,000 subscriptions in one relay.
func (b *bench) goal5(ctx context.Context, out *goalsResult) error {
	sz := out.sz
	prefix := b.g5Prefix
	b.logf("(h) goal 5: relay %s, %d idle sessions, %d subscriptions", prefix, sz.sessions5, sz.subs5)
	cc := &ctxCounter{}
	rp, err := startRelayWith(b.o.redisURL, prefix, b.o.concurrency, b.hc, func(c *config.Config) {
		c.Timing.Coalesce = 0
		c.Timing.WakeLimitPerHour = 1 << 30
	}, cc)
	if err != nil {
		return err
	}
	defer func() { _ = rp.stop() }()
	if err := rp.enableAgentSessions(ctx); err != nil {
		return err
	}
	if err := settleLazyFree(ctx, b.rdb); err != nil {
		return err
	}
	_, usage0, err := prefixUsage(ctx, b.rdb, prefix)
	if err != nil {
		return err
	}
	used0, _, err := memInfo(ctx, b.rdb)
	if err != nil {
		return err
	}
	r := rp.app.Relay()
	t := time.Now()
	ids, err := newSessions(ctx, r, sz.sessions5, 16, func(i int) string { return fmt.Sprintf("Idle %06d", i) })
	if err != nil {
		return err
	}
	out.createWall5 = time.Since(t)
	if err := settleLazyFree(ctx, b.rdb); err != nil {
		return err
	}
	used1, _, err := memInfo(ctx, b.rdb)
	if err != nil {
		return err
	}
	_, usage1, err := prefixUsage(ctx, b.rdb, prefix)
	if err != nil {
		return err
	}
	out.n5, out.used5, out.usage5 = len(ids), used1-used0, usage1-usage0

	// Subscriptions: watchers are the first 100 sessions (never watched); 5
	// sessions get 10 subscriptions, the rest of the hot set 1 each, and the
	// remainder of the subscriptions watch other sessions (1 each).
	q := jobs.QueuesFor(prefix)
	e := &evBench{rp: rp, r: r, rdb: b.rdb, cc: cc, titles: map[string]string{}, queues: q.All(), turnsQ: q.Turns,
		insp:    asynq.NewInspectorFromRedisClient(rp.app.Redis()),
		stalled: int(config.Default().Timing.StalledDefault / time.Minute)}
	e.watchers = ids[:100]
	nOne := sz.subs5 - 10*evTenSmall
	e.ten = ids[100 : 100+evTenSmall]
	e.one = ids[100+evTenSmall : 100+evTenSmall+nOne]
	for i, id := range ids[:100+evTenSmall+nOne] {
		e.titles[id] = fmt.Sprintf("Idle %06d", i)
	}
	t = time.Now()
	if _, err := e.subscribe(ctx, e.one[:evOneSmall], e.ten); err != nil {
		return err
	}
	extra, err := e.subscribe(ctx, e.one[evOneSmall:], nil)
	if err != nil {
		return err
	}
	out.subWall5 = time.Since(t)
	out.subs5 = evOneSmall + 10*evTenSmall + len(extra)
	out.small5 = evOneSmall + 10*evTenSmall
	out.total5 = out.subs5
	if err := settleLazyFree(ctx, b.rdb); err != nil {
		return err
	}
	used2, _, err := memInfo(ctx, b.rdb)
	if err != nil {
		return err
	}
	keys2, usage2, err := prefixUsage(ctx, b.rdb, prefix)
	if err != nil {
		return err
	}
	out.subUsed5, out.subUsage5, out.keys5 = used2-used1, usage2-usage1, int64(keys2)

	// list_sessions over MCP, as (c), with every session in the relay.
	tok, err := rp.createSession(ctx, "Lister")
	if err != nil {
		return err
	}
	cl := clients{inproc: b.o.inproc, tr: b.tr}
	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	b.logf("(h) goal 5: list_sessions × %d over MCP with %d sessions", sz.calls5, len(ids)+1)
	if out.list5, err = runCalls(ctx, cl, m, rp.url+"/mcp", tok.Token, "relay_tool",
		map[string]any{"action": "list_sessions", "relay": "this", "limit": 50}, 8, sz.calls5, 5); err != nil {
		return err
	}

	// Fan-out per event: the hot subscriptions alone, then all of them, alternating.
	if err := e.warm(ctx); err != nil {
		return err
	}
	for pass := 0; pass < 4; pass++ {
		total := out.small5
		if pass%2 == 1 {
			total = out.total5
		}
		b.logf("(h) goal 5: fan-out pass %d/4 at %d subscriptions", pass+1, total)
		if err := e.setActive(ctx, extra, total == out.total5); err != nil {
			return err
		}
		if err := e.probePass(ctx, out.cells5, total, pass, sz.probes5); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) tableGoals(all rowFunc, g goalsResult) {
	sz := g.sz
	row := func(n, m, r, t, v string) {
		if strings.Contains(b.o.goals, strings.TrimPrefix(n, "G")) {
			all(n, m, r, t, v)
		}
	}
	// Goal 1.
	s1, m1, h1 := medianD(g.send1), medianD(g.mcp1), medianD(g.hop1)
	r1 := ratio(float64(s1), float64(m1+h1))
	// Where the send's time goes: the MCP floor, the relay's Redis round
	// trips (at their p50 while the sends ran), the rest.
	rts1, rtp := medianF(g.rts1), medianD(g.rtP50s1)
	redis1 := time.Duration(rts1 * float64(rtp))
	row("G1", fmt.Sprintf("send→reply p50 at 1 client ÷ (bare MCP no-op call p50 + bare asynq hop p50), medians of %d interleaved rounds of %d calls each (the hop with the relay worker's config: waker, TaskCheckInterval 1 ms); where the send's time goes: the relay client's Redis round trips per send at their p50 while the sends ran", len(g.send1), sz.n1),
		fmt.Sprintf("**%.2f×** (send→reply %s; MCP %s + hop %s = %s; per-round send p50s %s) · the send: MCP floor %s, the relay's %.1f Redis round trips at p50 %s ≈ %s, the rest (its CPU work, wake-ups, the turn) %s; the turn's drain starts in the process that took the prompt, so no asynq hop is on the reply's path",
			r1, fms(s1), fms(m1), fms(h1), fms(m1+h1), fmsList(g.send1), fms(m1), rts1, fms(rtp), fms(redis1), fms(s1-m1-redis1)),
		"≤ 1.3×", verdict(r1 <= 1.3))
	// Goal 2.
	thr, rts, cmds, cpu := medianF(g.thr2), medianF(g.rts2), medianF(g.cmds2), medianF(g.cpu2)
	mcpCPU, rtCPU := medianF(g.mcpCPU2), medianF(g.rtCPU2)
	floor := mcpCPU + rts*rtCPU
	g2 := verdict(thr >= 600 && rts <= 12 && cpu <= 0.8)
	if floor >= 0.8 {
		g2 += fmt.Sprintf(" (CPU: the MCP call and the Redis round trips alone take %.2f ms)", floor)
	}
	row("G2", fmt.Sprintf("send→reply with %d agents (each its own orchestrator session and MCP client, sending to its own target; %d target sessions created), medians of %d rounds of %d round trips per agent; the CPU floor, in each round at the same concurrency: a bare go-sdk server's no-op tool (%d clients) and a bare go-redis client's round trips (%d goroutines), process CPU per call and per round trip", sz.agents, sz.targets, len(g.thr2), sz.n2, sz.agents, sz.agents),
		fmt.Sprintf("**%.0f round trips/s** (p50 %s) · **%.1f Redis round trips** (relay client) · %.1f Redis commands (INFO total_commands_processed delta, the sum of commandstats calls, Lua-internal calls included) · **%.2f ms relay CPU** (rusage) per round trip · its floor: a go-sdk no-op call %.2f ms + %.1f Redis round trips × %.3f ms = **%.2f ms**; the relay's own work above it %.2f ms; per round: relay CPU %s ms, go-sdk no-op %s ms",
			thr, fms(medianD(g.p50s2)), rts, cmds, cpu, mcpCPU, rts, rtCPU, floor, cpu-floor, msList(g.cpu2), msList(g.mcpCPU2)),
		"≥ 600/s, ≤ 12 RT, ≤ 0.8 ms", g2)
	// Goal 3.
	hw, hp := medianD(g.hopWake), medianD(g.hopPoll10)
	row("G3", fmt.Sprintf("idle relay (no turns, nothing due) over %.0f s: Redis commands/s of the process; its hop after idling next to asynq polling every 10 ms", g.idleSecs),
		fmt.Sprintf("**%.1f commands/s** server-wide (INFO commandstats delta, Lua-internal calls included; any other client of this Redis counts too) · %.1f commands/s and %.1f round trips/s sent by the relay's client (%s) · idle-gapped hop p50 **%s** with the waker vs **%s** at 10 ms polling (medians of %d rounds × %d hops) · a bare asynq server idle on the same 2 queues: %.1f commands/s (%.1f round trips/s) at 10 ms polling, %.1f (%.1f) with the waker",
			g.idleSrv, g.idleCmds, g.idleRTs, g.idleTop, fms(hw), fms(hp), len(g.hopWake), sz.hops3,
			g.asynqIdle10, g.asynqIdleRT10, g.asynqIdleWake, g.asynqIdleRTWk),
		"≤ 10/s; hop ≤ 10 ms polling's", verdict(g.idleSrv <= 10 && hw <= hp))
	// Goal 4.
	one, two := medianF(g.one4), medianF(g.two4)
	r4 := ratio(two, one)
	pairs := make([]string, 0, len(g.one4))
	for i := range min(len(g.one4), len(g.two4)) {
		pairs = append(pairs, fmt.Sprintf("%.2f", ratio(g.two4[i], g.one4[i])))
	}
	ceiling := float64(sz.conc4*1000) / float64(sz.turnMillis)
	// A worker's slot time per turn: concurrency × wall ÷ turns (the agent's
	// sleep plus the relay's own work and the next drain's hop).
	slot1, slot2 := float64(sz.conc4)*1000/one, float64(2*sz.conc4)*1000/two
	row("G4", fmt.Sprintf("turn throughput, two worker processes ÷ one: %d sessions, scripted agent turns of %d ms, asynq concurrency %d per worker, %d turns per round (each checked: ended done, after at least %d ms), medians of %d interleaved pairs of rounds (order alternating); the second worker is app.ModeWorker (what `relay worker` runs) with the serve process's configuration, same Redis, prefix and name, in this program: both workers, the senders and Redis share the machine's %d CPUs", sz.sessions4, sz.turnMillis, sz.conc4, sz.turns4, sz.turnMillis, len(g.one4), runtime.NumCPU()),
		fmt.Sprintf("**%.2f×** (one: %.0f turns/s, two: %.0f turns/s; rounds one %s, two %s, pairs %s; the second worker ran %.0f%% of the two-worker turns; a worker's bound is concurrency ÷ slot time per turn: nominal %.0f turns/s at %d ms, measured slot time per turn %.1f ms with one worker, %.1f ms with two; the turns took p50 %s, p99 %s, n=%d; CPU of this process %s per turn; load %s)",
			r4, one, two, fltList(g.one4), fltList(g.two4), strings.Join(pairs, ", "), 100*medianF(g.second4), ceiling, sz.turnMillis, slot1, slot2,
			fms(g.turn4.p50()), fms(g.turn4.p99()), len(g.turn4), fms(g.cpu4), g.load4),
		"≥ 1.7×", verdict(r4 >= 1.7)+g4note(one, two, sz))
	// Goal 5.
	c := func(total, m, iso int) *fanCell {
		if x := g.cells5[[3]int{total, m, iso}]; x != nil {
			return x
		}
		return &fanCell{}
	}
	l0, l1, l10, s1c := c(g.total5, 0, 1), c(g.total5, 1, 1), c(g.total5, 10, 1), c(g.small5, 1, 1)
	per1 := l1.mean() - l0.mean()
	per10 := (l10.mean() - l0.mean()) / 10
	lin := ratio(float64(per10), float64(per1))
	flat := ratio(float64(l1.mean()), float64(s1c.mean()))
	perS := float64(g.usage5) / float64(max(1, g.n5))
	perSub := float64(g.subUsage5) / float64(max(1, g.subs5))
	memTotal := float64(g.usage5+g.subUsage5) / mib
	row("G5", fmt.Sprintf("scale: %d idle sessions (created in-process at %s) and %d subscriptions (store.SaveSubscription, as (e)) in one relay", g.n5, frate(rate(g.n5, g.createWall5), "sessions/s"), g.subs5),
		fmt.Sprintf("memory **%.1f MiB** (MEMORY USAGE: %.0f B/session, %.0f B/subscription; used_memory delta %.1f MiB; %d keys) · list_sessions (limit 50, 8 MCP clients) p50 %s, **p99 %s**, %s · fan-out per event, isolated, mean of %d: 0 matching %s (%.1f RT), 1 matching %s (%.1f RT), 10 matching %s (%.1f RT) → per matching subscription at 10 ÷ at 1 **%.2f×**; 1 matching at %d ÷ at %d subscriptions in all **%.2f×**",
			memTotal, perS, perSub, float64(g.used5+g.subUsed5)/mib, g.keys5, fms(g.list5.lat.p50()), fms(g.list5.lat.p99()), frate(g.list5.perSec(), "calls/s"),
			l1.n(), fms(l0.mean()), l0.rtsPer(), fms(l1.mean()), l1.rtsPer(), fms(l10.mean()), l10.rtsPer(), lin, g.total5, g.small5, flat),
		"∝ matching: 0.67–1.5×, flat in total ≤ 1.25×", verdict(lin >= 0.67 && lin <= 1.5 && flat <= 1.25))
}

func fmsList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fms(d)
	}
	return strings.Join(parts, ", ")
}

// msList lists milliseconds to two places.
func msList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

func fltList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// g4note flags a result the workers' concurrency cannot explain (every
// turn is checked to have run the agent's sleep, so this should not happen).
func g4note(one, two float64, sz goalSizes) string {
	ceiling := float64(sz.conc4*1000) / float64(sz.turnMillis)
	if two > 2.1*one || two > 2*ceiling || one > ceiling {
		return " (suspect: above the workers' concurrency × 1000 ÷ turn ms, or two more than twice one)"
	}
	return ""
}
