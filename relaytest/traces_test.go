package relaytest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oar/relay/config"
)

// otlpSpan is one span an OTLP/HTTP receiver got, with its resource.
type otlpSpan struct {
	trace, id, parent string
	name              string
	attrs, res        map[string]string
}

// otlpReceiver is an in-process OTLP/HTTP traces endpoint (POST /v1/traces,
// protobuf): it keeps every span it is sent.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
	posts int
	seen  map[string]bool // traces a test has checked (its goroutine only)
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{seen: map[string]bool{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not the traces route", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.posts++
	for _, rs := range ex.GetResourceSpans() {
		res := kvMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, otlpSpan{trace: hex.EncodeToString(sp.GetTraceId()), id: hex.EncodeToString(sp.GetSpanId()),
					parent: hex.EncodeToString(sp.GetParentSpanId()), name: sp.GetName(), attrs: kvMap(sp.GetAttributes()), res: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func kvMap(kvs []*common.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = fmt.Sprint(v.GetValue())
		}
	}
	return m
}

func (r *otlpReceiver) all() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...)
}

// otelEnv points a relay process's traces at the receiver, exported within
// a fifth of a second.
func (r *otlpReceiver) otelEnv() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.URL, "OTEL_BSP_SCHEDULE_DELAY=200"}
}

