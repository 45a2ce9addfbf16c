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
	ready     atomic.Bool // the subscription is confirmed
	on        atomic.Bool // Start ran and Shutdown did not
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
	ps        []*redis.PubSub
	sharded   bool         // a cluster client: wake-ups go by SPUBLISH/SSUBSCRIBE on the queue's slot
	blocks    atomic.Int64 // times the processor blocked
	timeouts  atomic.Int64 // blocks that ended at IdleCheck
	skipped   atomic.Int64 // forward scripts answered locally
	published atomic.Int64 // wake messages published by this process
}

type delayedState struct {
	dirty   bool      // something was added since the last real check
	nextDue int64     // earliest score (unix seconds) at the last real check; MaxInt64 when empty
	checked time.Time // the last real check
}

// WakeStats counts what the waker did (for the benchmark and tests).
type WakeStats struct {
	Blocks, Timeouts, Skipped, Published int64
}

// NewWaker builds a waker for the worker's queues on rdb; idle is IdleCheck.
func NewWaker(rdb redis.UniversalClient, queues []string, idle time.Duration) *Waker {
	w := &Waker{rdb: rdb, queues: queues, ours: map[string]bool{}, idle: idle, fallback: 25 * time.Millisecond,
		wakeCh: make(chan struct{}), empty: map[string]uint64{}, delayed: map[string]*delayedState{},
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
	return WakeStats{Blocks: w.blocks.Load(), Timeouts: w.timeouts.Load(), Skipped: w.skipped.Load(), Published: w.published.Load()}
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
	}
	w.mu.Unlock()
}

func (w *Waker) markAllDirty() {
	w.mu.Lock()
	for _, st := range w.delayed {
		st.dirty = true
	}
	w.mu.Unlock()
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
	args := cmd.Args()
	if len(args) < 3 {
		return scriptOther, "", ""
	}
	name, _ := args[0].(string)
	if name != "evalsha" && name != "eval" {
		return scriptOther, "", ""
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
		return scriptOther, "", ""
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i], _ = args[3+i].(string)
	}
	suffix := func(k string) (string, string) { // "asynq:{q}:pending" → q, "pending"
		if !strings.HasPrefix(k, "asynq:{") {
			return "", ""
		}
		i := strings.LastIndex(k, "}:")
		if i < 0 {
			return "", ""
		}
		return k[len("asynq:{"):i], k[i+2:]
	}
	if n == 4 {
		q0, s0 := suffix(keys[0])
		_, s1 := suffix(keys[1])
		_, s2 := suffix(keys[2])
		_, s3 := suffix(keys[3])
		if s0 == "pending" && s1 == "paused" && s2 == "active" && s3 == "lease" {
			return scriptDequeue, q0, ""
		}
	}
	if n == 2 {
		q0, s0 := suffix(keys[0])
		_, s1 := suffix(keys[1])
		if (s0 == "scheduled" || s0 == "retry") && s1 == "pending" {
			return scriptForward, q0, keys[0]
		}
	}
	for _, k := range keys {
		if qk, s := suffix(k); s == "pending" {
			return scriptPending, qk, ""
		}
	}
	for _, k := range keys {
		if qk, s := suffix(k); s == "scheduled" || s == "retry" {
			return scriptDelayed, qk, ""
		}
	}
	return scriptOther, "", ""
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
func (w *Waker) forward(ctx context.Context, next redis.ProcessHook, cmd redis.Cmder, q, key string) error {
	c, isCmd := cmd.(*redis.Cmd)
	if !w.ours[q] || !isCmd || !w.on.Load() {
		return next(ctx, cmd)
	}
	now := time.Now()
	w.mu.Lock()
	st := w.delayed[key]
	skip := st != nil && w.ready.Load() && !st.dirty && now.Unix() < st.nextDue && now.Sub(st.checked) < w.idle
	if st != nil && !skip {
		st.dirty = false // a mark made while this check runs stays
	}
	w.mu.Unlock()
	if skip || st == nil {
		if st == nil {
			return next(ctx, cmd)
		}
		w.skipped.Add(1)
		c.SetVal(int64(0))
		return nil
	}
	pipe := w.rdb.Pipeline()
	_ = pipe.Process(ctx, cmd)
	first := pipe.ZRangeWithScores(ctx, key, 0, 0)
	_, _ = pipe.Exec(ctx)
	w.mu.Lock()
	if cmd.Err() != nil || first.Err() != nil {
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
	return cmd.Err()
}
