package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// ---- (g) schedules: memory and firing lateness ----

// perTarget is how many schedules fire into one conversation here: the
// default limits.schedules_into_conversation.
const perTarget = 20

type schedResult struct {
	n           int // active schedules whose memory is measured
	sessions    int // their conversations
	createWall  time.Duration
	keysPrefix  int
	keysAsynq   int
	usagePrefix int64 // MEMORY USAGE over the prefix's keys, after − before
	usageAsynq  int64 // over asynq:{PREFIX:*}, after − before
	usedDelta   int64 // INFO used_memory, after − before

	fireN      int           // schedules due in the window
	fireSecs   int           // window length (s)
	fireRate   int           // due per second
	fireCreate time.Duration // creating them
	fireLead   time.Duration // from the end of creating them to the first due time
	lat        dist          // nextFireAt → the queued message's createdAt, for firings at or after it
	early      int           // firings before nextFireAt
	maxEarly   time.Duration
	found      int // firings found (one per schedule)
	dups       int // schedules that fired more than once in the window
	cost       snapshot
	pending    float64 // events queue (the fire tasks), mean while firing
	turnsQ     float64 // turns queue pending, mean while firing

	active      int // active schedules at the end
	recoverWall time.Duration
	recoverRTs  int64
}

func (s schedResult) per(v int64) float64 { return float64(v) / float64(max(1, s.n)) }

var scheduleMsgRe = regexp.MustCompile(`^\[relay schedule (sch_[0-9a-f]+) `)

