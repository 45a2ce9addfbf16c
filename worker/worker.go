// Package worker runs the asynq server and its handlers: it takes the relay's
// jobs from Redis and hands them to the domain (run a session's next turn).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/jobs"
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
	// (default DefaultIdleCheck): the longest a lost wake-up delays a task.
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

// DefaultIdleCheck is how long an idle worker waits on its wake channels
// before it asks Redis again (its queues, and the scheduled and retry sets
// whose earliest entry is not due yet). Every task pushed by a process of the
// relay is announced on a wake channel, a resubscription wakes at once, and a
// set's due time is known, so this only bounds a wake-up that never came
// (a client without the hook); it is what an idle relay's polling costs
// (issue 36: 6 dequeue and 12 forward commands per check).
const DefaultIdleCheck = 5 * time.Second

// EmbeddedIdleCheck is IdleCheck on the embedded store (R20): it serves one
// process, whose client has the waker's hook, so every task pushed is
// announced and no other client pushes one; the check only costs an idle
// relay its scripts (R25.4).
const EmbeddedIdleCheck = 30 * time.Second

// janitorEvery is asynq's JanitorInterval: the janitor deletes completed
// tasks kept for their Retention, which the relay's tasks have none of (only
// tasks moved by the key-format upgrade may); asynq's 8 s default polls both
// queues for nothing.
const janitorEvery = time.Minute

// New builds a worker on rdb (shared with the rest of the process). Unless
// o.NoWake, it adds the waker's hook to rdb (wake.go): call New before the
// client is in use, and build one worker per client.
func New(rdb redis.UniversalClient, r *domain.Relay, o Options) *Worker {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.IdleCheck <= 0 {
		o.IdleCheck = DefaultIdleCheck
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
		JanitorInterval:          janitorEvery,
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
	// Every job goes through the domain's one door (RunJob), which decodes it
	// and says in its error what was being done (R18.9: the log line of a
	// retry or a drop).
	for _, typ := range jobs.Types {
		mux.HandleFunc(typ, w.run)
	}
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

// run hands a task to the domain; a job that can never run (an unknown type,
// a payload that does not decode) is never retried.
func (w *Worker) run(ctx context.Context, t *asynq.Task) error {
	err := w.r.RunJob(ctx, t.Type(), t.Payload())
	if errors.Is(err, domain.ErrBadJob) {
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
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
