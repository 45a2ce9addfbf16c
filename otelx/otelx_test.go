package otelx

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The tests of this file run in order: the first needs the process's global
// tracer provider as OpenTelemetry starts it, later ones set it.

var otelVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_HEADERS"}

func clearOTEL(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

// receiver is an OTLP/HTTP traces endpoint counting its requests and keeping the spans.
type receiver struct {
	*httptest.Server
	posts atomic.Int64
	mu    sync.Mutex
	reqs  []*coltrace.ExportTraceServiceRequest
	hdrs  []http.Header
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.posts.Add(1)
		b, _ := io.ReadAll(req.Body)
		var ex coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, &ex)
		r.hdrs = append(r.hdrs, req.Header.Clone())
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(r.Close)
	return r
}

// R25.1: with no endpoint variable, nothing is set up: no exporter (the
// endpoint a variable would name gets nothing), the global tracer provider
// stays OpenTelemetry's no-op one, spans do not record, nothing rides in a
// job's payload or an agent's environment.
func TestOffWithoutEndpoint(t *testing.T) {
	clearOTEL(t)
	rcv := newReceiver(t)
	t.Setenv("OTEL_SERVICE_NAME", "other") // not an endpoint: still off
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-probe=1")
	before := otel.GetTracerProvider()
	on, shutdown, err := Setup(context.Background(), "r1")
	if err != nil || on {
		t.Fatalf("Setup with no endpoint: on=%v err=%v", on, err)
	}
	if tp := otel.GetTracerProvider(); tp != before {
		t.Fatalf("Setup with no endpoint replaced the global tracer provider: %T", tp)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatal("the global tracer provider is the SDK's")
	}
	ctx, span := Tracer().Start(context.Background(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() || trace.SpanFromContext(ctx).IsRecording() {
		t.Fatalf("a span records with traces off: %+v", span.SpanContext())
	}
	span.End()
	if tp, ts := Inject(ctx); tp != "" || ts != "" {
		t.Fatalf("Inject with traces off: %q %q", tp, ts)
	}
	if env := Env(ctx); env != nil {
		t.Fatalf("Env with traces off: %q", env)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rcv.posts.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests with traces off", n)
	}
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "relay", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		if got := enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("enabled(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

func TestBadProtocol(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if on, _, err := Setup(context.Background(), "r1"); err == nil || on || !strings.Contains(err.Error(), "http/json") {
		t.Fatalf("Setup with protocol http/json: on=%v err=%v", on, err)
	}
}

// With an endpoint: spans go there over OTLP/HTTP with the headers of
// OTEL_EXPORTER_OTLP_HEADERS, under a resource with service.name (default
// relay, OTEL_SERVICE_NAME wins), service.instance.id, relay.name and
// OTEL_RESOURCE_ATTRIBUTES; a span's context rides through Inject/Extract and Env.
func TestSetupExports(t *testing.T) {
	clearOTEL(t)
	rcv := newReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-probe=yes")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	on, shutdown, err := Setup(context.Background(), "r1")
	if err != nil || !on {
		t.Fatalf("Setup: on=%v err=%v", on, err)
	}
	ctx, span := Tracer().Start(context.Background(), "parent")
	if !span.IsRecording() {
		t.Fatal("the span does not record")
	}
	tp, _ := Inject(ctx)
	if !strings.HasPrefix(tp, "00-"+span.SpanContext().TraceID().String()+"-") {
		t.Fatalf("traceparent %q of trace %s", tp, span.SpanContext().TraceID())
	}
	if env := Env(ctx); len(env) != 1 || env[0] != "TRACEPARENT="+tp {
		t.Fatalf("Env: %q", env)
	}
	// A job's worker continues it.
	wctx := Extract(context.Background(), tp, "")
	_, child := Tracer().Start(wctx, "child")
	if child.SpanContext().TraceID() != span.SpanContext().TraceID() {
		t.Fatal("the extracted context starts another trace")
	}
	child.End()
	span.End()
	if err := shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.reqs) == 0 {
		t.Fatal("the receiver got no spans")
	}
	if rcv.hdrs[0].Get("X-Probe") != "yes" {
		t.Fatalf("export headers: %v", rcv.hdrs[0])
	}
	res := map[string]string{}
	names := map[string]bool{}
	for _, req := range rcv.reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names[s.GetName()] = true
				}
			}
		}
	}
	if !names["parent"] || !names["child"] {
		t.Fatalf("spans received: %v", names)
	}
	if res["service.name"] != "relay" || res["relay.name"] != "r1" || len(res["service.instance.id"]) != 32 ||
		res["deployment.environment.name"] != "test" {
		t.Fatalf("resource: %v", res)
	}
}

func TestServiceNameFromEnv(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "relay-eu")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	res, err := newResource(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range res.Attributes() {
		got[string(kv.Key)] = kv.Value.AsString()
	}
	if got["service.name"] != "relay-eu" || got["relay.name"] != "r1" {
		t.Fatalf("resource: %v", got)
	}
	a, _ := newResource(context.Background(), "r1")
	if a.Set().Equals(res.Set()) {
		t.Fatal("two processes share one service.instance.id")
	}
}

func TestGRPCProtocol(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	exp, err := newExporter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(context.Background())
}

// The Redis commands of a background loop (no trace in their context) make
// no span; inside a trace they do.
func TestChildOnly(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := childOnly{tp: tp}.Tracer("redis")
	_, root := tr.Start(context.Background(), "ping")
	root.End()
	if root.IsRecording() || len(rec.Ended()) != 0 {
		t.Fatal("a command outside any trace made a span")
	}
	pctx, parent := tp.Tracer("t").Start(context.Background(), "call")
	_, cmd := tr.Start(pctx, "get")
	cmd.End()
	parent.End()
	if len(rec.Ended()) != 2 || rec.Ended()[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans: %v", rec.Ended())
	}
	var _ trace.TracerProvider = childOnly{}
}

// A call to a paired relay made inside a trace is a client span and sends
// traceparent; one of a background loop (no trace) makes neither.
func TestTransportInsideTraceOnly(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := &http.Client{Transport: transport(http.DefaultTransport, tp, propagation.TraceContext{})}
	get := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/peer/v1/hello", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	get(context.Background())
	ctx, call := tp.Tracer("t").Start(context.Background(), "tools/call relay_tool")
	get(ctx)
	call.End()
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "" {
		t.Errorf("a call outside any trace sent traceparent %q", got[0])
	}
	if !strings.HasPrefix(got[1], "00-"+call.SpanContext().TraceID().String()+"-") {
		t.Errorf("a call inside the trace sent traceparent %q", got[1])
	}
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != "GET /peer/v1/hello" {
		t.Errorf("spans: %q, want the client span and the call's", names)
	}
}
