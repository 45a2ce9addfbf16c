package otelx

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// R25.1, issue 36: a Redis command inside a trace is one span named by the
// command, a pipeline one span; each carries db.system.name and the same
// few fixed attributes, never an argument; outside a trace nothing is made,
// and a nil answer is no error.
func TestRedisSpans(t *testing.T) {
	mr := miniredis.RunT(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = rdb.Close() }()
	if err := Redis(rdb); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "a secret prompt", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("a command outside any trace made %d spans", n)
	}
	tctx, parent := tp.Tracer("t").Start(ctx, "call")
	if err := rdb.Get(tctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	pipe.Set(tctx, "k", "another secret", 0)
	pipe.Get(tctx, "k")
	pipe.Set(tctx, "k2", "x", 0)
	if _, err := pipe.Exec(tctx); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := rec.Ended()
	if len(spans) != 3 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("spans %q, want get, the pipeline and the parent", names)
	}
	want := []string{"db.system", "db.system.name", "server.address", "server.port"}
	for i, name := range []string{"get", "redis.pipeline set get"} {
		s := spans[i]
		attrs := map[string]attribute.Value{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value
		}
		w := want
		if i == 1 {
			w = append(slices.Clone(want), "db.redis.num_cmd")
			if attrs["db.redis.num_cmd"].AsInt64() != 3 {
				t.Errorf("pipeline span num_cmd %v, want 3", attrs["db.redis.num_cmd"])
			}
		}
		slices.Sort(w)
		if s.Name() != name || !slices.Equal(slices.Sorted(maps.Keys(attrs)), w) || attrs["db.system.name"].AsString() != "redis" {
			t.Errorf("span %q attributes %v, want %q with %v", s.Name(), attrs, name, w)
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.Status().Code != 0 || len(s.Events()) != 0 {
			t.Errorf("span %q: parent %v, status %v, events %v", s.Name(), s.Parent(), s.Status(), s.Events())
		}
	}
}
