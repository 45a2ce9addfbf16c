package worker

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/redisurl"
)

// The wake-up path of the worker (asynq v0.26.0 polls; this makes an idle
// worker cheap without making a hop slow).
//
// asynq's processor runs its dequeue script once per queue; when every queue
// answers nil it sleeps TaskCheckInterval/2 plus a random part of it and polls
// again. Its forwarder runs the forward script on each queue's scheduled and
// retry sets every DelayedTaskCheckInterval. Neither can be told that work
// arrived, so an idle worker polls Redis tens of times a second.
//
// The waker is a go-redis hook on the worker's client (the process shares that
// client with its asynq.Client, so it also sees every enqueue of the process):
//
//   - After a script that adds to a queue's pending list (enqueue, requeue,
//     and the forward script when it moved tasks), a PUBLISH on the queue's
//     wake channel goes in the same round trip (a pipeline: the script, then
//     PUBLISH, in that order on the server).
//   - When the dequeue script has answered nil on every queue of the worker,
//     and no wake arrived since the first of those answers was asked for, the
//     processor's goroutine blocks in the hook until a wake (a message on a
//     wake channel, a resubscription), Options.IdleCheck (1 s) or Shutdown.
//     Then the processor sleeps its TaskCheckInterval (1 ms by default with
//     the waker) and dequeues again. No wake is lost: the generation is read
//     before the dequeue script is sent, and a task pushed after the script
//     ran is published after it too.
//   - After a script that adds to a scheduled or retry set, a "d" message
//     goes on the wake channel (pipelined the same way). The forward script of
//     a set is answered locally with 0 (no round trip) while nothing in the
//     set can be due: the set's earliest score was read (ZRANGE 0 0, pipelined
//     after the last forward script) and is still in the future, no "d"
//     arrived since, and the last real check is less than IdleCheck old.
//     While that holds for every set, the forwarder's first call of a round
//     waits in the hook (no 100 ms ticks): until the earliest due time, an
//     IdleCheck, a "d" or Shutdown; then the round asks each set in order.
//
// Nothing here changes what asynq does with a task: the scripts are asynq's
// own, run unchanged; the hook only decides when the processor and forwarder
// ask. A lost message (a dropped subscription) costs at most IdleCheck.
// Waker is the wake-up path's hook (see above). NewWaker builds it; add it
// to the client with AddHook, then Start; Shutdown ends it.
type Waker struct {
	rdb       redis.UniversalClient
	queues    []string        // the worker's queues
	ours      map[string]bool // qname → one of ours
	idle      time.Duration   // longest block, and longest a delayed set goes unchecked
	fallback  time.Duration   // block while the subscription is not confirmed (the old poll)
	gen       uint64          // wakes seen (guarded by mu)
	mu        sync.Mutex
	wakeCh    chan struct{}     // closed at the next wake
	empty     map[string]uint64 // qname → gen read before the dequeue that found it empty
	delayed   map[string]*delayedState
	markCh    chan struct{} // closed at the next mark of a delayed set (guarded by mu)
	fwdAt     time.Time     // when the forwarder's last script call ended (guarded by mu)
	firstSet  string        // the set the forwarder asks first in a round (guarded by mu)
	ready     atomic.Bool   // the subscription is confirmed
	on        atomic.Bool   // Start ran and Shutdown did not
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
	ps        []*redis.PubSub
	sharded   bool         // a cluster client: wake-ups go by SPUBLISH/SSUBSCRIBE on the queue's slot
	blocks    atomic.Int64 // times the processor blocked
	timeouts  atomic.Int64 // blocks that ended at IdleCheck
	skipped   atomic.Int64 // forward scripts answered locally
	published atomic.Int64 // wake messages published by this process
	rests     atomic.Int64 // times the forwarder waited with every delayed set at rest
}

type delayedState struct {
	dirty   bool      // something was added since the last real check
	nextDue int64     // earliest score (unix seconds) at the last real check; MaxInt64 when empty
	checked time.Time // the last real check
}

// WakeStats counts what the waker did (for the benchmark and tests).
type WakeStats struct {
	Blocks, Timeouts, Skipped, Published, Rests int64
}

