package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay/store"
)

// Row (y): MCP Tasks (R24.1). The cost of one tasks/get poll of a working
// task, and the relay's memory and goroutines with 1,000 tasks waiting at
// once beside 1,000 blocking calls waiting at once. The relay runs in this
// process (app.App), the clients too: goroutines are counted without the
// clients' own (their stacks named here and net/http's client connections),
// and the process's RSS includes the clients' side of the connections.

const (
	tasksCallers   = 100 // sessions that call; 10 calls each (MaxCallsPerToken is 16)
	tasksTargets   = 10  // sessions the prompts queue in (one turn runs in each, the rest wait queued)
	tasksWaiting   = 1000
	tasksPolls     = 2000
	tasksTurnSleep = 600_000 // ms: the running turns outlast the phase
)

type tasksResult struct {
	polls    int
	pollLat  dist
	pollCost perOp
	task     waitFootprint
	blocking waitFootprint
}

// waitFootprint is what n waiting calls add to the process.
type waitFootprint struct {
	n          int
	goroutines int   // relay-side goroutines added
	rssKB      int64 // process RSS added
	heapKB     int64 // Go heap in use + stacks added
}

func (b *bench) runTasks(ctx context.Context, prefix string) (tasksResult, error) {
	var res tasksResult
	rp, callers, targets, err := b.tasksRelay(ctx, prefix+"t")
	if err != nil {
		return res, err
	}
	cl := &taskHTTP{hc: b.hc, url: rp.url + "/mcp"}
	// One task, polled.
	id, err := cl.sendTask(ctx, callers[0].Token, targets[0].ID, true)
	if err != nil || id == "" {
		_ = rp.stop()
		return res, fmt.Errorf("first task: %q %w", id, err)
	}
	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	before := m.snap(ctx)
	lat := make([]time.Duration, 0, tasksPolls)
	for range tasksPolls {
		t0 := time.Now()
		if _, err := cl.rpc(ctx, callers[0].Token, "tasks/get", map[string]any{"taskId": id}, true); err != nil {
			_ = rp.stop()
			return res, fmt.Errorf("tasks/get: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	res.polls, res.pollLat, res.pollCost = tasksPolls, newDist(lat), m.snap(ctx).sub(before).per(tasksPolls)
	// 1,000 tasks at once.
	base := footprint()
	var errs errCount
	fan(tasksWaiting, 50, func(i int) {
		if _, err := cl.sendTask(ctx, callers[i%tasksCallers].Token, targets[i%tasksTargets].ID, true); err != nil {
			errs.add(err)
		}
	})
	res.task = footprint().minus(base, tasksWaiting)
	if err := rp.stop(); err != nil {
		return res, err
	}
	if errs.n > 0 {
		return res, fmt.Errorf("%d of %d task sends failed, first: %w", errs.n, tasksWaiting, errs.first)
	}
	res.blocking, err = b.tasksBlocking(ctx, prefix+"b")
	return res, err
}

// tasksBlocking is 1,000 blocking calls waiting at once on a relay of its own.
func (b *bench) tasksBlocking(ctx context.Context, prefix string) (waitFootprint, error) {
	rp, callers, targets, err := b.tasksRelay(ctx, prefix)
	if err != nil {
		return waitFootprint{}, err
	}
	defer func() { _ = rp.stop() }()
	cl := &taskHTTP{hc: b.hc, url: rp.url + "/mcp"}
	base := footprint()
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range tasksWaiting {
		wg.Go(func() { _, _ = cl.sendTask(cctx, callers[i%tasksCallers].Token, targets[i%tasksTargets].ID, false) })
	}
	// Every call has queued its prompt (turn records) and waits.
	deadline := time.Now().Add(2 * time.Minute)
	for countTurns(ctx, b, prefix) < tasksWaiting+tasksTargets && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // the last calls reach their wait
	fp := footprint().minus(base, tasksWaiting)
	cancel()
	wg.Wait()
	return fp, nil
}

// tasksRelay starts a relay with callers and targets; each target's first
// turn (sleeping) runs, so the calls' prompts queue behind it.
func (b *bench) tasksRelay(ctx context.Context, prefix string) (*relayProc, []sessionRef, []sessionRef, error) {
	rp, err := startRelay(b.o.redisURL, prefix, b.o.concurrency, b.hc)
	if err != nil {
		return nil, nil, nil, err
	}
	b.tasksPrefixes = append(b.tasksPrefixes, prefix)
	fail := func(err error) (*relayProc, []sessionRef, []sessionRef, error) {
		_ = rp.stop()
		return nil, nil, nil, err
	}
	if err := rp.enableAgentSessions(ctx); err != nil {
		return fail(err)
	}
	mk := func(n int, title string) ([]sessionRef, error) {
		out := make([]sessionRef, n)
		for i := range out {
			s, err := rp.createSession(ctx, fmt.Sprintf("%s %d", title, i))
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	callers, err := mk(tasksCallers, "caller")
	if err != nil {
		return fail(err)
	}
	targets, err := mk(tasksTargets, "target")
	if err != nil {
		return fail(err)
	}
	cl := &taskHTTP{hc: b.hc, url: rp.url + "/mcp"}
	for _, t := range targets {
		if _, err := cl.rpc(ctx, callers[0].Token, "tools/call", sendArgs(t.ID, 0), false); err != nil {
			return fail(err)
		}
	}
	return rp, callers, targets, nil
}

func countTurns(ctx context.Context, b *bench, prefix string) int {
	n := 0
	iter := b.rdb.Scan(ctx, 0, store.KeyBase(prefix)+"turn:*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n
}

func sendArgs(target string, wait int) map[string]any {
	text := fmt.Sprintf(`{"script":[{"sleep_ms":%d},{"reply":"late"}]}`, tasksTurnSleep)
	return map[string]any{"name": "relay_tool", "arguments": map[string]any{"action": "send", "relay": "this", "session": target, "text": text, "wait_seconds": wait}}
}

// fan runs f(0..n-1) on conc goroutines.
func fan(n, conc int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range conc {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func footprint() waitFootprint {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return waitFootprint{goroutines: relayGoroutines(), rssKB: rssKB(), heapKB: int64(ms.HeapInuse+ms.StackInuse) / 1024}
}

func (f waitFootprint) minus(base waitFootprint, n int) waitFootprint {
	return waitFootprint{n: n, goroutines: f.goroutines - base.goroutines, rssKB: f.rssKB - base.rssKB, heapKB: f.heapKB - base.heapKB}
}

func (f waitFootprint) String() string {
	per := func(v int64) string { return fmt.Sprintf("%.1f KiB", float64(v)/float64(max(f.n, 1))) }
	return fmt.Sprintf("%d relay goroutines (%.1f per call) · RSS +%d MiB (%s per call) · Go heap+stacks +%d MiB (%s per call)",
		f.goroutines, float64(f.goroutines)/float64(max(f.n, 1)), f.rssKB/1024, per(f.rssKB), f.heapKB/1024, per(f.heapKB))
}

// relayGoroutines counts this process's goroutines but the clients': the
// calls of this file and net/http's client connections.
func relayGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "net/http.(*persistConn)") && !strings.Contains(g, "main.(*bench).tasksBlocking") &&
			!strings.Contains(g, "net/http.(*Transport).dialConnFor") {
			count++
		}
	}
	return count
}

func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// taskHTTP is a raw JSON-RPC client of the 2026-07-28 protocol.
type taskHTTP struct {
	hc  *http.Client
	url string
}

// rpc sends one request; tasks declares the Tasks extension. It returns the
// response's result.
func (c *taskHTTP) rpc(ctx context.Context, token, method string, params map[string]any, tasks bool) (map[string]any, error) {
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "bench", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": caps}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Authorization", "Bearer "+token)
	switch method {
	case "tools/call":
		req.Header.Set("Mcp-Name", "relay_tool")
	case "tasks/get":
		req.Header.Set("Mcp-Name", fmt.Sprint(params["taskId"]))
	}
	hc := *c.hc
	hc.Timeout = 0 // blocking calls wait as long as their context
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if i := bytes.Index(data, []byte("data: {")); i >= 0 && data[0] != '{' {
		data = data[i+len("data: "):]
	}
	var out struct {
		Result map[string]any  `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: decode %q: %w", method, data, err)
	}
	if len(out.Error) > 0 {
		return nil, fmt.Errorf("%s: %s", method, out.Error)
	}
	return out.Result, nil
}

// sendTask sends a waited prompt; with tasks, the task id it got.
func (c *taskHTTP) sendTask(ctx context.Context, token, target string, tasks bool) (string, error) {
	res, err := c.rpc(ctx, token, "tools/call", sendArgs(target, 600), tasks)
	if err != nil {
		return "", err
	}
	if tasks && res["resultType"] != "task" {
		return "", fmt.Errorf("send: no task: %v", res)
	}
	id, _ := res["taskId"].(string)
	return id, nil
}

func (b *bench) tableY(row rowFunc, r tasksResult) {
	row("y", fmt.Sprintf("tasks/get of a working task (queued behind a running turn), one client, %d polls, relay in-process", r.polls),
		fmt.Sprintf("p50 **%s**, p99 %s; per poll: %s", fms(r.pollLat.p50()), fms(r.pollLat.p99()), r.pollCost.String()), "", "")
	row("y", fmt.Sprintf("%d sends waiting at once as MCP Tasks (each answered its CreateTaskResult; the call waits on in the relay)", r.task.n),
		r.task.String(), "", "")
	row("y", fmt.Sprintf("%d blocking sends waiting at once (the POST held open; a relay of its own)", r.blocking.n),
		r.blocking.String(), "", "")
}
