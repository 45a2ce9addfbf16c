// Package worker runs the asynq server and its handlers: it takes the relay's
// jobs from Redis and hands them to the domain (run a session's next turn).
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// Options configures the worker.
type Options struct {
	Queues      jobs.Queues
	Concurrency int // default DefaultConcurrency (64)
	// PollEvery is asynq's TaskCheckInterval: how long the processor sleeps
	// after finding every queue empty. Default 1 ms with the wake-up path
	// (the waker blocks an idle processor until work arrives, see wake.go),
	// 25 ms without it (asynq's default 1 s makes turns start late).
	PollEvery time.Duration
	// NoWake turns the wake-up path off: asynq polls every PollEvery and its
	// forwarder every DelayedTaskCheckInterval, as asynq does by itself.
	NoWake bool
	// IdleCheck bounds how long an idle worker goes without asking Redis
	// (default 1 s): the longest a lost wake-up delays a task.
	IdleCheck time.Duration
	Logger    *slog.Logger
	// ShutdownTimeout bounds how long Shutdown waits for handlers (default 8s);
	// running turns are handed back to their queue before that.
	ShutdownTimeout time.Duration
}

// Worker is the asynq server of one process.
type Worker struct {
	srv  *asynq.Server
	r    *domain.Relay
	log  *slog.Logger
	wake *Waker // nil with NoWake
}

// DefaultConcurrency is how many jobs a worker runs at once when not set.
const DefaultConcurrency = 64

// New builds a worker on rdb (shared with the rest of the process). Unless
// o.NoWake, it adds the waker's hook to rdb (wake.go): call New before the
// client is in use, and build one worker per client.
func New(rdb redis.UniversalClient, r *domain.Relay, o Options) *Worker {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.IdleCheck <= 0 {
		o.IdleCheck = time.Second
	}
	var wk *Waker
	delayedCheck := 100 * time.Millisecond
	if !o.NoWake {
		wk = NewWaker(rdb, o.Queues.All(), o.IdleCheck)
		rdb.AddHook(wk)
		// The forwarder still ticks every 100 ms, but the waker answers its
		// script locally while nothing in a set can be due.
		if o.PollEvery <= 0 {
			o.PollEvery = time.Millisecond
		}
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 25 * time.Millisecond
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 8 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              o.Concurrency,
		Queues:                   map[string]int{o.Queues.Turns: 1, o.Queues.Events: 1},
		TaskCheckInterval:        o.PollEvery,
		DelayedTaskCheckInterval: delayedCheck,
		ShutdownTimeout:          o.ShutdownTimeout,
		RetryDelayFunc:           retryDelay,
		IsFailure:                func(err error) bool { return !errors.Is(err, domain.ErrRetryLater) },
		Logger:                   asynqLogger{o.Logger},
		LogLevel:                 asynq.WarnLevel,
		ErrorHandler:             asynq.ErrorHandlerFunc(jobFailed(o.Logger)),
	})
	return &Worker{srv: srv, r: r, log: o.Logger, wake: wk}
}

// WakeStats says what the wake-up path did so far (zero with NoWake).
func (w *Worker) WakeStats() WakeStats {
	if w.wake == nil {
		return WakeStats{}
	}
	return w.wake.Stats()
}

// jobFailed logs a failed job (R18.9): WARN while asynq will retry it, ERROR
// when it gives up (the job's work — an event, a firing — is then dropped).
func jobFailed(log *slog.Logger) func(ctx context.Context, t *asynq.Task, err error) {
	return func(ctx context.Context, t *asynq.Task, err error) {
		if errors.Is(err, domain.ErrRetryLater) {
			return
		}
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if retried >= maxRetry || errors.Is(err, asynq.SkipRetry) {
			log.Error("job dropped", "job", t.Type(), "retried", retried, "err", err)
			return
		}
		log.Warn("job failed; it will be retried", "job", t.Type(), "retry", retried+1, "of", maxRetry, "err", err)
	}
}

func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if errors.Is(err, domain.ErrRetryLater) {
		return time.Second
	}
	d := time.Duration(n+1) * time.Second
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	return d
}

