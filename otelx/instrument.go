package otelx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Handler wraps an HTTP handler in the HTTP server span: it continues a
// trace an incoming traceparent header names (a paired relay's call) and
// names the span "METHOD /path", with http.request.method, url.path and
// http.response.status_code (an answer of 500 or more is an error). Only for a
// process whose tracing is on (Setup said so). (otelhttp's handler, used
// before, also parsed and recorded the client's address, user agent and
// sizes and fed metrics nobody reads: a sixth of tracing's cost per tool
// call, issue 36.)
func Handler(h http.Handler) http.Handler {
	return handler(h, otel.GetTracerProvider().Tracer(ScopeName+"/http"), otel.GetTextMapPropagator())
}

func handler(h http.Handler, tr trace.Tracer, prop propagation.TextMapPropagator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if quietPaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tr.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			span.SetAttributes(semconv.HTTPResponseStatusCode(code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
			span.End()
		}()
		h.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// statusWriter notes the status a handler answers; Flush and Unwrap keep
// streaming answers (SSE) and http.ResponseController working through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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

// Redis adds a span per Redis command and one per pipeline to rdb, when it
// runs inside a trace (a background loop's commands make none). A span
// carries the command's name only, never its arguments (they hold prompts,
// replies and token hashes), and the same four attributes every time:
// db.system.name (R25.1) and the older db.system, server.address and
// server.port, built once. A pipeline is one span "redis.pipeline NAMES"
// with db.redis.num_cmd. (redisotel, used before, built each span's
// attributes anew and formatted every argument of a pipeline even with
// statements off: issue 36's cost of tracing.)
func Redis(rdb redis.UniversalClient) error {
	tr := otel.GetTracerProvider().Tracer("github.com/oar/relay/otelx/redis")
	switch c := rdb.(type) {
	case *redis.Client:
		c.AddHook(newRedisHook(tr, c.Options().Addr))
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(newRedisHook(tr, n.Options().Addr)) })
	default:
		return fmt.Errorf("traces of Redis: %T is not supported", rdb)
	}
	return nil
}

type redisHook struct {
	tr   trace.Tracer
	opts []trace.SpanStartOption // kind and the fixed attributes
}

func newRedisHook(tr trace.Tracer, addr string) *redisHook {
	attrs := []attribute.KeyValue{semconv.DBSystemNameRedis, attribute.String("db.system", "redis")} // db.system: the older name, as redisotel wrote it
	if host, port, err := net.SplitHostPort(addr); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if n, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(n))
		}
	}
	return &redisHook{tr: tr, opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}}
}

func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() || connSetup[cmd.Name()] {
			return next(ctx, cmd)
		}
		ctx, span := h.tr.Start(ctx, cmd.Name(), h.opts...)
		err := next(ctx, cmd)
		endRedisSpan(span, err)
		return err
	}
}

func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() || len(cmds) > 0 && connSetup[cmds[0].Name()] {
			return next(ctx, cmds)
		}
		ctx, span := h.tr.Start(ctx, pipelineName(cmds), h.opts...)
		span.SetAttributes(attribute.Int("db.redis.num_cmd", len(cmds)))
		err := next(ctx, cmds)
		endRedisSpan(span, err)
		return err
	}
}

// connSetup are the commands go-redis sends to set up a new connection
// (AUTH holds the password): not the store's, never a span.
var connSetup = map[string]bool{"auth": true, "hello": true, "client": true, "select": true}

// pipelineName is "redis.pipeline" and the distinct command names, in order.
func pipelineName(cmds []redis.Cmder) string {
	var b strings.Builder
	b.WriteString("redis.pipeline")
	for i, c := range cmds {
		name := c.Name()
		dup := false
		for _, p := range cmds[:i] {
			if p.Name() == name {
				dup = true
				break
			}
		}
		if !dup {
			b.WriteByte(' ')
			b.WriteString(name)
		}
	}
	return b.String()
}

func endRedisSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
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
