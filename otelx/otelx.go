// Package otelx sets up the relay's OpenTelemetry traces (R25.1) from the
// standard OTEL_* variables and holds the few helpers the other packages use
// to make spans and to carry a trace through a job's payload or an agent
// process's environment. With no OTLP endpoint variable set nothing is set
// up: the global tracer provider stays OpenTelemetry's no-op one, no
// exporter exists, and the instrumentation (HTTP, Redis) is not installed.
package otelx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the relay's own spans.
const ScopeName = "github.com/oar/relay"

// The attribute keys of the relay's own spans and resource (R25.1: contract).
const (
	KeyMCPMethod = attribute.Key("mcp.method.name")
	KeyAction    = attribute.Key("relay.action")
	KeySession   = attribute.Key("relay.session")
	KeyProvider  = attribute.Key("relay.provider")
	KeyTurn      = attribute.Key("relay.turn")
	KeyRelayName = attribute.Key("relay.name")
	KeyJob       = attribute.Key("relay.job")
)

// Enabled reports whether the environment asks for traces: an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set,
// and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says no.
func Enabled() bool { return enabled(os.Getenv) }

func enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// Setup configures this process's traces from the environment when Enabled:
// an OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: http/protobuf, the default, or grpc;
// the exporter itself reads the endpoint, headers, timeout and TLS
// variables), a batching tracer provider (its sampler from
// OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, read by the SDK; parent-based
// always-on by default), a resource (service.name from OTEL_SERVICE_NAME,
// default "relay"; OTEL_RESOURCE_ATTRIBUTES; service.instance.id, new for
// each process; relay.name), and the W3C trace-context propagator, all made
// global. It returns whether tracing is on and the function that flushes
// and ends it (a no-op when off). Off, it changes nothing global.
func Setup(ctx context.Context, relayName string) (on bool, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !Enabled() {
		return false, noop, nil
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return false, noop, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := newResource(ctx, relayName)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return false, noop, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batchOptions(os.Getenv)...), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return true, tp.Shutdown, nil
}

// batchOptions are the batch span processor's sizes unless the environment
// sets them (OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, read by
// the SDK): a relay under load makes a few thousand spans a second (about 7
// per send→reply), so batches of 2,048 from a queue of 8,192 (the SDK's
// defaults: 512 of 2,048) make a quarter of the exports and drop nothing in
// a burst (issue 36: the cost of exporting).
func batchOptions(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	var o []sdktrace.BatchSpanProcessorOption
	if strings.TrimSpace(getenv("OTEL_BSP_MAX_QUEUE_SIZE")) == "" {
		o = append(o, sdktrace.WithMaxQueueSize(8192))
	}
	if strings.TrimSpace(getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")) == "" {
		o = append(o, sdktrace.WithMaxExportBatchSize(2048))
	}
	return o
}

// Protocol is the OTLP protocol the environment names for traces:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else
// "http/protobuf".
func Protocol() string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return strings.ToLower(v)
		}
	}
	return "http/protobuf"
}

func newExporter(ctx context.Context) (*otlptrace.Exporter, error) {
	switch p := Protocol(); p {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf":
		return otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported: use http/protobuf or grpc", p)
	}
}

func newResource(ctx context.Context, relayName string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{
		attribute.String("service.name", "relay"),
		attribute.String("service.instance.id", instanceID()),
	}
	if relayName != "" {
		attrs = append(attrs, KeyRelayName.String(relayName))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the defaults above.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if errors.Is(err, resource.ErrPartialResource) { // a malformed OTEL_RESOURCE_ATTRIBUTES entry: the rest is kept
		err = nil
	}
	return res, err
}

// instanceID is a random id for this process (service.instance.id).
func instanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Tracer is the relay's tracer (the global provider's: no-op when off).
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// Inject returns the W3C traceparent and tracestate of ctx's span, "" when
// it has none (tracing off).
func Inject(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// Extract returns ctx continuing the trace of a W3C traceparent and
// tracestate (as Inject gave them; "" leaves ctx as it is).
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// Env is the TRACEPARENT (and TRACESTATE) entries for an agent process's
// environment that make its own spans children of ctx's span; nil when ctx
// has no span.
func Env(ctx context.Context) []string {
	tp, ts := Inject(ctx)
	if tp == "" {
		return nil
	}
	env := []string{"TRACEPARENT=" + tp}
	if ts != "" {
		env = append(env, "TRACESTATE="+ts)
	}
	return env
}
