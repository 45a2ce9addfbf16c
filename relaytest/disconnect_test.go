package relaytest

// R18.12: an MCP client that disconnects during send/wait. The cut-off calls
// are raw POST /mcp tools/call requests (protocol 2025-06-18, where the SDK
// does not cancel a tool handler when its client goes away) whose context the
// test cancels while the call waits.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/api"
	"github.com/oar/relay/config"
)

// cutCall is one raw relay_tool call over POST /mcp that the test cuts off.
type cutCall struct {
	cancel  context.CancelFunc
	headers chan struct{} // closed once the response headers came (or the request failed)
	done    chan struct{} // closed once the response is read to its end or the request failed

	// set before headers is closed
	status int
	reqErr error
	// set before done is closed
	body []byte
}

// startCutCall sends relay_tool args as the session of token. With the
// relay's ProgressFirst short, the response headers come once the tool
// handler runs (the keep-alive opens the event stream).
func startCutCall(t *testing.T, client *http.Client, r *Relay, token string, args map[string]any) *cutCall {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": "relay_tool", "arguments": args}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+"/mcp", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+token)
	c := &cutCall{cancel: cancel, headers: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		resp, err := client.Do(req)
		if err != nil {
			c.reqErr = err
			close(c.headers)
			return
		}
		defer resp.Body.Close()
		c.status = resp.StatusCode
		close(c.headers)
		c.body, _ = io.ReadAll(resp.Body) // ends with an error once cut off
	}()
	return c
}

// running waits until the call's response stream is open: its tool handler runs.
func (c *cutCall) running(t *testing.T) {
	t.Helper()
	select {
	case <-c.headers:
	case <-time.After(20 * time.Second):
		t.Fatalf("no response headers within 20 s")
	}
	if c.reqErr != nil {
		t.Fatalf("request: %v", c.reqErr)
	}
	if c.status != http.StatusOK {
		<-c.done
		t.Fatalf("status %d: %s", c.status, c.body)
	}
}

// cut cuts the call off and fails the test if its result had come already.
func (c *cutCall) cut(t *testing.T) {
	t.Helper()
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the cut-off request did not end within 20 s")
	}
	if bytes.Contains(c.body, []byte(`"result"`)) {
		t.Fatalf("the call had its result before it was cut off: %s", c.body)
	}
}

// promptID waits for an agent prompt with text in a session and returns its message id.
func promptID(t *testing.T, r *Relay, sid, text string) string {
	t.Helper()
	var id string
	Eventually(t, ev2Wait, func() bool {
		for _, m := range r.Messages(sid, "agent") {
			if m["text"] == text {
				id = m["id"].(string)
				return true
			}
		}
		return false
	}, "the prompt in %s", sid[:8])
	return id
}

// goroutines counts the goroutines of the test binary, leaving out those of the
// in-process Redis: it serves each connection of the client's pool (which
// grows with concurrent calls and keeps its idle connections) with two.
func goroutines() int {
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
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "miniredis/v2/server.") {
			count++
		}
	}
	return count
}

func newCutClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// R18.12 with R8.18: a send or a wait whose client went away while the turn
// ran does not count as having seen the reply: the turn_end reaches the
// subscribed caller as an event; a send whose result arrived still gets no echo.
func TestDisconnectedWaitIsNotSeen(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = 0 },
		MCP: api.MCPOptions{ProgressFirst: 200 * time.Millisecond}})
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{b.ID}}, true)
	mw := r.Connect(w.Token, nil)
	client := newCutClient(t)

	// 1. A send cut off while the turn runs.
	text := Script(map[string]any{"sleep_ms": 1500}, map[string]any{"reply": "cut send"})
	call := startCutCall(t, client, r, w.Token, map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": text, "wait_seconds": 15})
	call.running(t)
	sendID := promptID(t, r, b.ID, agentLine("watcher", "scripted-1")+"\n"+text) // R18.15
	r.WaitTurn(sendID, ev2Wait, "running")
	call.cut(t)
	if tr := r.WaitTurn(sendID, ev2Wait, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("turn ended %s: %s", tr.Status, tr.Error)
	}
	ev2WaitCount(t, r, w.ID, `turn_end (done) "cut send"`, 1)

	// 2. A wait cut off while the turn runs (the prompt was sent without a wait).
	env := mw.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 1500}, map[string]any{"reply": "cut wait"}), "wait_seconds": 0})
	waitID := env["message_id"].(string)
	call = startCutCall(t, client, r, w.Token, map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": waitID, "wait_seconds": 15})
	call.running(t)
	if tr := r.Turn(waitID); tr.Status != "running" && tr.Status != "queued" {
		t.Fatalf("the turn ended before the wait was cut off: %s", tr.Status)
	}
	call.cut(t)
	r.WaitTurn(waitID, ev2Wait, "done")
	ev2WaitCount(t, r, w.ID, `turn_end (done) "cut wait"`, 1)

	// 3. A send whose result arrived: no echo (R8.18), however the route settles it.
	env = mw.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 300}, map[string]any{"reply": "got it"}), "wait_seconds": 15})
	if env["status"] != "done" {
		t.Fatalf("send: %v", env)
	}
	ev2Done(t, r, b.ID, "marker")
	lines := ev2WaitCount(t, r, w.ID, `"echo: marker"`, 1)
	if n := ev2Count(lines, `"got it"`); n != 0 {
		t.Errorf("the watcher was woken by the turn_end of a reply it received:\n%s", strings.Join(lines, "\n"))
	}
	for _, frag := range []string{`"cut send"`, `"cut wait"`} {
		if n := ev2Count(lines, frag); n != 1 {
			t.Errorf("%d turn_end lines %s, want 1:\n%s", n, frag, strings.Join(lines, "\n"))
		}
	}
	for _, id := range []string{sendID, waitID} {
		if r.Turn(id).Waited {
			t.Errorf("turn %s is marked seen though no result reached its caller", id)
		}
	}
}

// R18.12: the waits of cut-off send/wait calls end when their clients go away,
// not at their deadline: the process's goroutines come back to where they were.
// Not parallel: it counts every goroutine of the test binary.
func TestDisconnectedWaitsLeaveNoGoroutines(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) { c.Limits.AgentPromptsBeforeCard = 1000 },
		MCP: api.MCPOptions{ProgressFirst: 100 * time.Millisecond}})
	a := r.NewSession(map[string]any{"title": "caller"})
	b := r.NewSession(map[string]any{"title": "busy"})
	o := r.NewSession(map[string]any{"title": "onlooker"})
	ma := r.Connect(a.Token, nil)
	env := ma.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 120000}, map[string]any{"reply": "late"}), "wait_seconds": 0})
	mid := env["message_id"].(string)
	r.WaitTurn(mid, ev2Wait, "running")
	client := newCutClient(t)

	baseline := goroutines()
	const each = 8 // a's token runs 2 calls per round: 16, the most one token may run at once (R18.18)
	var calls []*cutCall
	for i := 0; i < each; i++ {
		// the prompt's caller waits (no echo bookkeeping), another session waits, and sends wait on queued prompts
		calls = append(calls,
			startCutCall(t, client, r, a.Token, map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": mid, "wait_seconds": 20}),
			startCutCall(t, client, r, o.Token, map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": mid, "wait_seconds": 20}),
			startCutCall(t, client, r, a.Token, map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "queued", "wait_seconds": 20}))
	}
	for _, c := range calls {
		c.running(t)
	}
	peak := goroutines()
	if peak < baseline+len(calls) {
		t.Fatalf("%d goroutines with %d calls running, %d before: the calls do not run", peak, len(calls), baseline)
	}
	for _, c := range calls {
		c.cut(t)
	}
	client.CloseIdleConnections()
	const margin = 15
	Eventually(t, 8*time.Second, func() bool {
		return goroutines() <= baseline+margin
	}, "the goroutines (%d before %d cut-off calls) to come back within %d", baseline, len(calls), margin)
	t.Logf("goroutines: %d before, %d with the calls running, %d after they were cut off", baseline, peak, goroutines())
	if tr := r.Turn(mid); tr.Status != "running" {
		t.Fatalf("the turn waited on is %s; it must still run", tr.Status)
	}
}
