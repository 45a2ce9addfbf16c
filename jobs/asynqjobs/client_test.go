package asynqjobs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/oar/relay/jobs"
)

// R25.1: with no span in the enqueuing context (traces off) the drain
// task's payload is what it always was; with one, it carries the span's
// traceparent, which the worker continues.
func TestDrainTaskTraceContext(t *testing.T) {
	q := jobs.QueuesFor("p")
	task, err := NewDrainTask(context.Background(), q, "s1", "drain:s1:x")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(task.Payload()); got != `{"session":"s1"}` {
		t.Fatalf("payload with traces off: %s", got)
	}
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "call")
	defer span.End()
	task, err = NewDrainTask(ctx, q, "s1", "drain:s1:x")
	if err != nil {
		t.Fatal(err)
	}
	var p jobs.DrainPayload
	if err := json.Unmarshal(task.Payload(), &p); err != nil {
		t.Fatal(err)
	}
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if p.Session != "s1" || p.TP != want || p.TS != "" || strings.Contains(string(task.Payload()), `"ts"`) {
		t.Fatalf("payload with a span: %s, want tp %s", task.Payload(), want)
	}
}