// NewWaker builds a waker for the worker's queues on rdb; idle is IdleCheck.
func NewWaker(rdb redis.UniversalClient, queues []string, idle time.Duration) *Waker {
	w := &Waker{rdb: rdb, queues: queues, ours: map[string]bool{}, idle: idle, fallback: 25 * time.Millisecond,
		wakeCh: make(chan struct{}), markCh: make(chan struct{}), empty: map[string]uint64{}, delayed: map[string]*delayedState{},
		stop: make(chan struct{}), done: make(chan struct{}), sharded: redisurl.IsCluster(rdb)}
	for _, q := range queues {
		w.ours[q] = true
		w.delayed[asynqKey(q, "scheduled")] = &delayedState{dirty: true}
		w.delayed[asynqKey(q, "retry")] = &delayedState{dirty: true}
	}
	return w
}

// HealthCheckEvery is how long a wake subscription goes without a message
// before go-redis PINGs it (its default 3 s is a third of an idle relay's
// commands otherwise, issue 36). A connection that closes is seen at once
// without it; a resubscription wakes every waiter, and IdleCheck bounds what a
// silent connection could hold up.
const HealthCheckEvery = 15 * time.Second

func asynqKey(q, suffix string) string { return "asynq:{" + q + "}:" + suffix }

// WakeChannel is the pub/sub channel that tells the workers of queue q that
// work arrived ("p": a task is pending; "d": a scheduled or retry set changed).
func WakeChannel(q string) string { return "asynq:{" + q + "}:wake" }

// Start subscribes to the queues' wake channels; blocking begins once the
// subscription is confirmed (until then an empty poll waits the fallback).
//
// On a Redis Cluster the wake-ups are sharded pub/sub (SSUBSCRIBE, SPUBLISH):
// a wake channel asynq:{QUEUE}:wake hashes to its queue's slot, so the
// SPUBLISH goes to the master that ran the script, on the same connection
// right after it (a plain PUBLISH would go to any node, and a wake could
// reach a worker before the task it announces). Channels are subscribed per
// hash tag (SSUBSCRIBE takes channels of one slot).
func (w *Waker) Start() {
	groups := map[string][]string{}
	var order []string
	for _, q := range w.queues {
		tag := ""
		if w.sharded {
			tag = hashTag(WakeChannel(q))
		}
		if _, ok := groups[tag]; !ok {
			order = append(order, tag)
		}
		groups[tag] = append(groups[tag], WakeChannel(q))
	}
	var wg sync.WaitGroup
	for _, tag := range order {
		var ps *redis.PubSub
		if w.sharded {
			ps = w.rdb.SSubscribe(context.Background(), groups[tag]...)
		} else {
			ps = w.rdb.Subscribe(context.Background(), groups[tag]...)
		}
		w.ps = append(w.ps, ps)
		ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024), redis.WithChannelHealthCheckInterval(HealthCheckEvery))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.listen(ch)
		}()
	}
	w.on.Store(true)
	go func() {
		wg.Wait()
		close(w.done)
	}()
}

// hashTag is what Redis Cluster hashes of key: between the first "{" and the
// first "}" after it when that is not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func (w *Waker) listen(ch <-chan any) {
	for {
		select {
		case <-w.stop:
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				// (Re)subscribed: messages may have been missed.
				if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
					w.ready.Store(true)
				}
				w.markAllDirty()
				w.wake()
			case *redis.Message:
				q := queueOfChannel(m.Channel)
				if m.Payload == "d" {
					w.markDirty(asynqKey(q, "scheduled"))
					w.markDirty(asynqKey(q, "retry"))
					continue
				}
				w.wake()
			}
		}
	}
}

// publish sends a wake message on q's channel (through p when not nil).
func (w *Waker) publish(ctx context.Context, p redis.Cmdable, q, payload string) *redis.IntCmd {
	if p == nil {
		p = w.rdb
	}
	if w.sharded {
		return p.SPublish(ctx, WakeChannel(q), payload)
	}
	return p.Publish(ctx, WakeChannel(q), payload)
}

