package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/store"
)

// bearerTransport adds the session token to every request of an MCP client.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(req)
}

// connect opens a go-sdk MCP client session over Streamable HTTP, as relaytest does.
func connect(ctx context.Context, endpoint, token string, base http.RoundTripper) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "relay-bench", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: base}}, DisableStandaloneSSE: true}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.Connect(cctx, tr, nil)
}

func closeAll(ss []*mcp.ClientSession) {
	for _, s := range ss {
		if s != nil {
			_ = s.Close()
		}
	}
}

// envelope decodes the relay's result envelope (one text item holding JSON).
func envelope(res *mcp.CallToolResult) (map[string]any, error) {
	if len(res.Content) != 1 {
		return nil, fmt.Errorf("want one content item, got %d", len(res.Content))
	}
	txt, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return nil, fmt.Errorf("content is %T, not text", res.Content[0])
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(txt.Text), &env); err != nil {
		return nil, fmt.Errorf("text is not JSON: %w", err)
	}
	return env, nil
}

// errCount keeps the number of failed calls and the first failure.
type errCount struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *errCount) add(err error) {
	e.mu.Lock()
	e.n++
	if e.first == nil {
		e.first = err
	}
	e.mu.Unlock()
}

// ---- (a) send → reply ----

type sendResult struct {
	lat    dist
	n      int
	wall   time.Duration
	stages [4]dist  // call→queued, queued→turn start, turn start→end, turn end→reply
	cost   snapshot // of the measured part, in this process and Redis
	client time.Duration
	// mean length of the relay queue's pending and active lists while measuring
	pending, active float64
	rtLat           dist // the relay's Redis round trips while measuring
}

// benchSend runs rounds measured send round trips per client (after warm
// unmeasured ones), all clients at once; client i is orchestrator i and sends
// "x" to targets[i].
func benchSend(ctx context.Context, cl clients, rp *relayProc, m meter, queue string, orch []sessionRef, targets []string, warm, rounds int) (sendResult, error) {
	spec := driveSpec{Endpoint: rp.url + "/mcp", Tool: "relay_tool", Warm: warm, N: rounds, Send: true}
	for i := range orch {
		spec.Tokens = append(spec.Tokens, orch[i].Token)
		spec.Args = append(spec.Args, map[string]any{"action": "send", "relay": "this", "session": targets[i], "text": "x", "wait_seconds": 30})
	}
	var (
		out          sendResult
		s0           snapshot
		sampled      = make(chan [3]float64, 1)
		stopSampling = make(chan struct{})
	)
	var stopRT func() dist
	res, err := cl.run(ctx, spec, func() {
		s0 = m.snap(ctx)
		stopRT = m.rt.record()
		go func() { sampled <- sampleQueue(ctx, m.rdb, queue, stopSampling) }()
	}, func() {
		out.rtLat = stopRT()
		out.cost = m.snap(ctx).sub(s0)
		close(stopSampling)
	})
	if err == nil {
		err = res.err()
	}
	if err != nil {
		return out, fmt.Errorf("send: %w", err)
	}
	if q := <-sampled; q[2] > 0 {
		out.pending, out.active = q[0]/q[2], q[1]/q[2]
		out.cost.cmds -= 2 * int64(q[2]) // the sampler's own LLENs
	}
	out.wall, out.client = time.Duration(res.WallNs), time.Duration(res.CPUNs)
	var st [4][]time.Duration
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range res.Samples {
		// Where the time went, from the turn record (millisecond timestamps).
		tr, err := rp.app.Store().GetTurn(sctx, s.Msg)
		if err != nil || tr.StartedAt.IsZero() || tr.EndedAt.IsZero() {
			continue
		}
		t0, t1 := time.Unix(0, s.T0), time.Unix(0, s.T1)
		st[0] = append(st[0], tr.CreatedAt.Sub(t0))
		st[1] = append(st[1], tr.StartedAt.Sub(tr.CreatedAt))
		st[2] = append(st[2], tr.EndedAt.Sub(tr.StartedAt))
		st[3] = append(st[3], t1.Sub(tr.EndedAt))
	}
	out.lat, out.n = newDist(res.lats()), len(res.Samples)
	for i := range st {
		out.stages[i] = newDist(st[i])
	}
	return out, nil
}

// sampleQueue sums the lengths of an asynq queue's pending and active lists
// every 10 ms until stop; it returns the sums and the number of samples.
func sampleQueue(ctx context.Context, rdb redis.UniversalClient, queue string, stop chan struct{}) [3]float64 {
	var out [3]float64
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return out
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		var p, a *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			p = pl.LLen(ctx, "asynq:{"+queue+"}:pending")
			a = pl.LLen(ctx, "asynq:{"+queue+"}:active")
			return nil
		})
		if err == nil {
			out[0] += float64(p.Val())
			out[1] += float64(a.Val())
			out[2]++
		}
	}
}

// ---- (c) list_sessions against a bare go-sdk server ----

type callResult struct {
	lat    dist
	n      int
	wall   time.Duration
	cost   snapshot
	client time.Duration
}

func (c callResult) perSec() float64 { return rate(c.n, c.wall) }

