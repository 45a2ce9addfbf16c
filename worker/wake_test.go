package worker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// realRedis is a client of $REDIS_URL; without one the test skips (fails with CI=true).
// realRedis is REDIS_URL's Redis (one, or a cluster: redis+cluster://); the
// second result makes more clients of it (other processes' clients).
func realRedis(t *testing.T) (redis.UniversalClient, func() redis.UniversalClient) {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("REDIS_URL unset with CI=true: the wake-up path needs a real Redis")
		}
		t.Skip("REDIS_URL unset: the wake-up path is tested against a real Redis")
	}
	u, err := redisurl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := u.NewClient()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis %s: %v", url, err)
	}
	return rdb, u.NewClient
}

// scriptCounter counts the dequeue and forward scripts that reach Redis.
type scriptCounter struct{ dequeue, forward, all atomic.Int64 }

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) count(cmd redis.Cmder) {
	c.all.Add(1)
	switch k, _, _ := classify(cmd); k {
	case scriptDequeue:
		c.dequeue.Add(1)
	case scriptForward:
		c.forward.Add(1)
	}
}
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// blockedNow says the processor is blocked in sawEmpty (or about to, with the
// wake channel it waits on already taken): every queue was seen empty at the
// current generation. A wake bumps the generation and a timeout clears the map,
// so it is false again as soon as the block ends.
func (w *Waker) blockedNow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.queues {
		if e, ok := w.empty[q]; !ok || e != w.gen {
			return false
		}
	}
	return true
}

// waitIdle waits (5 s at most) until the processor is blocked and more, when not nil, holds.
func waitIdle(t *testing.T, w *Waker, more func() bool) {
	t.Helper()
	if !testwait.Poll(5*time.Second, time.Millisecond, func() bool { return w.blockedNow() && (more == nil || more()) }) {
		t.Fatalf("the processor did not block within 5 s: %+v", w.Stats())
	}
}