// Shutdown stops blocking (a blocked processor returns at once) and ends the subscription.
func (w *Waker) Shutdown() {
	w.stopOnce.Do(func() {
		w.on.Store(false)
		w.ready.Store(false)
		close(w.stop)
		w.wake()
		if w.ps != nil {
			for _, ps := range w.ps {
				_ = ps.Close()
			}
			<-w.done
		}
	})
}

// Stats says what the waker did so far.
func (w *Waker) Stats() WakeStats {
	return WakeStats{Blocks: w.blocks.Load(), Timeouts: w.timeouts.Load(), Skipped: w.skipped.Load(), Published: w.published.Load(), Rests: w.rests.Load()}
}

func queueOfChannel(c string) string {
	c = strings.TrimPrefix(c, "asynq:{")
	c = strings.TrimSuffix(c, "}:wake")
	return c
}

func (w *Waker) wake() {
	w.mu.Lock()
	w.gen++
	close(w.wakeCh)
	w.wakeCh = make(chan struct{})
	w.mu.Unlock()
}

func (w *Waker) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

func (w *Waker) markDirty(key string) {
	w.mu.Lock()
	if st := w.delayed[key]; st != nil {
		st.dirty = true
		w.marked()
	}
	w.mu.Unlock()
}

func (w *Waker) markAllDirty() {
	w.mu.Lock()
	for _, st := range w.delayed {
		st.dirty = true
	}
	w.marked()
	w.mu.Unlock()
}

// marked ends a resting forwarder's wait. The caller holds mu.
func (w *Waker) marked() {
	close(w.markCh)
	w.markCh = make(chan struct{})
}

// sawEmpty records that queue q was empty as of generation g0 and blocks when
// every queue of the worker was seen empty with no wake since.
func (w *Waker) sawEmpty(q string, g0 uint64) {
	if !w.ours[q] {
		return
	}
	w.mu.Lock()
	w.empty[q] = g0
	all := true
	for _, x := range w.queues {
		if e, ok := w.empty[x]; !ok || e != w.gen {
			all = false
			break
		}
	}
	ch := w.wakeCh
	w.mu.Unlock()
	if !all {
		return
	}
	d := w.idle
	if !w.on.Load() || !w.ready.Load() {
		d = w.fallback // not subscribed (yet, or any more): poll as asynq would
	}
	w.blocks.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		w.timeouts.Add(1)
		// Ask every queue again before the next block: a task pushed without
		// a wake-up then waits at most one IdleCheck and one round.
		w.mu.Lock()
		clear(w.empty)
		w.mu.Unlock()
	}
}

// script kinds the hook tells apart (by the keys of asynq's scripts).
const (
	scriptOther   = iota
	scriptDequeue // KEYS: pending, paused, active, lease
	scriptForward // KEYS: scheduled|retry, pending
	scriptPending // any other script with a queue's pending list among its KEYS (enqueue, requeue, …)
	scriptDelayed // any other script with a queue's scheduled or retry set among its KEYS (schedule, retry)
)

// classify reads an EVAL/EVALSHA's keys; q is the queue, key the delayed set of a forward.
func classify(cmd redis.Cmder) (kind int, q, key string) {
	keys := scriptKeys(cmd.Args())
	if keys == nil {
		return scriptOther, "", ""
	}
	return classifyKeys(keys)
}

// scriptKeys is the KEYS of an EVAL or EVALSHA's arguments (nil: another
// command, or none).
func scriptKeys(args []any) []string {
	if len(args) < 3 {
		return nil
	}
	name, _ := args[0].(string)
	if name != "evalsha" && name != "eval" {
		return nil
	}
	var n int
	switch v := args[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	case string:
		n, _ = strconv.Atoi(v)
	}
	if n <= 0 || len(args) < 3+n {
		return nil
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i], _ = args[3+i].(string)
	}
	return keys
}

