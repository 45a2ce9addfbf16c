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

// TestFailedTokensSlowed (R18.23, R18.30): more than 20 failed tokens from
// one address within the window (a minute; here the relay's clock runs 6×
// faster, so 10 s) — on /api/v1, /mcp, /peer/v1 and the console's sign-in
// together — answer that address's wrong tokens 429 with Retry-After, while
// its correct tokens are served and another address's wrong tokens are
// refused as wrong (401); once the window is over its wrong tokens are 401
// again. X-Forwarded-For changes nothing: the address is the TCP peer's.
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
	// Now every route refuses this address's wrong tokens (R18.30: only them).
	for _, tr := range tries("another-wrong-token-9876543210") {
		resp := do(main, tr)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || ra < 1 || ra > 10 {
			t.Errorf("%s with a wrong token while slowed: status %d, Retry-After %q; want 429 and at most the window", tr.name, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// Correct tokens from this address are served (R18.30), and so is every token from another.
	for who, c := range map[string]*http.Client{"the slowed address": main, "another address": other} {
		for _, tr := range tries("") {
			if resp := do(c, tr); resp.StatusCode != okStatus[tr.name] {
				t.Errorf("%s with a correct token from %s: status %d, want %d", tr.name, who, resp.StatusCode, okStatus[tr.name])
			}
		}
	}
	// A fresh wrong token from another address is not slowed: 401.
	if resp := do(other, tries("fresh-wrong-token-from-elsewhere")[0]); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token from another address: status %d, want 401", resp.StatusCode)
	}
	// Once the window is over, a wrong token is refused as wrong again (401), not slowed.
	relaytest.Eventually(t, 40*time.Second, func() bool {
		return do(main, tries("after-window-token-0000")[0]).StatusCode == http.StatusUnauthorized
	},
		"wrong tokens still slowed after the window")
}
