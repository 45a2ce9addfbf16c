package api_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/relaytest"
)

// TestWrongTokensNeverLockOutValid reproduces issue 33's lock-out (R18.30):
// one address (an agent on the relay's machine) sends 42 wrong tokens — to
// /mcp, the owner API and the console's sign-in, half of them one stale token
// again and again — and is slowed (429) for them; right after, from the same
// address, the owner token, the agent's own session token, another session's
// token, a peer token and the owner's sign-in are all served at once. The
// stale token is refused by its prefix from another address too, while a fresh
// wrong token there is a plain 401. An address with more than 20 failed
// sign-ins has its sign-in refused before the form is read (R18.29) — and its
// owner token and session tokens still served.
func TestWrongTokensNeverLockOutValid(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	agent := r.NewSession(map[string]any{"title": "agent"})
	other := r.NewSession(map[string]any{"title": "other"})
	var tok map[string]any
	if st := r.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	peerTok, _ := tok["token"].(string)

	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{
			Transport:     &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) }},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       30 * time.Second,
		}
	}
	type answer struct {
		status int
		took   time.Duration
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_tool","arguments":{"action":"relay_info","relay":"this"}}}`
	do := func(c *http.Client, route, token string) answer {
		t.Helper()
		var req *http.Request
		var err error
		switch route {
		case "owner":
			req, err = http.NewRequest("GET", r.URL+"/api/v1/settings", nil)
		case "mcp":
			req, err = http.NewRequest("POST", r.URL+"/mcp", strings.NewReader(call))
		case "peer":
			req, err = http.NewRequest("GET", r.URL+"/peer/v1/hello", nil)
		case "signin":
			req, err = http.NewRequest("POST", r.URL+"/signin", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
		}
		if err != nil {
			t.Fatal(err)
		}
		if route == "signin" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", r.URL)
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		_ = resp.Body.Close()
		return answer{resp.StatusCode, time.Since(start)}
	}
	agentAddr := from("127.0.0.1")
	const stale = "rtt_0123456789abcdef-stale-turn-token"
	routes := []string{"mcp", "owner", "signin"}
	slowed := 0
	for i := range 42 {
		wrong := stale
		if i%2 == 1 {
			wrong = "wrong-token-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		}
		if a := do(agentAddr, routes[i%3], wrong); a.status == http.StatusTooManyRequests {
			slowed++
		}
	}
	if slowed == 0 {
		t.Fatalf("42 wrong tokens from one address: none slowed (429)")
	}
	// The same address's correct tokens: served at once.
	served := func(c *http.Client, who string) {
		t.Helper()
		for _, v := range []struct{ route, token string }{
			{"owner", relaytest.OwnerToken}, {"mcp", agent.Token}, {"mcp", other.Token}, {"peer", peerTok},
		} {
			want := http.StatusOK
			if a := do(c, v.route, v.token); a.status != want || a.took > 5*time.Second {
				t.Errorf("%s: a correct token on %s: status %d after %v; want %d at once", who, v.route, a.status, a.took, want)
			}
		}
	}
	served(agentAddr, "the address that sent 42 wrong tokens")
	if a := do(agentAddr, "signin", relaytest.OwnerToken); a.status != http.StatusSeeOther || a.took > 5*time.Second {
		t.Errorf("the owner's sign-in from that address: status %d after %v; want 303 at once", a.status, a.took)
	}
	// Its wrong tokens are still slowed, and the stale one by its prefix from anywhere.
	if a := do(agentAddr, "mcp", "yet-another-wrong-token"); a.status != http.StatusTooManyRequests {
		t.Errorf("a wrong token from the slowed address: status %d, want 429", a.status)
	}
	elsewhere := from("127.0.0.2")
	if a := do(elsewhere, "mcp", stale+"-again"); a.status != http.StatusTooManyRequests {
		t.Errorf("the stale token's prefix from another address: status %d, want 429", a.status)
	}
	if a := do(elsewhere, "mcp", "a-fresh-wrong-token"); a.status != http.StatusUnauthorized {
		t.Errorf("a fresh wrong token from another address: status %d, want 401", a.status)
	}

	// 21 failed sign-ins from a third address: its sign-in is refused before
	// the form is read; its correct tokens are served.
	signer := from("127.0.0.3")
	for i := range 21 {
		do(signer, "signin", "signin-guess-"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	if a := do(signer, "signin", relaytest.OwnerToken); a.status != http.StatusTooManyRequests {
		t.Errorf("a sign-in after 21 failed ones from its address: status %d, want 429", a.status)
	}
	served(signer, "the address that failed 21 sign-ins")

	// The sign-in checks the origin and its count before it reads the form
	// (R18.29): a trickled form from a refused address, or from another
	// origin, is answered at once, its body unread.
	host := strings.TrimPrefix(r.URL, "http://")
	stop := make(chan struct{})
	time.AfterFunc(8*time.Second, func() { close(stop) })
	for _, v := range []struct {
		from, origin string
		want         int
	}{{"127.0.0.3", r.URL, http.StatusTooManyRequests}, {"127.0.0.4", "http://evil.example", http.StatusForbidden}} {
		head := "POST /signin HTTP/1.1\r\nHost: " + host + "\r\nOrigin: " + v.origin +
			"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\ntoken="
		held, st, err := slowRequestFrom(v.from, host, head, stop)
		if err != nil || st != v.want || held > 5*time.Second {
			t.Errorf("a trickled sign-in from %s (Origin %s): status %d after %v (err %v); want %d at once, the form unread", v.from, v.origin, st, held, err, v.want)
		}
	}
}
