package main

// Row t: the cost of OpenTelemetry traces (R25.1, issue 36). G1 and G2 of
// row h, measured by child processes of this program (each one a bench run
// of `-rows h -goals 12` with its relay in-process, as row h does it), the
// relay's tracing off in some and exporting in the others, alternating, to
// an OTLP/HTTP receiver in this process that counts the spans it gets.
//
// Why children: a relay's traces are set up by app.New from the OTEL_*
// variables (otelx.Setup), and the tracer provider it installs is global to
// the process, so two relays of one process cannot be one traced and one
// not; each child is a process of its own, the traced one exactly what an
// operator's `relay serve` with OTEL_EXPORTER_OTLP_ENDPOINT set runs.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// g12Summary is what a child run of goals 1 and 2 reports (-goals-json):
// the medians row h prints.
type g12Summary struct {
	G1Ratio float64 `json:"g1_ratio"` // send p50 ÷ (MCP no-op p50 + hop p50)
	Send1   float64 `json:"send1_ms"` // send→reply p50 at 1 client
	MCP1    float64 `json:"mcp1_ms"`
	Hop1    float64 `json:"hop1_ms"`
	Thr2    float64 `json:"thr2"`     // round trips/s, 32 agents
	P50s2   float64 `json:"p50_2_ms"` // their p50
	CPU2    float64 `json:"cpu2_ms"`  // relay CPU per round trip
	RTs2    float64 `json:"rts2"`     // the relay client's Redis round trips per round trip
	Cmds2   float64 `json:"cmds2"`    // Redis commands per round trip
	Sends   int     `json:"sends"`    // send→reply round trips in all, warm-ups included
}

func summarize12(g goalsResult, quick bool) g12Summary {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	s1, m1, h1 := medianD(g.send1), medianD(g.mcp1), medianD(g.hop1)
	return g12Summary{G1Ratio: ratio(float64(s1), float64(m1+h1)), Send1: ms(s1), MCP1: ms(m1), Hop1: ms(h1),
		Thr2: medianF(g.thr2), P50s2: ms(medianD(g.p50s2)), CPU2: medianF(g.cpu2), RTs2: medianF(g.rts2), Cmds2: medianF(g.cmds2),
		Sends: sendsOf(g, quick)}
}

// sendsOf counts the send→reply round trips goals 1 and 2 made (goals123:
// each benchSend call's clients warm up with 2 round trips each; the full
// run's goal 2 has a warm-up round first).
func sendsOf(g goalsResult, quick bool) int {
	sz := g.sz
	n := len(g.send1) * (sz.n1 + 2)
	if len(g.thr2) > 0 {
		n += len(g.thr2) * sz.agents * (sz.n2 + 2)
		if !quick {
			n += sz.agents * (sz.n2 + 2)
		}
	}
	return n
}

// otlpReceiver is a local OTLP/HTTP trace receiver: POST /v1/traces with an
// ExportTraceServiceRequest (protobuf, or gzip'd), counted and answered 200.
type otlpReceiver struct {
	srv            *http.Server
	url            string
	spans, posts   atomic.Int64
	bytes, badReqs atomic.Int64
}

