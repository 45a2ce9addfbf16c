package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/otelx"
	"github.com/oar/relay/store"
)

// ErrBadJob is in the error of a job that can never run: a type the domain
// does not know or a payload that does not decode (retrying it is no use).
var ErrBadJob = errors.New("bad job")

// RunJob runs one job of the domain (the types of package jobs) with its JSON
// payload: the one door the worker hands every job through. The error says
// what the job was doing (R18.9: the log line of a retry or a drop); a
// retry-later is returned as it is.
func (r *Relay) RunJob(ctx context.Context, typ string, payload []byte) error {
	run, ok := jobRunners[typ]
	if !ok {
		return fmt.Errorf("job type %q is not one of the relay's: %w", typ, ErrBadJob)
	}
	return run(r, ctx, payload)
}

// jobRunners run, per job type of package jobs, one job with its JSON
// payload; the error says what the job was doing (R18.9).
var jobRunners = map[string]func(r *Relay, ctx context.Context, payload []byte) error{
	jobs.TypeDrain: (*Relay).runDrain,
	jobs.TypeFanout: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeFanout, payload, func(ev store.Event) error {
			return jobErr(r.pipeline.Fanout(ctx, &ev), "fan out %s event %s of session %s", ev.Kind, ev.ID, id8(ev.Session))
		})
	},
	jobs.TypeRelease: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeRelease, payload, func(p jobs.ReleasePayload) error {
			return jobErr(r.pipeline.Release(ctx, p.Sub), "release held events of %s", p.Sub)
		})
	},
	jobs.TypeFlush: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeFlush, payload, func(p jobs.FlushPayload) error {
			return jobErr(r.pipeline.Flush(ctx, p.Watcher, time.UnixMilli(p.Window).UTC()), "deliver the coalesced events of watcher %s", id8(p.Watcher))
		})
	},
	jobs.TypeSummary: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeSummary, payload, func(p jobs.SummaryPayload) error {
			return jobErr(r.pipeline.Summary(ctx, p.Watcher), "deliver the wake-limit summary of watcher %s", id8(p.Watcher))
		})
	},
	jobs.TypeHeartbeat: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeHeartbeat, payload, func(p jobs.HeartbeatPayload) error {
			return jobErr(r.pipeline.Heartbeat(ctx, p.Sub, time.UnixMilli(p.At).UTC()), "heartbeat of %s", p.Sub)
		})
	},
	jobs.TypeStallScan: func(r *Relay, ctx context.Context, _ []byte) error { // its payload is not read
		return jobErr(r.pipeline.StallScan(ctx), "scan for stalled sessions")
	},
	jobs.TypeFire: func(r *Relay, ctx context.Context, payload []byte) error {
		return runJob(jobs.TypeFire, payload, func(p jobs.FirePayload) error {
			return jobErr(r.schedules.Fire(ctx, p.Schedule, time.UnixMilli(p.At).UTC(), p.Approved), "fire schedule %s", p.Schedule)
		})
	},
}

// runDrain runs a drain job: the session's queued turns, in a worker span
// that joins the trace that queued the turn (R25.1).
func (r *Relay) runDrain(ctx context.Context, payload []byte) error {
	typ := jobs.TypeDrain
	return runJob(typ, payload, func(p jobs.DrainPayload) error {
		if p.Session == "" {
			return fmt.Errorf("%s payload %q names no session: %w", typ, payload, ErrBadJob)
		}
		ctx, span := otelx.Tracer().Start(otelx.Extract(ctx, p.TP, p.TS), jobs.TypeDrain,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(otelx.KeySession.String(p.Session)))
		defer span.End()
		err := jobErr(r.Drain(ctx, p.Session), "drain session %s", id8(p.Session))
		if err != nil && !errors.Is(err, ErrRetryLater) {
			span.SetStatus(codes.Error, "drain failed")
		}
		return err
	})
}

// runJob decodes a job's JSON payload for f.
func runJob[P any](typ string, payload []byte, f func(P) error) error {
	var p P
	if err := json.Unmarshal(payload, &p); err != nil {
		return fmt.Errorf("%s payload %q: %w: %w", typ, payload, err, ErrBadJob)
	}
	return f(p)
}

// jobErr says what a job was doing when it failed; nil and a retry-later stay as they are.
func jobErr(err error, format string, a ...any) error {
	if err == nil || errors.Is(err, ErrRetryLater) {
		return err
	}
	return fmt.Errorf(format+": %w", append(a, err)...)
}