// classifyKeys tells a script's kind by its keys: asynq's dequeue and
// forward by their exact KEYS, then any script with a pending list, then
// any with a scheduled or retry set.
func classifyKeys(keys []string) (kind int, q, key string) {
	if len(keys) == 4 {
		q0, s0 := queueKey(keys[0])
		_, s1 := queueKey(keys[1])
		_, s2 := queueKey(keys[2])
		_, s3 := queueKey(keys[3])
		if s0 == "pending" && s1 == "paused" && s2 == "active" && s3 == "lease" {
			return scriptDequeue, q0, ""
		}
	}
	if len(keys) == 2 {
		q0, s0 := queueKey(keys[0])
		_, s1 := queueKey(keys[1])
		if (s0 == "scheduled" || s0 == "retry") && s1 == "pending" {
			return scriptForward, q0, keys[0]
		}
	}
	for _, k := range keys {
		if qk, s := queueKey(k); s == "pending" {
			return scriptPending, qk, ""
		}
	}
	for _, k := range keys {
		if qk, s := queueKey(k); s == "scheduled" || s == "retry" {
			return scriptDelayed, qk, ""
		}
	}
	return scriptOther, "", ""
}

// queueKey splits an asynq queue's key: "asynq:{q}:pending" → q, "pending"
// ("", "" for another key).
func queueKey(k string) (q, suffix string) {
	if !strings.HasPrefix(k, "asynq:{") {
		return "", ""
	}
	i := strings.LastIndex(k, "}:")
	if i < 0 {
		return "", ""
	}
	return k[len("asynq:{"):i], k[i+2:]
}

// DialHook is go-redis's; the waker has nothing to do there.
func (w *Waker) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook is go-redis's; asynq sends its scripts one by one.
func (w *Waker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook watches asynq's scripts (see the type's comment).
func (w *Waker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		kind, q, key := classify(cmd)
		switch kind {
		case scriptDequeue:
			g0 := w.generation()
			err := next(ctx, cmd)
			if errors.Is(err, redis.Nil) {
				w.sawEmpty(q, g0)
			}
			return err
		case scriptForward:
			return w.forward(ctx, next, cmd, q, key)
		case scriptPending:
			return w.withPublish(ctx, cmd, q, "p")
		case scriptDelayed:
			err := w.withPublish(ctx, cmd, q, "d")
			w.markDirty(asynqKey(q, "scheduled"))
			w.markDirty(asynqKey(q, "retry"))
			return err
		}
		return next(ctx, cmd)
	}
}

// withPublish runs cmd and a PUBLISH on q's wake channel in one round trip.
func (w *Waker) withPublish(ctx context.Context, cmd redis.Cmder, q, payload string) error {
	pipe := w.rdb.Pipeline()
	_ = pipe.Process(ctx, cmd)
	w.publish(ctx, pipe, q, payload)
	_, _ = pipe.Exec(ctx)
	if cmd.Err() == nil {
		w.published.Add(1)
	}
	return cmd.Err()
}

// forward answers the forward script of a delayed set locally with 0 while
// nothing in the set can be due; else runs it with a ZRANGE of the set's
// earliest entry after it (one round trip), and wakes when it moved tasks.
// While every set of the worker rests (nothing can be due in any), the
// forwarder's goroutine waits here instead of ticking every 100 ms (issue 36:
// ten wake-ups a second of an idle process): until the earliest due time, a
// set's IdleCheck, a "d" mark, a resubscription or Shutdown.
func (w *Waker) forward(ctx context.Context, next redis.ProcessHook, cmd redis.Cmder, q, key string) error {
	c, isCmd := cmd.(*redis.Cmd)
	if !w.ours[q] || !isCmd || !w.on.Load() {
		return next(ctx, cmd)
	}
	var now time.Time
	defer func() {
		w.mu.Lock()
		w.fwdAt = time.Now()
		w.mu.Unlock()
	}()
	for rested := false; ; rested = true {
		now = time.Now()
		w.mu.Lock()
		st := w.delayed[key]
		if st == nil {
			w.mu.Unlock()
			return next(ctx, cmd)
		}
		if !rested && now.Sub(w.fwdAt) > fwdGap {
			w.firstSet = key // the first set of the forwarder's round
		}
		if !w.skippable(st, now) {
			st.dirty = false // a mark made while this check runs stays
			w.mu.Unlock()
			if rested {
				restamp(cmd, now)
			}
			break
		}
		var until time.Time
		if key == w.firstSet { // a rest here is followed by every set in order
			until = w.restUntil(now)
		}
		ch := w.markCh
		w.mu.Unlock()
		if until.IsZero() || !w.rest(ctx, until, ch) {
			w.skipped.Add(1)
			c.SetVal(int64(0))
			return nil
		}
	}
	return w.forwardNow(ctx, c, q, key, now)
}

