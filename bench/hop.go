package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/worker"
)

// benchPing measures n sequential PINGs on one client.
func benchPing(ctx context.Context, rdb redis.UniversalClient, n int) (dist, error) {
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	return newDist(lat), ctx.Err()
}

type hopResult struct {
	lat   dist
	n     int
	wall  time.Duration
	errs  int
	err   error
	cost  snapshot
	rtLat dist // the hop client's Redis round trips while measuring
}

// hopTaskType is the bare task's type.
const hopTaskType = "bench:hop"

// benchHop measures the bare asynq hop, enqueue → handler start, with the
// relay worker's asynq config (worker/worker.go: the waker, TaskCheckInterval
// 1ms, DelayedTaskCheckInterval 100ms; the concurrency, queue weights and strict
// priority as asynq reports them for the relay's server: its turns queue
// becomes PREFIX:hop, which the producers feed, its other queues stay empty)
// on a Redis client made like the relay's (app/app.go), with producers
// concurrent producers each enqueueing the next task once the previous one
// started.
func benchHop(ctx context.Context, opts *redisurl.URL, info redis.UniversalClient, prefix, turns string, w *asynq.ServerInfo, producers, warm, per int) (hopResult, error) {
	return benchHopWith(ctx, opts, info, prefix, turns, w, producers, warm, per, true)
}

// benchHopWith is benchHop with or without the relay worker's wake-up path
// (worker.Waker, TaskCheckInterval 1 ms); without it asynq polls every 25 ms.
func benchHopWith(ctx context.Context, opts *redisurl.URL, info redis.UniversalClient, prefix, turns string, w *asynq.ServerInfo, producers, warm, per int, wake bool) (hopResult, error) {
	queue := prefix + ":hop"
	queues := map[string]int{}
	i := 0
	for q, weight := range w.Queues {
		if q == turns {
			queues[queue] = weight
		} else {
			i++
			queues[fmt.Sprintf("%s:hop-idle%d", prefix, i)] = weight
		}
	}
	rdb := opts.NewClient()
	defer func() { _ = rdb.Close() }()
	poll := 25 * time.Millisecond
	var wk *worker.Waker
	if wake {
		qs := make([]string, 0, len(queues))
		for q := range queues {
			qs = append(qs, q)
		}
		wk = worker.NewWaker(rdb, qs, worker.DefaultIdleCheck)
		rdb.AddHook(wk)
		poll = time.Millisecond
	}
	m := meter{rdb: info, rt: &rtCounter{}, client: rdb}
	rdb.AddHook(m.rt)
	var waiters sync.Map // task id → chan time.Time
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              w.Concurrency,
		Queues:                   queues,
		StrictPriority:           w.StrictPriority,
		TaskCheckInterval:        poll,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout:          8 * time.Second,
		Logger:                   asynqLogger{slog.New(slog.NewTextHandler(os.Stderr, nil))},
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(hopTaskType, func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		if ch, ok := waiters.Load(string(t.Payload())); ok {
			ch.(chan time.Time) <- now
		}
		return nil
	})
	if wk != nil {
		wk.Start()
	}
	if err := srv.Start(mux); err != nil {
		if wk != nil {
			wk.Shutdown()
		}
		return hopResult{}, fmt.Errorf("start asynq server: %w", err)
	}
	defer func() {
		if wk != nil {
			wk.Shutdown()
		}
		srv.Shutdown()
	}()
	client := asynq.NewClientFromRedisClient(rdb)
	defer func() { _ = client.Close() }()

	var ec errCount
	one := func(p, k int) (time.Duration, bool) {
		id := fmt.Sprintf("hop:%d:%d", p, k)
		ch := make(chan time.Time, 1)
		waiters.Store(id, ch)
		defer waiters.Delete(id)
		// Options as the relay's drain task (asynqjobs.NewDrainTask).
		task := asynq.NewTask(hopTaskType, []byte(id), asynq.Queue(queue), asynq.TaskID(id),
			asynq.MaxRetry(1000), asynq.Timeout(time.Hour))
		t0 := time.Now()
		if _, err := client.EnqueueContext(ctx, task); err != nil {
			ec.add(err)
			return 0, false
		}
		select {
		case t1 := <-ch:
			return t1.Sub(t0), true
		case <-time.After(30 * time.Second):
			ec.add(errors.New("a hop did not start within 30 s"))
		case <-ctx.Done():
		}
		return 0, false
	}
	lats := make([][]time.Duration, producers)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	for p := 0; p < producers; p++ {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < warm && ctx.Err() == nil; k++ {
				one(p, -1-k)
			}
			ready.Done()
			<-start
			for k := 0; k < per && ctx.Err() == nil; k++ {
				if d, ok := one(p, k); ok {
					lats[p] = append(lats[p], d)
				}
			}
		}()
	}
	ready.Wait()
	s0 := m.snap(ctx)
	stopRT := m.rt.record()
	t := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t)
	rtLat := stopRT()
	cost := m.snap(ctx).sub(s0)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return hopResult{lat: newDist(all), n: len(all), wall: wall, errs: ec.n, err: ec.first, cost: cost, rtLat: rtLat}, ctx.Err()
}

// asynqLogger adapts slog to asynq's Logger.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }

// idleCheckText is the waker's IdleCheck of the relay's worker, as the setup row says it.
func idleCheckText() string { return worker.DefaultIdleCheck.String() }
