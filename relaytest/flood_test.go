package relaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/api"
	"github.com/oar/relay/store"
)

// rawMCP posts one JSON-RPC body to /mcp as token, with protocol version
// proto, and returns the status and the JSON-RPC messages of the answer
// (a plain JSON body, an array, or an event stream's data lines).
func rawMCP(c *http.Client, base, token, proto, body string) (int, []map[string]any, string, error) {
	req, err := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", proto)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, "", err
	}
	var msgs []map[string]any
	add := func(b []byte) {
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			return
		}
		if b[0] == '[' {
			var arr []map[string]any
			if json.Unmarshal(b, &arr) == nil {
				msgs = append(msgs, arr...)
			}
			return
		}
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			msgs = append(msgs, m)
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				add([]byte(d))
			}
		}
	} else {
		add(data)
	}
	return resp.StatusCode, msgs, string(data), nil
}

// envelopeOf is the relay_tool envelope of a tools/call answer ("" code: none).
func envelopeOf(m map[string]any) map[string]any {
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	return sc
}

func toolCall(id int, args map[string]any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "relay_tool", "arguments": args}})
	return string(b)
}

// TestOneTokenCannotStarveOthers runs issue 20's attack (item 4) against a
// relay on loopback (R18.18): one session token sends a JSON-RPC batch of
// waits far over the limit (400, nothing run), then many concurrent waits
// (16 run, the rest REMOTE_RELAY_BUSY at once), an oversized header (431),
// then thousands of idle TCP connections (the relay keeps at most
// api.MaxConns of them open, closing the idle ones first); meanwhile another
// session's turn runs to its reply, another token's calls work, and /healthz
// and the owner API answer.
func TestOneTokenCannotStarveOthers(t *testing.T) {
	r := Start(t, Options{})
	attacker := r.NewSession(map[string]any{"title": "attacker"})
	target := r.NewSession(map[string]any{"title": "target"})
	bystander := r.NewSession(map[string]any{"title": "bystander"})
	// The target's turn runs until the test stops it: waits on it block.
	tmid := r.Message(target.ID, Script(stepSleep(120_000), stepReply("late")))
	r.WaitTurn(tmid, 30*time.Second, store.TurnRunning)
	// The unrelated session's turn, running through the whole attack.
	omid := r.Message(bystander.ID, Script(stepSleep(3000), stepReply("the bystander's turn finished")))

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 90 * time.Second}
	waitArgs := map[string]any{"action": "wait", "relay": "this", "session": target.ID, "message_id": tmid, "wait_seconds": 20}

	// 1. A batch of 200 waits: 400 with a JSON-RPC error, nothing run.
	var batch []string
	for i := range 200 {
		batch = append(batch, toolCall(i+1, waitArgs))
	}
	st, msgs, raw, err := rawMCP(client, r.URL, attacker.Token, "2025-03-26", "["+strings.Join(batch, ",")+"]")
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if st != http.StatusBadRequest || len(msgs) != 1 || msgs[0]["error"] == nil || !strings.Contains(raw, "at most 32") {
		t.Fatalf("a batch of 200 waits: status %d, want 400 with one JSON-RPC error naming the limit: %.300s", st, raw)
	}
	// A batch within the limit still works.
	small := "[" + toolCall(1, map[string]any{"action": "relay_info", "relay": "this"}) + "," + toolCall(2, map[string]any{"action": "relay_info", "relay": "this"}) + "]"
	if st, msgs, raw, err := rawMCP(client, r.URL, attacker.Token, "2025-03-26", small); err != nil || st != http.StatusOK || len(msgs) != 2 {
		t.Fatalf("a batch of 2: status %d, %d messages, err %v: %.300s", st, len(msgs), err, raw)
	}

	// 2. 40 concurrent waits with one token: 16 run, 24 are BUSY at once.
	const calls = 40
	type outcome struct {
		env map[string]any
		err error
	}
	results := make(chan outcome, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, msgs, raw, err := rawMCP(client, r.URL, attacker.Token, "2025-06-18", toolCall(i+1, waitArgs))
			if err == nil && (st != http.StatusOK || len(msgs) == 0 || envelopeOf(msgs[len(msgs)-1]) == nil) {
				err = fmt.Errorf("status %d: %.300s", st, raw)
			}
			var env map[string]any
			if err == nil {
				env = envelopeOf(msgs[len(msgs)-1])
			}
			results <- outcome{env, err}
		}()
	}
	busy := 0
	for busy < calls-api.MaxCallsPerToken {
		select {
		case o := <-results:
			if o.err != nil {
				t.Fatalf("a wait: %v", o.err)
			}
			if o.env["code"] != "REMOTE_RELAY_BUSY" {
				t.Fatalf("a wait returned while %d of its token's calls should block on the running turn: %v", api.MaxCallsPerToken, o.env)
			}
			if msg, _ := o.env["error"].(string); !strings.Contains(msg, "Nothing was done") || !strings.Contains(msg, "16") {
				t.Errorf("BUSY's sentence %q: want the limit and that nothing was done", msg)
			}
			busy++
		case <-time.After(60 * time.Second):
			t.Fatalf("only %d of %d waits came back BUSY", busy, calls-api.MaxCallsPerToken)
		}
	}
	// Another token is not starved by the attacker's 16.
	if st, msgs, raw, err := rawMCP(client, r.URL, bystander.Token, "2025-06-18", toolCall(1, map[string]any{"action": "relay_info", "relay": "this"})); err != nil || st != http.StatusOK ||
		len(msgs) == 0 || envelopeOf(msgs[len(msgs)-1])["ok"] != true {
		t.Errorf("another token's call while the attacker's 16 run: status %d, err %v: %.300s", st, err, raw)
	}
	// The 16 that run end when the turn they wait on ends.
	if st := r.Owner("POST", "/api/v1/sessions/"+target.ID+"/stop", nil, nil); st != http.StatusOK && st != http.StatusAccepted {
		t.Fatalf("stop the target: status %d", st)
	}
	wg.Wait()
	close(results)
	ran := 0
	for o := range results {
		if o.err != nil {
			t.Fatalf("a wait: %v", o.err)
		}
		if o.env["code"] == "REMOTE_RELAY_BUSY" {
			t.Errorf("a wait came back BUSY after its token's running calls blocked: more than %d refused", calls-api.MaxCallsPerToken)
			continue
		}
		ran++
	}
	if ran != api.MaxCallsPerToken {
		t.Errorf("%d waits ran, want %d", ran, api.MaxCallsPerToken)
	}

	// 3. An oversized header: 431.
	req, _ := http.NewRequest("GET", r.URL+"/healthz", nil)
	req.Header.Set("X-Pad", strings.Repeat("a", 200<<10))
	if resp, err := client.Do(req); err != nil {
		t.Errorf("an oversized header: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 200 KiB header: status %d, want 431", resp.StatusCode)
		}
	}

	// 4. Thousands of idle connections.
	limit := api.MaxConns()
	n := min(limit+1500, 5000)
	host := strings.TrimPrefix(r.URL, "http://")
	idle := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range idle {
			_ = c.Close()
		}
	}()
	for len(idle) < n {
		c, err := net.DialTimeout("tcp", host, 10*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	// Meanwhile: /healthz, the owner API, and the bystander's turn.
	fresh := func() *http.Client {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	}
	for _, p := range []string{"/healthz", "/api/v1/sessions"} {
		req, _ := http.NewRequest("GET", r.URL+p, nil)
		req.Header.Set("Authorization", "Bearer "+OwnerToken)
		resp, err := fresh().Do(req)
		if err != nil {
			t.Fatalf("GET %s during the flood: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s during the flood: status %d", p, resp.StatusCode)
		}
	}
	if turn := waitEnded(r, omid, 60*time.Second); turn.Status != store.TurnDone || !strings.Contains(turn.Reply, "the bystander's turn finished") {
		t.Errorf("the bystander's turn: %s %q", turn.Status, turn.Reply)
	}
	// The relay closed the idle connections over its bound: they read EOF.
	deadline := time.Now().Add(3 * time.Second)
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(deadline)
	}
	var one [1]byte
	for _, c := range idle {
		_, err := c.Read(one[:])
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed < n-limit {
		t.Errorf("the relay closed %d of %d idle connections: it keeps more than %d open", closed, n, limit)
	}
	t.Logf("%d idle connections, %d closed by the relay (bound %d)", n, closed, limit)
}
