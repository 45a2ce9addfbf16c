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

	"github.com/oar/relay/clock"
	"github.com/oar/relay/relaytest"
)

// TestFailedTokensSlowed (R18.23): more than 20 failed tokens from one
// address within the window (a minute; here the relay's clock runs 6× faster,
// so 10 s) — on /api/v1, /mcp, /peer/v1 and the console's sign-in together —
// answer 429 with Retry-After for that address, also to a correct token,
// while another address is not refused; once the window is over a correct
// token works again. X-Forwarded-For changes nothing: the address is the TCP
// peer's.
func TestFailedTokensSlowed(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{Clock: clock.NewScaled(time.Now(), 6)})
	var tok map[string]any
	if st := r.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	peerTok, _ := tok["token"].(string)
	sess := r.NewSession(nil)

	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{
			Transport:     &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) }},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       30 * time.Second,
		}
	}
	main, other := from("127.0.0.1"), from("127.0.0.2")
	n := 0
	type try struct{ name, method, path, token, body string }
	tries := func(token string) []try {
		mcpBody := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
		pt, st, ot := peerTok, sess.Token, relaytest.OwnerToken
		if token != "" {
			pt, st, ot = token, token, token
		}
		return []try{
			{"owner API", "GET", "/api/v1/settings", ot, ""},
			{"mcp", "POST", "/mcp", st, mcpBody},
			{"peer", "GET", "/peer/v1/hello", pt, ""},
			{"sign-in", "POST", "/signin", "", url.Values{"token": {ot}, "next": {"/"}}.Encode()},
		}
	}
	// answer is what a test reads of a response (its body already closed).
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	do := func(c *http.Client, tr try) answer {
		t.Helper()
		req, err := http.NewRequest(tr.method, r.URL+tr.path, strings.NewReader(tr.body))
		if err != nil {
			t.Fatal(err)
		}
		n++
		req.Header.Set("X-Forwarded-For", "10.9.8."+strconv.Itoa(n%250))
		if tr.token != "" {
			req.Header.Set("Authorization", "Bearer "+tr.token)
		}
		if tr.name == "sign-in" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", r.URL)
		} else {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tr.name, err)
		}
		_ = resp.Body.Close()
		return answer{StatusCode: resp.StatusCode, Header: resp.Header}
	}
	okStatus := map[string]int{"owner API": 200, "mcp": 200, "peer": 200, "sign-in": http.StatusSeeOther}

	// 20 failed tokens, 5 on each route: refused as wrong, not yet slowed.
	bad := tries("wrong-token-0123456789")
	for i := range 20 {
		tr := bad[i%4]
		resp := do(main, tr)
		want := http.StatusUnauthorized
		if tr.name == "sign-in" {
			want = http.StatusOK // the sign-in page again, with its error
		}
		if resp.StatusCode != want {
			t.Fatalf("failure %d (%s): status %d, want %d", i+1, tr.name, resp.StatusCode, want)
		}
	}
	// The 21st: 429.
	if resp := do(main, bad[0]); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the 21st failed token: status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Now every route refuses this address, correct tokens too.
	for _, tr := range tries("") {
		resp := do(main, tr)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || ra < 1 || ra > 10 {
			t.Errorf("%s with a correct token while slowed: status %d, Retry-After %q; want 429 and at most the window", tr.name, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// Another address is not refused.
	for _, tr := range tries("") {
		if resp := do(other, tr); resp.StatusCode != okStatus[tr.name] {
			t.Errorf("%s from another address: status %d, want %d", tr.name, resp.StatusCode, okStatus[tr.name])
		}
	}
	// Once the window is over, correct tokens work again.
	relaytest.Eventually(t, 40*time.Second, func() bool { return do(main, tries("")[0]).StatusCode == http.StatusOK },
		"the owner token still refused after the window")
	for _, tr := range tries("") {
		if resp := do(main, tr); resp.StatusCode != okStatus[tr.name] {
			t.Errorf("%s after the window: status %d, want %d", tr.name, resp.StatusCode, okStatus[tr.name])
		}
	}
}