// benchSchedules runs (g) in a relay of its own: n schedules created through
// the schedule action in-process (Relay.CallTool as their own conversation,
// perTarget per conversation), then rate×secs schedules due across a window
// of secs seconds, rate per second at whole seconds.
func benchSchedules(ctx context.Context, b *bench, prefix string) (schedResult, error) {
	o := b.o
	out := schedResult{n: o.schedules, fireRate: o.fireRate, fireSecs: o.fireSecs, fireN: o.fireRate * o.fireSecs}
	cc := &ctxCounter{}
	rp, err := startRelayWith(o.redisURL, prefix, o.concurrency, b.hc, func(c *config.Config) {
		c.Settings.AgentSessions = true // the schedule action needs agent sessions on
	}, cc)
	if err != nil {
		return out, err
	}
	defer func() { _ = rp.stop() }()
	r := rp.app.Relay()
	memSessions := (o.schedules + perTarget - 1) / perTarget
	out.sessions = memSessions
	ids, err := newSessions(ctx, r, memSessions+o.fireRate, 16, func(i int) string {
		if i < memSessions {
			return fmt.Sprintf("Scheduled %04d", i)
		}
		return fmt.Sprintf("Fired %03d", i-memSessions)
	})
	if err != nil {
		return out, fmt.Errorf("(g) sessions: %w", err)
	}
	memIDs, fireIDs := ids[:memSessions], ids[memSessions:]

	schedule := func(sid string, at time.Time) (string, error) {
		raw, _ := json.Marshal(map[string]any{"action": "schedule", "text": "Check the nightly build and report what failed.",
			"at": at.UTC().Format(time.RFC3339), "every_minutes": 1440})
		env, isErr := r.CallTool(ctx, sid, raw, nil)
		var res struct {
			OK         bool   `json:"ok"`
			ScheduleID string `json:"schedule_id"`
		}
		if err := json.Unmarshal(env, &res); err != nil || isErr || !res.OK || res.ScheduleID == "" {
			return "", fmt.Errorf("schedule: %s", env)
		}
		return res.ScheduleID, nil
	}

	// Memory of n active schedules (due tomorrow, daily).
	if err := settleLazyFree(ctx, b.rdb); err != nil {
		return out, err
	}
	_, p0, err := prefixUsage(ctx, b.rdb, prefix)
	if err != nil {
		return out, err
	}
	_, a0, err := prefixUsage(ctx, b.rdb, "asynq:{"+prefix)
	if err != nil {
		return out, err
	}
	used0, _, err := memInfo(ctx, b.rdb)
	if err != nil {
		return out, err
	}
	b.logf("(g) %d schedules into %d conversations (schedule action, in-process)", o.schedules, memSessions)
	base := time.Now().Truncate(time.Second).Add(24 * time.Hour)
	t := time.Now()
	if err := parallel(ctx, o.schedules, 16, func(i int) error {
		_, err := schedule(memIDs[i/perTarget], base.Add(time.Duration(i%3600)*time.Second))
		return err
	}); err != nil {
		return out, fmt.Errorf("(g) %w", err)
	}
	out.createWall = time.Since(t)
	if err := settleLazyFree(ctx, b.rdb); err != nil {
		return out, err
	}
	used1, _, err := memInfo(ctx, b.rdb)
	if err != nil {
		return out, err
	}
	kp, p1, err := prefixUsage(ctx, b.rdb, prefix)
	if err != nil {
		return out, err
	}
	ka, a1, err := prefixUsage(ctx, b.rdb, "asynq:{"+prefix)
	if err != nil {
		return out, err
	}
	out.keysPrefix, out.keysAsynq = kp, ka
	out.usagePrefix, out.usageAsynq, out.usedDelta = p1-p0, a1-a0, used1-used0

	// Firing lateness: fireRate schedules due at each whole second of the
	// window, one into each of fireRate conversations, created in due order.
	lead := 2*time.Second + time.Duration(out.fireN)*time.Millisecond
	start := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
	b.logf("(g) %d schedules due %d/s over %d s from %s, besides the %d", out.fireN, o.fireRate, o.fireSecs, start.Format("15:04:05"), o.schedules)
	due := make([]time.Time, out.fireN)
	schID := make([]string, out.fireN)
	t = time.Now()
	if err := parallel(ctx, out.fireN, 16, func(k int) error {
		sec, i := k/o.fireRate, k%o.fireRate
		due[k] = start.Add(time.Duration(sec) * time.Second)
		id, err := schedule(fireIDs[i], due[k])
		schID[k] = id
		return err
	}); err != nil {
		return out, fmt.Errorf("(g) %w", err)
	}
	out.fireCreate = time.Since(t)
	out.fireLead = time.Until(start)
	atOf := map[string]time.Time{}
	for k, id := range schID {
		atOf[id] = due[k]
	}

	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	q := jobs.QueuesFor(prefix)
	time.Sleep(time.Until(start.Add(-200 * time.Millisecond)))
	s0 := m.snap(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var evQ, turnQ [3]float64
	wg.Add(2)
	go func() { defer wg.Done(); evQ = sampleQueue(ctx, b.rdb, q.Events, stop) }()
	go func() { defer wg.Done(); turnQ = sampleQueue(ctx, b.rdb, q.Turns, stop) }()
	last := start.Add(time.Duration(o.fireSecs-1) * time.Second)
	time.Sleep(time.Until(last.Add(time.Second)))

	// Find the firings: each is a "schedule" message in its target conversation.
	fired := map[string][]time.Time{}
	deadline := last.Add(20 * time.Second)
	for ctx.Err() == nil {
		fired = map[string][]time.Time{}
		cmds := make([]*redis.StringSliceCmd, len(fireIDs))
		_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sid := range fireIDs {
				cmds[i] = p.LRange(ctx, store.KeyBase(prefix)+"msgs:"+sid, 0, -1)
			}
			return nil
		})
		if err != nil {
			close(stop)
			return out, err
		}
		for _, c := range cmds {
			for _, raw := range c.Val() {
				var msg store.Message
				if json.Unmarshal([]byte(raw), &msg) != nil || msg.Role != "schedule" {
					continue
				}
				if sm := scheduleMsgRe.FindStringSubmatch(msg.Text); sm != nil {
					fired[sm[1]] = append(fired[sm[1]], msg.CreatedAt)
				}
			}
		}
		if len(fired) >= out.fireN || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	out.cost = m.snap(ctx).sub(s0)
	close(stop)
	wg.Wait()
	if evQ[2] > 0 {
		out.pending = evQ[0] / evQ[2]
		out.turnsQ = turnQ[0] / turnQ[2]
		out.cost.cmds -= 2 * int64(evQ[2]+turnQ[2])
	}
	var lats []time.Duration
	for id, ts := range fired {
		at, ok := atOf[id]
		if !ok {
			continue
		}
		out.found++
		if len(ts) > 1 {
			out.dups++
		}
		for _, c := range ts {
			d := c.Sub(at)
			if d < 0 {
				out.early++
				if -d > out.maxEarly {
					out.maxEarly = -d
				}
				continue
			}
			lats = append(lats, d)
		}
	}
	out.lat = newDist(lats)

	// What the every-minute recovery loop costs with this many schedules.
	if err := waitQueuesIdle(ctx, b.rdb, q.All(), time.Minute); err != nil {
		return out, err
	}
	act, err := rp.app.Store().ActiveSchedules(ctx)
	if err != nil {
		return out, err
	}
	out.active = len(act)
	r0 := cc.n.Load()
	t = time.Now()
	if err := r.RecoverSchedules(cc.tagged(ctx)); err != nil {
		return out, err
	}
	out.recoverWall = time.Since(t)
	out.recoverRTs = cc.n.Load() - r0
	return out, nil
}
