package otelx

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// R25.1, issue 36: the HTTP server span continues the caller's trace, is
// named "METHOD /path" and carries the method, path and status only; probes
// make none; a streaming answer still flushes and sets deadlines through it.
func TestHandlerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	errs := make(chan [2]error, 1) // the handler's Flush and SetWriteDeadline errors
	h := handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trace.SpanContextFromContext(r.Context()).IsValid() && r.URL.Path != "/healthz" {
			t.Error("the handler's context has no span")
		}
		rc := http.NewResponseController(w)
		deadlineErr := rc.SetWriteDeadline(time.Now().Add(time.Minute))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("data: x\n\n"))
		errs <- [2]error{rc.Flush(), deadlineErr}
	}), tp.Tracer("t"), propagation.TraceContext{})
	srv := httptest.NewServer(h)
	defer srv.Close()

	pctx, parent := tp.Tracer("caller").Start(context.Background(), "call")
	req, _ := http.NewRequestWithContext(pctx, http.MethodPost, srv.URL+"/mcp", strings.NewReader("{}"))
	propagation.TraceContext{}.Inject(pctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The body's end is written after the handler (and its span) ended: read
	// to it, so the server span is the first to end.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	parent.End()
	if e := <-errs; e[0] != nil || e[1] != nil {
		t.Fatalf("through the span's writer: Flush %v, SetWriteDeadline %v", e[0], e[1])
	}
	if r, err := http.Get(srv.URL + "/healthz"); err == nil {
		_ = r.Body.Close()
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the server span and the caller's", len(spans))
	}
	s := spans[0]
	var keys []string
	for _, kv := range s.Attributes() {
		keys = append(keys, string(kv.Key))
		if kv.Key == "http.response.status_code" && kv.Value.AsInt64() != http.StatusAccepted {
			t.Errorf("status %v, want 202", kv.Value)
		}
	}
	slices.Sort(keys)
	want := []string{"http.request.method", "http.response.status_code", "url.path"}
	if s.Name() != "POST /mcp" || s.SpanKind() != trace.SpanKindServer || !slices.Equal(keys, want) ||
		s.Parent().SpanID() != parent.SpanContext().SpanID() || !s.Parent().IsRemote() {
		t.Fatalf("server span %q kind %v attributes %v parent %v, want POST /mcp, server, %v, the caller's", s.Name(), s.SpanKind(), keys, s.Parent(), want)
	}
}

// R25.1: an answer of 500 or more marks the server span an error (a store
// that does not answer: 503, R25.3); one below does not.
func TestHandlerSpanServerError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}), tp.Tracer("t"), propagation.TraceContext{})
	for _, p := range []string{"/down", "/missing"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	var got []string
	for _, s := range rec.Ended() {
		got = append(got, s.Name()+" "+s.Status().Code.String())
	}
	if want := []string{"GET /down Error", "GET /missing Unset"}; !slices.Equal(got, want) {
		t.Fatalf("spans %q, want %q", got, want)
	}
}