// R25.1: one relay_tool call (a send from alpha's session to a session on the
// paired relay bravo) is one trace, across alpha's serve process, bravo's
// serve process (the traceparent header of the peer call) and the process
// that ran bravo's turn (the drain job's payload: bravo starts no drain in
// the call, direct_starts 0, and a `relay worker` of bravo runs next to its
// serve). No span attribute holds the prompt or a token.
func TestTracesOneTraceAcrossRelays(t *testing.T) {
	NeedsSharedRedis(t, "two paired `relay serve` processes and a `relay worker` on one Redis")
	if testing.Short() {
		t.Skip("builds the relay binary and runs three processes")
	}
	t.Parallel()
	rcv := newOTLPReceiver(t)
	alpha := startPeerProcWith(t, "alpha", "alpha", NewRedis(t), "", "", rcv.otelEnv())
	bravo := startPeerProcWith(t, "bravo", "bravo", NewRedis(t), "", "limits:\n  direct_starts: 0\n", rcv.otelEnv())

	// bravo's worker process: same Redis and key prefix, traces on.
	cfgFile := filepath.Join(t.TempDir(), "bravo-worker.yaml")
	if err := os.WriteFile(cfgFile, []byte("name: bravo\nfolders: ["+bravo.rd.Dir+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wout syncBuffer
	var worker child
	cmd := exec.Command(bravo.bin, "worker", "--redis", bravo.rd.URL, "--config", cfgFile)
	cmd.Env = relayEnv(append([]string{"RELAY_KEY_PREFIX=" + bravo.rd.Prefix}, rcv.otelEnv()...)...)
	cmd.Stdout, cmd.Stderr = &wout, &wout
	if _, err := worker.run(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		worker.kill()
		if t.Failed() {
			t.Logf("---- output of bravo's worker ----\n%s", wout.String())
		}
	})
	Eventually(t, 20*time.Second, func() bool { return strings.Contains(wout.String(), "relay process started") },
		"bravo's worker did not start")

	pairProcs(t, alpha, bravo)
	sa := alpha.api.NewSession(map[string]any{"title": "caller"})
	sb := bravo.api.NewSession(map[string]any{"title": "target"})
	alpha.say(sa, "please ask @bravo for help") // R4.4: the owner's mention unlocks bravo

	// Sends until one's turn ran in bravo's worker process (asynq hands a
	// task to whichever of bravo's two processes asks first): its trace then
	// spans three processes. Every trace is checked.
	mc := alpha.api.Connect(sa.Token, nil)
	var procs map[string]string
	for i := 1; ; i++ {
		procs = checkSendTrace(t, rcv, mc, sa, sb, fmt.Sprintf("traced prompt 7f3c91 number %d for bravo", i))
		if len(procs) >= 3 {
			break
		}
		if i == 40 {
			t.Fatalf("40 sends, and no turn ran in bravo's worker process: %v", procs)
		}
	}
}

// checkSendTrace sends prompt from sa to sb on bravo through alpha's MCP
// route and checks the trace it makes (R25.1); it returns the trace's
// processes (service.instance.id → relay.name).
func checkSendTrace(t *testing.T, rcv *otlpReceiver, mc *MCP, sa, sb Session, prompt string) map[string]string {
	t.Helper()
	res, isErr := mc.Call(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": prompt, "wait_seconds": 30})
	if isErr || res["ok"] != true {
		t.Fatalf("send: %v", res)
	}
	if rp, _ := res["reply"].(map[string]any); rp == nil || rp["text"] != "echo: "+prompt {
		t.Fatalf("send reply: %v", res)
	}

	// The MCP request's span, and the trace it starts.
	var mcpSpan otlpSpan
	Eventually(t, 30*time.Second, func() bool {
		for _, s := range rcv.all() {
			if s.name == "tools/call relay_tool" && s.attrs["relay.action"] == "send" && s.attrs["relay.session"] == sa.ID && !rcv.seen[s.trace] {
				mcpSpan = s
				return true
			}
		}
		return false
	}, "no span of the send's MCP request")
	if mcpSpan.attrs["mcp.method.name"] != "tools/call" {
		t.Fatalf("MCP span attributes: %v", mcpSpan.attrs)
	}
	if _, ok := mcpSpan.attrs["mcp.session.id"]; ok {
		t.Fatalf("MCP span records mcp.session.id: %v", mcpSpan.attrs)
	}
	if mcpSpan.res["service.name"] != "relay" || mcpSpan.res["relay.name"] != "alpha" || mcpSpan.res["service.instance.id"] == "" {
		t.Fatalf("alpha's resource: %v", mcpSpan.res)
	}
	trace := mcpSpan.trace
	rcv.seen[trace] = true
	inTrace := func() []otlpSpan {
		var out []otlpSpan
		for _, s := range rcv.all() {
			if s.trace == trace {
				out = append(out, s)
			}
		}
		return out
	}
	// bravo's turn joins it: the drain job's span and the turn's span, in
	// the process that ran the turn.
	var drain, turn otlpSpan
	Eventually(t, 30*time.Second, func() bool {
		drain, turn = otlpSpan{}, otlpSpan{}
		for _, s := range inTrace() {
			switch {
			case s.name == "session:drain" && s.attrs["relay.session"] == sb.ID:
				drain = s
			case s.name == "turn" && s.attrs["relay.session"] == sb.ID:
				turn = s
			}
		}
		return drain.id != "" && turn.id != ""
	}, "bravo's drain and turn spans are not in the send's trace %s", trace)
	if turn.parent != drain.id || turn.attrs["relay.provider"] == "" || turn.attrs["relay.turn"] == "" {
		t.Fatalf("turn span %+v, drain span %+v", turn, drain)
	}
	if drain.res["relay.name"] != "bravo" {
		t.Fatalf("the drain span's resource: %v", drain.res)
	}

	// Every span of the path reaches the receiver (each process sends its
	// own batches): the HTTP server span of /mcp, the peer call's client
	// span on alpha and its server span on bravo, a Redis command.
	var spans []otlpSpan
	var procs map[string]string // service.instance.id → relay.name
	var httpServer, peerCall, redisCmd bool
	bravoServer := ""
	Eventually(t, 30*time.Second, func() bool {
		spans, procs = inTrace(), map[string]string{}
		httpServer, peerCall, redisCmd, bravoServer = false, false, false, ""
		for _, s := range spans {
			procs[s.res["service.instance.id"]] = s.res["relay.name"]
			switch {
			case s.name == "POST /mcp" && s.res["relay.name"] == "alpha" && s.id == mcpSpan.parent:
				httpServer = true // the MCP request's span is its child
			case s.name == "POST /peer/v1/call" && s.res["relay.name"] == "alpha":
				peerCall = true
			case s.name == "POST /peer/v1/call" && s.res["relay.name"] == "bravo":
				bravoServer = s.res["service.instance.id"]
			case s.attrs["db.system.name"] == "redis" && s.attrs["db.system"] == "redis":
				redisCmd = true
			}
		}
		return httpServer && peerCall && bravoServer != "" && redisCmd
	}, "trace %s to hold the HTTP server span of /mcp, the peer call's client span on alpha and server span on bravo, and a Redis command's",
		trace)
	// R25.1: no attribute holds the prompt, the reply or a token.
	for _, s := range spans {
		for k, v := range s.attrs {
			for _, secret := range []string{prompt, "7f3c91", sa.Token, sb.Token, OwnerToken} {
				if strings.Contains(v, secret) || strings.Contains(s.name, secret) {
					t.Fatalf("span %q attribute %s=%q holds %q", s.name, k, v, secret)
				}
			}
		}
	}
	where := "bravo's serve"
	if drain.res["service.instance.id"] != bravoServer {
		where = "bravo's worker"
	}
	t.Logf("trace %s: %d spans from %d processes %v; bravo's turn ran in %s", trace, len(spans), len(procs), procs, where)
	if len(procs) < 2 {
		t.Fatalf("trace spans %d processes, want alpha's and bravo's: %v", len(procs), procs)
	}
	if drain.res["service.instance.id"] == mcpSpan.res["service.instance.id"] {
		t.Fatalf("bravo's drain ran in alpha's process")
	}
	return procs
}

// R25.1: with no OTEL_* endpoint variable a relay sets nothing up: no
// exporter, the global tracer provider stays OpenTelemetry's no-op one, the
// relay works as before (a send and its reply). The drain payload without a
// trace context: asynqjobs' TestDrainTaskTraceContext. (Not parallel: it
// clears the variables.)
func TestTracesOffByDefault(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	before := otel.GetTracerProvider()
	r := Start(t, Options{Config: func(c *config.Config) { c.Limits.DirectStarts = 0 }}) // the turn's drain goes through the queue
	if r.App.Tracing() {
		t.Fatal("traces on with no endpoint variable")
	}
	if tp := otel.GetTracerProvider(); tp != before {
		t.Fatalf("the global tracer provider was replaced: %T", tp)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatal("the global tracer provider is the SDK's")
	}
	a := r.NewSession(map[string]any{"title": "a"})
	b := r.NewSession(map[string]any{"title": "b"})
	res := r.Connect(a.Token, nil).MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "hello", "wait_seconds": 20})
	if rp, _ := res["reply"].(map[string]any); rp == nil || rp["text"] != "echo: hello" {
		t.Fatalf("send: %v", res)
	}
}
