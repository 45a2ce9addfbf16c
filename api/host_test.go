package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/oar/relay/api"
	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// TestHostChecked (R18.24): on a loopback listener every route answers 403
// to a Host that is neither a loopback name nor the public URL's host, so a
// page that rebinds its DNS name to 127.0.0.1 reads nothing; loopback names
// and the host of --public-url keep working, and the go-sdk opt-out
// (MCPOptions.DisableLocalhostProtection) turns the check off everywhere.
func TestHostChecked(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.PublicURL = "https://relay.example.net" }})
	var tok map[string]any
	if st := r.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	peerTok, _ := tok["token"].(string)
	s := r.NewSession(nil)
	port := r.URL[strings.LastIndexByte(r.URL, ':'):]

	routes := []struct {
		method, path, token, body string
	}{
		{"GET", "/api/v1/sessions", relaytest.OwnerToken, ""},
		{"GET", "/", "", ""},
		{"GET", "/static/console.js", "", ""},
		{"GET", "/peer/v1/hello", peerTok, ""},
		{"GET", "/healthz", "", ""},
		{"POST", "/mcp", s.Token, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
	}
	do := func(r *relaytest.Relay, method, path, token, body, host string) (int, string) {
		t.Helper()
		hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
		if token != "" {
			hdr["Authorization"] = "Bearer " + token
		}
		req, err := http.NewRequest(method, r.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Host = host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	for _, rt := range routes {
		for _, host := range []string{"evil.example" + port, "evil.example", "127.0.0.1.evil.example" + port, "localhost.evil.example"} {
			st, body := do(r, rt.method, rt.path, rt.token, rt.body, host)
			if st != http.StatusForbidden || !strings.Contains(body, "REMOTE_RELAY_FORBIDDEN") {
				t.Errorf("%s %s with Host %s: status %d, want 403: %.200s", rt.method, rt.path, host, st, body)
			}
		}
		for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "localhost", "[::1]" + port, "relay.example.net", "Relay.Example.Net:443"} {
			if st, body := do(r, rt.method, rt.path, rt.token, rt.body, host); st != http.StatusOK {
				t.Errorf("%s %s with Host %s: status %d, want 200: %.200s", rt.method, rt.path, host, st, body)
			}
		}
	}
	// A session's data is not read with a forged Host either.
	if st, body := do(r, "GET", "/api/v1/sessions/"+s.ID, relaytest.OwnerToken, "", "rebound.example"+port); st != http.StatusForbidden || strings.Contains(body, s.ID) {
		t.Errorf("GET the session with a forged Host: status %d: %.200s", st, body)
	}

	// The opt-out.
	open := relaytest.Start(t, relaytest.Options{MCP: api.MCPOptions{DisableLocalhostProtection: true}})
	s2 := open.NewSession(nil)
	for _, rt := range routes[:2] {
		if st, body := do(open, rt.method, rt.path, rt.token, rt.body, "proxy.example"); st != http.StatusOK {
			t.Errorf("opt-out: %s %s: status %d: %.200s", rt.method, rt.path, st, body)
		}
	}
	if st, body := do(open, "POST", "/mcp", s2.Token, routes[5].body, "proxy.example"); st != http.StatusOK {
		t.Errorf("opt-out: POST /mcp: status %d: %.200s", st, body)
	}
}