func startReceiver() (*otlpReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.handle)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *otlpReceiver) handle(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if strings.EqualFold(req.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.badReqs.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer func() { _ = zr.Close() }()
		body = zr
	}
	data, err := io.ReadAll(body)
	var msg coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &msg)
	}
	if err != nil {
		r.badReqs.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var n int64
	for _, rs := range msg.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	r.spans.Add(n)
	r.posts.Add(1)
	r.bytes.Add(int64(len(data)))
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// tracingRun is one child run.
type tracingRun struct {
	on    bool
	s     g12Summary
	spans int64 // spans the receiver got during the run
	posts int64
}

type tracingResult struct {
	runs    []tracingRun
	recv    string
	badReqs int64
}

// runTracing runs -trace-runs pairs of children, the order alternating
// (off, exporting; exporting, off; …).
func (b *bench) runTracing(ctx context.Context) (tracingResult, error) {
	var out tracingResult
	exe, err := os.Executable()
	if err != nil {
		return out, err
	}
	recv, err := startReceiver()
	if err != nil {
		return out, err
	}
	defer func() { _ = recv.srv.Close() }()
	out.recv = recv.url
	dir, err := os.MkdirTemp("", "bench-t-")
	if err != nil {
		return out, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for i := 0; i < b.o.traceRuns; i++ {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, on := range order {
			name := "off"
			if on {
				name = "exporting"
			}
			b.logf("(t) pair %d/%d: goals 1 and 2, tracing %s, in a child process", i+1, b.o.traceRuns, name)
			jf := filepath.Join(dir, fmt.Sprintf("%d-%s.json", i, name))
			args := []string{"-redis", b.o.redisURL, "-rows", "h", "-goals", "12", "-goals-json", jf}
			if b.o.quick {
				args = append(args, "-quick")
			}
			if b.o.concurrency > 0 {
				args = append(args, "-concurrency", fmt.Sprint(b.o.concurrency))
			}
			if b.o.inproc {
				args = append(args, "-inproc")
			}
			if b.o.profile != "" { // each child's goal 2 rounds: DIR/off-1/goal2-1.pprof, DIR/exporting-1/…
				args = append(args, "-profile", filepath.Join(b.o.profile, fmt.Sprintf("%s-%d", name, i+1)), fmt.Sprintf("-trace=%t", b.o.trace))
			}
			cmd := exec.CommandContext(ctx, exe, args...)
			cmd.Env = tracingEnv(os.Environ(), on, recv.url)
			var stderr bytes.Buffer
			cmd.Stdout = io.Discard
			cmd.Stderr = &stderr
			s0, p0 := recv.spans.Load(), recv.posts.Load()
			if err := cmd.Run(); err != nil {
				return out, fmt.Errorf("child (tracing %s): %w\n%s", name, err, stderr.String())
			}
			data, err := os.ReadFile(jf)
			if err != nil {
				return out, err
			}
			r := tracingRun{on: on, spans: recv.spans.Load() - s0, posts: recv.posts.Load() - p0}
			if err := json.Unmarshal(data, &r.s); err != nil {
				return out, fmt.Errorf("child (tracing %s): %w", name, err)
			}
			b.logf("(t) tracing %s: G1 %.2f× (send p50 %.3f ms), G2 %.0f round trips/s, %.3f ms relay CPU each; %d spans received",
				name, r.s.G1Ratio, r.s.Send1, r.s.Thr2, r.s.CPU2, r.spans)
			out.runs = append(out.runs, r)
		}
	}
	out.badReqs = recv.badReqs.Load()
	return out, nil
}

// tracingEnv is env without any OTEL_* variable, plus, when on, the
// endpoint of the local receiver, always-on sampling and HTTP/protobuf.
func tracingEnv(env []string, on bool, endpoint string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	if on {
		out = append(out, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_TRACES_SAMPLER=always_on", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
	}
	return out
}

func (b *bench) tableT(row rowFunc, r tracingResult) {
	var off, on []g12Summary
	var spansOn, spansOff, postsOn int64
	var sendsOn int
	for _, x := range r.runs {
		if x.on {
			on = append(on, x.s)
			spansOn += x.spans
			postsOn += x.posts
			sendsOn += x.s.Sends
		} else {
			off = append(off, x.s)
			spansOff += x.spans
		}
	}
	med := func(xs []g12Summary, f func(g12Summary) float64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		return medianF(v)
	}
	list := func(xs []g12Summary, f func(g12Summary) float64, format string) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = fmt.Sprintf(format, f(x))
		}
		return strings.Join(parts, ", ")
	}
	type metric struct {
		name   string
		f      func(g12Summary) float64
		format string
	}
	metrics := []metric{
		{"G1 send→reply ÷ (MCP no-op + hop)", func(s g12Summary) float64 { return s.G1Ratio }, "%.3f×"},
		{"G1 send→reply p50 at 1 client (ms)", func(s g12Summary) float64 { return s.Send1 }, "%.3f"},
		{"G2 round trips/s, 32 agents", func(s g12Summary) float64 { return s.Thr2 }, "%.0f"},
		{"G2 send→reply p50, 32 agents (ms)", func(s g12Summary) float64 { return s.P50s2 }, "%.2f"},
		{"G2 relay CPU per round trip (ms)", func(s g12Summary) float64 { return s.CPU2 }, "%.3f"},
		{"G2 Redis round trips (relay client) · commands per round trip", func(s g12Summary) float64 { return s.RTs2 }, "%.1f"},
	}
	for _, m := range metrics {
		mo, mn := med(off, m.f), med(on, m.f)
		res := fmt.Sprintf("off **"+m.format+"** (%s) · exporting **"+m.format+"** (%s) · exporting ÷ off **%.3f**",
			mo, list(off, m.f, m.format), mn, list(on, m.f, m.format), ratio(mn, mo))
		if strings.HasPrefix(m.name, "G2 Redis") {
			res += fmt.Sprintf(" · commands off %.1f, exporting %.1f", med(off, func(s g12Summary) float64 { return s.Cmds2 }), med(on, func(s g12Summary) float64 { return s.Cmds2 }))
		}
		row("t", m.name+fmt.Sprintf(", medians of %d child runs each (each the median of its rounds)", len(off)), res, "", "")
	}
	g1 := ratio(med(on, metrics[1].f), med(off, metrics[1].f))
	thr := ratio(med(off, metrics[2].f), med(on, metrics[2].f))
	cpu := ratio(med(on, metrics[4].f), med(off, metrics[4].f))
	ok := g1 <= 1.15 && thr <= 1.15 && cpu <= 1.15 && spansOn > 0 && spansOff == 0 && r.badReqs == 0
	v := verdict(ok)
	if spansOn == 0 {
		v = "FAIL (no span received)"
	} else if spansOff != 0 {
		v = "FAIL (spans from a relay with tracing off)"
	}
	row("t", fmt.Sprintf("tracing exporting (OTEL_EXPORTER_OTLP_ENDPOINT=%s, OTEL_TRACES_SAMPLER=always_on, HTTP/protobuf, to a receiver in the bench process) vs off: the cost", r.recv),
		fmt.Sprintf("G1 send p50 exporting ÷ off **%.3f** · G2 round trips/s off ÷ exporting **%.3f** · G2 relay CPU per round trip exporting ÷ off **%.3f** · spans received: **%d** from the exporting runs (%d POSTs, %d bad; %.1f spans per send→reply round trip, %d of those, warm-ups included; owner API calls and MCP sessions' set-up make spans too; spans the SDK's batch processor dropped are not counted), %d from the off runs",
			g1, thr, cpu, spansOn, postsOn, r.badReqs, ratio(float64(spansOn), float64(sendsOn)), sendsOn, spansOff),
		"≤ 1.15 each; spans > 0", v)
}