// forwardNow runs the forward script c of q's delayed set key, checked at
// now, with a ZRANGE of the set's earliest entry after it (one round trip):
// the set's next due time is noted, and a forward that moved tasks wakes the
// processors.
func (w *Waker) forwardNow(ctx context.Context, c *redis.Cmd, q, key string, now time.Time) error {
	st := w.delayed[key]
	pipe := w.rdb.Pipeline()
	_ = pipe.Process(ctx, c)
	first := pipe.ZRangeWithScores(ctx, key, 0, 0)
	_, _ = pipe.Exec(ctx)
	w.mu.Lock()
	if c.Err() != nil || first.Err() != nil {
		st.dirty = true
	} else {
		st.checked = now
		st.nextDue = int64(^uint64(0) >> 1)
		if z := first.Val(); len(z) > 0 {
			st.nextDue = int64(z[0].Score)
		}
	}
	w.mu.Unlock()
	if n, err := c.Int64(); err == nil && n > 0 {
		w.wake() // this process's processor
		if err := w.publish(ctx, nil, q, "p").Err(); err == nil {
			w.published.Add(1)
		}
	}
	return c.Err()
}

// fwdGap tells the forwarder's rounds apart: its calls within a round come
// back to back, and a round starts DelayedTaskCheckInterval (100 ms) after the
// last one ended.
const fwdGap = 50 * time.Millisecond

// restamp sets the time in a forward script's ARGV (asynq's forward:
// ARGV[1] unix seconds, ARGV[3] unix ns, read before the call) to now: after
// a rest the time asynq read is the rest's start, and a task due meanwhile
// would wait for the next round.
func restamp(cmd redis.Cmder, now time.Time) {
	args := cmd.Args() // evalsha, sha, 2, KEYS[1], KEYS[2], ARGV[1..4]
	if len(args) != 9 {
		return
	}
	if _, ok := args[5].(int64); ok {
		args[5] = now.Unix()
	}
	if _, ok := args[7].(int64); ok {
		args[7] = now.UnixNano()
	}
}

// skippable says whether set st needs no real check at now: nothing in it
// can be due, no mark since its last check, which is younger than IdleCheck.
// The caller holds mu.
func (w *Waker) skippable(st *delayedState, now time.Time) bool {
	return w.ready.Load() && !st.dirty && now.Unix() < st.nextDue && now.Sub(st.checked) < w.idle
}

// restUntil is when the first of the worker's delayed sets needs a real
// check, zero when one needs it now. The caller holds mu.
func (w *Waker) restUntil(now time.Time) time.Time {
	var until time.Time
	for _, st := range w.delayed {
		if !w.skippable(st, now) {
			return time.Time{}
		}
		t := st.checked.Add(w.idle)
		if st.nextDue != int64(^uint64(0)>>1) {
			t = minTime(t, time.Unix(st.nextDue, 0))
		}
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}
	return until
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// rest blocks the forwarder until until, a mark (ch closes) or Shutdown;
// false when it ends for Shutdown or ctx. When it ends at a set's IdleCheck,
// every set checked more than half an IdleCheck ago is checked in the same
// round (marked), so the sets keep one rhythm instead of drifting apart.
func (w *Waker) rest(ctx context.Context, until time.Time, ch chan struct{}) bool {
	w.rests.Add(1)
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-w.stop:
		return false
	case <-ctx.Done():
		return false
	case now := <-t.C:
		w.mu.Lock()
		for _, st := range w.delayed {
			if now.Sub(st.checked) >= w.idle/2 {
				st.dirty = true
			}
		}
		w.mu.Unlock()
		return true
	}
}