// Start begins processing jobs (asynq's Start, never Run: the process owns signals).
func (w *Worker) Start() error {
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeDrain, w.drain)
	// Each job's error says what was being done (R18.9: the log line of a retry or a drop).
	mux.HandleFunc(jobs.TypeFanout, handle(func(ctx context.Context, ev store.Event) error {
		return wrap(w.r.Fanout(ctx, &ev), "fan out %s event %s of session %s", ev.Kind, ev.ID, id8(ev.Session))
	}))
	mux.HandleFunc(jobs.TypeRelease, handle(func(ctx context.Context, p jobs.ReleasePayload) error {
		return wrap(w.r.Release(ctx, p.Sub), "release held events of %s", p.Sub)
	}))
	mux.HandleFunc(jobs.TypeFlush, handle(func(ctx context.Context, p jobs.FlushPayload) error {
		return wrap(w.r.Flush(ctx, p.Watcher, time.UnixMilli(p.Window).UTC()), "deliver the coalesced events of watcher %s", id8(p.Watcher))
	}))
	mux.HandleFunc(jobs.TypeSummary, handle(func(ctx context.Context, p jobs.SummaryPayload) error {
		return wrap(w.r.Summary(ctx, p.Watcher), "deliver the wake-limit summary of watcher %s", id8(p.Watcher))
	}))
	mux.HandleFunc(jobs.TypeHeartbeat, handle(func(ctx context.Context, p jobs.HeartbeatPayload) error {
		return wrap(w.r.Heartbeat(ctx, p.Sub, time.UnixMilli(p.At).UTC()), "heartbeat of %s", p.Sub)
	}))
	mux.HandleFunc(jobs.TypeStallScan, func(ctx context.Context, _ *asynq.Task) error {
		return wrap(w.r.StallScan(ctx), "scan for stalled sessions")
	})
	mux.HandleFunc(jobs.TypeFire, handle(func(ctx context.Context, p jobs.FirePayload) error {
		return wrap(w.r.Fire(ctx, p.Schedule, time.UnixMilli(p.At).UTC(), p.Approved), "fire schedule %s", p.Schedule)
	}))
	if w.wake != nil {
		w.wake.Start()
	}
	if err := w.srv.Start(mux); err != nil {
		if w.wake != nil {
			w.wake.Shutdown()
		}
		return err
	}
	return nil
}

// Shutdown hands running turns back to their queues and stops the server.
func (w *Worker) Shutdown() {
	if w.wake != nil {
		w.wake.Shutdown() // a blocked processor returns now; empty polls wait 25 ms from here on
	}
	w.r.Shutdown()
	w.srv.Shutdown()
}

// handle decodes a task's JSON payload for f; a payload that does not decode is never retried.
func handle[P any](f func(context.Context, P) error) func(context.Context, *asynq.Task) error {
	return func(ctx context.Context, t *asynq.Task) error {
		var p P
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("%s payload %q: %w: %w", t.Type(), t.Payload(), err, asynq.SkipRetry)
		}
		return f(ctx, p)
	}
}

func (w *Worker) drain(ctx context.Context, t *asynq.Task) error {
	var p jobs.DrainPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("drain payload %q: %w: %w", t.Payload(), err, asynq.SkipRetry)
	}
	if p.Session == "" {
		return fmt.Errorf("drain payload %q names no session: %w", t.Payload(), asynq.SkipRetry)
	}
	err := w.r.Drain(ctx, p.Session)
	if err != nil && !errors.Is(err, domain.ErrRetryLater) {
		err = fmt.Errorf("drain session %s: %w", id8(p.Session), err)
	}
	return err
}

// asynqLogger adapts slog to asynq's Logger.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "component", "asynq", "fatal", true)
}

// wrap says what a job was doing when it failed; nil stays nil.
func wrap(err error, format string, a ...any) error {
	if err == nil || errors.Is(err, domain.ErrRetryLater) {
		return err
	}
	return fmt.Errorf(format+": %w", append(a, err)...)
}

func id8(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