// An idle worker with the waker asks Redis about once a second per queue, a
// task enqueued in this process or another one (whose client has the hook)
// starts within milliseconds, a scheduled task runs when due, and a task
// pushed by a client without the hook still runs within IdleCheck.
func TestWakeUpPath(t *testing.T) {
	rdb, newClient := realRedis(t)
	defer func() { _ = rdb.Close() }()
	prefix := "wktest" + store.NewID(8)
	q := jobs.QueuesFor(prefix)
	defer func() {
		ctx := context.Background()
		_ = store.DeleteMatching(ctx, rdb, "asynq:{"+prefix+"}*")
		for _, name := range q.All() {
			rdb.SRem(ctx, "asynq:queues", name)
		}
	}()

	wrdb := newClient() // the worker process's client
	defer func() { _ = wrdb.Close() }()
	wk := NewWaker(wrdb, q.All(), time.Second)
	wrdb.AddHook(wk)
	cnt := &scriptCounter{}
	wrdb.AddHook(cnt) // inner: sees what goes to Redis

	started := make(chan string, 16)
	srv := asynq.NewServerFromRedisClient(wrdb, asynq.Config{
		Concurrency: 4, Queues: map[string]int{q.Turns: 1, q.Events: 1},
		TaskCheckInterval: time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		LogLevel: asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("wk:test", func(_ context.Context, task *asynq.Task) error {
		started <- string(task.Payload())
		return nil
	})
	wk.Start()
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer func() {
		wk.Shutdown()
		srv.Shutdown()
	}()
	if !testwait.Poll(5*time.Second, 10*time.Millisecond, wk.ready.Load) {
		t.Fatal("the wake subscription was not confirmed within 5 s")
	}
	if redisurl.IsCluster(rdb) {
		// On a cluster: sharded pub/sub, on the master of the queues' slot.
		var mu sync.Mutex
		var shard []string
		_ = redisurl.ForEachMaster(context.Background(), rdb, func(ctx context.Context, n redis.UniversalClient) error {
			chans, err := n.PubSubShardChannels(ctx, "*").Result()
			mu.Lock()
			shard = append(shard, chans...)
			mu.Unlock()
			return err
		})
		if !wk.sharded || !slices.Contains(shard, WakeChannel(q.Turns)) || !slices.Contains(shard, WakeChannel(q.Events)) {
			t.Fatalf("sharded %v; shard channels %v, want %s and %s", wk.sharded, shard, WakeChannel(q.Turns), WakeChannel(q.Events))
		}
	}
	// Idle from here: each of the 4 delayed sets had its first real check and
	// the processor blocks.
	waitIdle(t, wk, func() bool { return cnt.forward.Load() >= 4 })

	// Idle: dequeue and forward scripts that reach Redis over 3 s.
	d0, f0, s0 := cnt.dequeue.Load(), cnt.forward.Load(), wk.Stats().Skipped
	// Not a wait for work: the 3 s are the window the idle rate is measured over.
	time.Sleep(3 * time.Second)
	dq, fw := cnt.dequeue.Load()-d0, cnt.forward.Load()-f0
	// Issue 36: with every delayed set at rest the forwarder waits in the
	// hook instead of asking it every 100 ms (4 sets × 10 a second: about
	// 120 local answers in 3 s); it comes back once a round of checks (about
	// 3 answers a second).
	if sk := wk.Stats().Skipped - s0; sk > 40 {
		t.Errorf("the idle forwarder was answered locally %d times in 3 s: it ticks instead of resting (want about 9)", sk)
	}
	t.Logf("idle 3 s: %d dequeue scripts, %d forward scripts reached Redis; %+v", dq, fw, wk.Stats())
	// Two queues, one round a second (each round asks both): about 6; asynq
	// alone at 1 ms would be thousands, at 25 ms about 240.
	if dq > 20 {
		t.Errorf("idle worker sent %d dequeue scripts in 3 s, want about 6", dq)
	}
	// 4 sets, each checked about once a second: about 12 (asynq alone: 120).
	if fw > 24 {
		t.Errorf("idle worker sent %d forward scripts in 3 s, want about 12", fw)
	}

	hop := func(c *asynq.Client, name string, opts ...asynq.Option) time.Duration {
		t.Helper()
		t0 := time.Now()
		if _, err := c.Enqueue(asynq.NewTask("wk:test", []byte(name), append([]asynq.Option{asynq.Queue(q.Turns)}, opts...)...)); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case got := <-started:
				if got == name {
					return time.Since(t0)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("task %s did not start within 5 s", name)
			}
		}
	}

	// Enqueued in the worker's process (its client has the hook).
	local := asynq.NewClientFromRedisClient(wrdb)
	var worst time.Duration
	for i := 0; i < 5; i++ {
		waitIdle(t, wk, nil) // the processor blocks again
		if d := hop(local, fmt.Sprintf("local%d", i)); d > worst {
			worst = d
		}
	}
	t.Logf("hop from this process, worst of 5 after idling: %s", worst)
	if worst > 200*time.Millisecond {
		t.Errorf("an idle worker took %s to start a task enqueued in its process (want milliseconds)", worst)
	}

	// Enqueued by another process whose client has the hook (publishes only).
	ordb := newClient()
	defer func() { _ = ordb.Close() }()
	ow := NewWaker(ordb, q.All(), time.Second)
	ordb.AddHook(ow)
	other := asynq.NewClientFromRedisClient(ordb)
	worst = 0
	for i := 0; i < 5; i++ {
		waitIdle(t, wk, nil)
		if d := hop(other, fmt.Sprintf("other%d", i)); d > worst {
			worst = d
		}
	}
	t.Logf("hop from another process, worst of 5 after idling: %s", worst)
	if worst > 200*time.Millisecond {
		t.Errorf("an idle worker took %s to start a task enqueued by another process (want milliseconds)", worst)
	}

	// A client without the hook: no wake-up; IdleCheck bounds the wait.
	plain := asynq.NewClientFromRedisClient(rdb)
	waitIdle(t, wk, nil)
	if d := hop(plain, "plain"); d > 1500*time.Millisecond {
		t.Errorf("a task pushed without a wake-up started after %s (want within IdleCheck 1 s)", d)
	}

	// A scheduled task (from another process) runs when due, not before.
	// asynq scores it in whole seconds: it is due from the start of its second.
	at := time.Now().Add(1500 * time.Millisecond)
	due := time.Unix(at.Unix(), 0)
	hop(other, "scheduled", asynq.ProcessAt(at))
	late := time.Since(due)
	t.Logf("scheduled task: started %s after the start of its due second", late)
	if late < 0 {
		t.Errorf("scheduled task started %s before it was due", -late)
	}
	if late > 1200*time.Millisecond {
		t.Errorf("scheduled task started %s after it was due", late)
	}

	// Shutdown ends a blocked processor's wait at once.
	waitIdle(t, wk, nil)
	t0 := time.Now()
	wk.Shutdown()
	srv.Shutdown()
	if el := time.Since(t0); el > 900*time.Millisecond {
		t.Errorf("shutdown took %s", el)
	}
	if s := wk.Stats(); s.Blocks == 0 || s.Published == 0 && ow.Stats().Published == 0 {
		t.Errorf("the waker never blocked or published: %+v", s)
	}
	if !strings.HasSuffix(WakeChannel(q.Turns), "}:wake") || queueOfChannel(WakeChannel(q.Turns)) != q.Turns {
		t.Errorf("wake channel %q does not name its queue", WakeChannel(q.Turns))
	}
}
