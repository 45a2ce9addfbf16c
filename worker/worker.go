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

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/relay"
	"github.com/oar/relay/store"
)

// Options configures the worker.
type Options struct {
	Queues      jobs.Queues
	Concurrency int           // default 20
	PollEvery   time.Duration // TaskCheckInterval, default 25ms (asynq's default 1s makes turns start late)
	Logger      *slog.Logger
	// ShutdownTimeout bounds how long Shutdown waits for handlers (default 8s);
	// running turns are handed back to their queue before that.
	ShutdownTimeout time.Duration
}

// Worker is the asynq server of one process.
type Worker struct {
	srv *asynq.Server
	r   *relay.Relay
	log *slog.Logger
}

// New builds a worker on rdb (shared with the rest of the process).
func New(rdb redis.UniversalClient, r *relay.Relay, o Options) *Worker {
	if o.Concurrency <= 0 {
		o.Concurrency = 64
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
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout:          o.ShutdownTimeout,
		RetryDelayFunc:           retryDelay,
		IsFailure:                func(err error) bool { return !errors.Is(err, relay.ErrRetryLater) },
		Logger:                   asynqLogger{o.Logger},
		LogLevel:                 asynq.WarnLevel,
	})
	return &Worker{srv: srv, r: r, log: o.Logger}
}

func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if errors.Is(err, relay.ErrRetryLater) {
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
	mux.HandleFunc(jobs.TypeFanout, func(ctx context.Context, t *asynq.Task) error {
		var ev store.Event
		if err := json.Unmarshal(t.Payload(), &ev); err != nil {
			return fmt.Errorf("fanout payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Fanout(ctx, &ev)
	})
	mux.HandleFunc(jobs.TypeRelease, func(ctx context.Context, t *asynq.Task) error {
		var p relay.ReleasePayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("release payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Release(ctx, p.Sub)
	})
	mux.HandleFunc(jobs.TypeFlush, func(ctx context.Context, t *asynq.Task) error {
		var p relay.FlushPayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("flush payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Flush(ctx, p.Watcher, time.UnixMilli(p.Window).UTC())
	})
	mux.HandleFunc(jobs.TypeSummary, func(ctx context.Context, t *asynq.Task) error {
		var p relay.SummaryPayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("summary payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Summary(ctx, p.Watcher)
	})
	mux.HandleFunc(jobs.TypeHeartbeat, func(ctx context.Context, t *asynq.Task) error {
		var p relay.HeartbeatPayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("heartbeat payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Heartbeat(ctx, p.Sub, time.UnixMilli(p.At).UTC())
	})
	mux.HandleFunc(jobs.TypeStallScan, func(ctx context.Context, _ *asynq.Task) error { return w.r.StallScan(ctx) })
	mux.HandleFunc(jobs.TypeFire, func(ctx context.Context, t *asynq.Task) error {
		var p relay.FirePayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("fire payload: %v: %w", err, asynq.SkipRetry)
		}
		return w.r.Fire(ctx, p.Schedule, time.UnixMilli(p.At).UTC(), p.Approved)
	})
	return w.srv.Start(mux)
}

// Shutdown hands running turns back to their queues and stops the server.
func (w *Worker) Shutdown() {
	w.r.Shutdown()
	w.srv.Shutdown()
}

func (w *Worker) drain(ctx context.Context, t *asynq.Task) error {
	var p jobs.DrainPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.Session == "" {
		return fmt.Errorf("drain payload %q: %v: %w", t.Payload(), err, asynq.SkipRetry)
	}
	err := w.r.Drain(ctx, p.Session)
	if err != nil && !errors.Is(err, relay.ErrRetryLater) {
		w.log.Error("drain failed", "session", p.Session, "err", err)
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
