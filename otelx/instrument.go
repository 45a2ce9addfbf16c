package otelx

import (
	"context"
	"net/http"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Handler wraps an HTTP handler in the HTTP server span (otelhttp): it
// continues a trace an incoming traceparent header names (a paired relay's
// call) and names the span "METHOD /path". Only for a process whose
// tracing is on (Setup said so).
func Handler(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "relay",
		otelhttp.WithFilter(func(r *http.Request) bool { return !quietPaths[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}

// quietPaths are the probes and scrapes that make no trace.
var quietPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// Transport wraps an HTTP client's transport so each request made inside a
// trace is a client span and carries the traceparent header (a call to a
// paired relay); a request of a background loop (a subscription's poll, a
// hello) makes no span and sends no header (childOnly).
func Transport(rt http.RoundTripper) http.RoundTripper {
	return transport(rt, otel.GetTracerProvider(), otel.GetTextMapPropagator())
}

func transport(rt http.RoundTripper, tp trace.TracerProvider, prop propagation.TextMapPropagator) http.RoundTripper {
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(childOnly{tp: tp}), otelhttp.WithPropagators(prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}

// Redis adds a span per Redis command and pipeline (redisotel) to rdb, when
// it runs inside a trace (childOnly). The
// command's arguments are never recorded (they hold prompts, replies and
// token hashes): only its name. redisotel v9 writes the older db.system
// attribute; db.system.name (R25.1) is added next to it.
func Redis(rdb redis.UniversalClient) error {
	return redisotel.InstrumentTracing(rdb,
		redisotel.WithTracerProvider(childOnly{tp: otel.GetTracerProvider()}),
		redisotel.WithDBStatement(false),
		redisotel.WithCallerEnabled(false),
		redisotel.WithAttributes(attribute.String("db.system.name", "redis")))
}

// childOnly is a tracer provider whose tracers make a span only inside a
// trace already started (a tool call, a job, a turn): a Redis command of a
// background loop (asynq's polls, heartbeats, the sweeps) makes none, so it
// does not start a trace of its own every few milliseconds.
type childOnly struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (c childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{t: c.tp.Tracer(name, opts...)}
}

type childTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (c childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return c.t.Start(ctx, name, opts...)
}