// runCalls makes calls of tool with args from conc clients at once (each
// makes calls/conc), after warm unmeasured calls each.
func runCalls(ctx context.Context, cl clients, m meter, endpoint, token, tool string, args map[string]any, conc, calls, warm int) (callResult, error) {
	spec := driveSpec{Endpoint: endpoint, Tool: tool, Warm: warm, N: calls / conc}
	for i := 0; i < conc; i++ {
		spec.Tokens = append(spec.Tokens, token)
		spec.Args = append(spec.Args, args)
	}
	var out callResult
	var s0 snapshot
	res, err := cl.run(ctx, spec, func() { s0 = m.snap(ctx) }, func() { out.cost = m.snap(ctx).sub(s0) })
	if err == nil {
		err = res.err()
	}
	if err != nil {
		return out, fmt.Errorf("%s on %s: %w", tool, endpoint, err)
	}
	out.lat, out.n, out.wall, out.client = newDist(res.lats()), len(res.Samples), time.Duration(res.WallNs), time.Duration(res.CPUNs)
	return out, nil
}

func merge(a, b callResult) callResult {
	all := append(append([]time.Duration{}, a.lat...), b.lat...)
	return callResult{lat: newDist(all), n: a.n + b.n, wall: a.wall + b.wall, cost: a.cost.add(b.cost), client: a.client + b.client}
}

// bareServer is a plain go-sdk MCP server, stateless Streamable HTTP on
// 127.0.0.1, with two tools: "payload" answers the captured list_sessions
// result verbatim (text and structured content, as the relay does), "noop"
// answers "{}".
type bareServer struct {
	url string
	srv *http.Server
}

func startBare(payload string) (*bareServer, error) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "1"}, &mcp.ServerOptions{
		Logger: slog.New(slog.DiscardHandler)})
	schema := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "payload", Description: "returns a fixed result", InputSchema: schema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: payload}},
				StructuredContent: json.RawMessage(payload)}, nil
		})
	s.AddTool(&mcp.Tool{Name: "noop", Description: "does nothing", InputSchema: schema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &bareServer{url: "http://" + ln.Addr().String() + "/mcp", srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *bareServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(ctx)
}

type listResult struct {
	sessions     int // sessions in the relay (list_sessions total)
	shown        int // sessions in one result
	payloadBytes int
	relay        callResult
	same         callResult
	noop         callResult
	noopA        callResult // the no-op with (a)'s number of clients: the MCP floor of a send
}

// benchList measures list_sessions on the relay (caller token tok) against
// the same payload and a no-op on a bare server: conc clients each, calls
// calls per variant, in two alternating passes.
func benchList(ctx context.Context, cl clients, rp *relayProc, m meter, tok string, tr http.RoundTripper, conc, calls, warm, concA, callsA int) (listResult, error) {
	var out listResult
	args := map[string]any{"action": "list_sessions", "relay": "this", "limit": 50}
	// Capture one real result.
	cs, err := connect(ctx, rp.url+"/mcp", tok, tr)
	if err != nil {
		return out, fmt.Errorf("connect to the relay: %w", err)
	}
	defer func() { _ = cs.Close() }()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
	if err != nil {
		return out, fmt.Errorf("list_sessions: %w", err)
	}
	env, err := envelope(res)
	if err != nil {
		return out, fmt.Errorf("list_sessions: %w", err)
	}
	if res.IsError || env["ok"] != true {
		return out, fmt.Errorf("list_sessions: isError=%v %v", res.IsError, env)
	}
	payload := res.Content[0].(*mcp.TextContent).Text
	total, _ := env["total"].(float64)
	shown, _ := env["sessions"].([]any)
	out.sessions, out.shown, out.payloadBytes = int(total), len(shown), len(payload)

	bare, err := startBare(payload)
	if err != nil {
		return out, err
	}
	defer bare.stop()
	// Same answer? (The bare server must hand back exactly what the relay did.)
	bs, err := connect(ctx, bare.url, tok, tr)
	if err != nil {
		return out, fmt.Errorf("connect to the bare server: %w", err)
	}
	defer func() { _ = bs.Close() }()
	res, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "payload", Arguments: args})
	if err != nil {
		return out, err
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != payload {
		return out, errors.New("the bare server's payload differs from the relay's")
	}
	const passes = 2
	variants := []struct {
		endpoint, tool string
		acc            *callResult
	}{{rp.url + "/mcp", "relay_tool", &out.relay}, {bare.url, "payload", &out.same}, {bare.url, "noop", &out.noop}}
	for p := 0; p < passes; p++ {
		for _, v := range variants {
			r, err := runCalls(ctx, cl, m, v.endpoint, tok, v.tool, args, conc, calls/passes, warm)
			if err != nil {
				return out, err
			}
			*v.acc = merge(*v.acc, r)
		}
	}
	// The floor of (a) on the MCP side: a no-op call from as many clients as (a) has.
	out.noopA, err = runCalls(ctx, cl, m, bare.url, tok, "noop", args, concA, callsA, 3)
	return out, err
}

// newPrefix returns a fresh Redis key prefix for this run.
func newPrefix() string { return "bench" + store.NewID(4) }
