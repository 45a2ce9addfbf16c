package relaytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// peerReq sends a /peer/v1 request with a peer token; out gets the JSON answer.
func peerReq(t *testing.T, r *Relay, tok, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

// peerCall is POST /peer/v1/call as relay's conversation session.
func peerCall(t *testing.T, r *Relay, tok, relay, session, action string, args map[string]any) map[string]any {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	var env map[string]any
	st := peerReq(t, r, tok, "POST", "/peer/v1/call", map[string]any{"action": action, "args": args,
		"origin": map[string]any{"relay": relay, "session": session, "title": "t", "model": "m", "path": []string{relay}}}, &env)
	if st != http.StatusOK {
		t.Fatalf("peer call %s as %s: %d %v", action, relay, st, env)
	}
	return env
}

func newPeerToken(t testing.TB, r *Relay) (tok, id string) {
	t.Helper()
	var out map[string]any
	if st := r.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &out); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, out)
	}
	id, _ = out["id"].(string)
	return out["token"].(string), id
}

// R18.20: a relay name bound to one peer token cannot be claimed by another,
// nor this relay's own name by any; peer tokens are listed without the token
// and revoked at once in every process of the relay.
func TestPeerTokensBindListRevoke(t *testing.T) {
	NeedsSharedRedis(t, "two processes of one relay")
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	b2 := Start(t, Options{Redis: b.Redis, Config: func(c *config.Config) { c.Name = "bravo" }})
	tok1, id1 := newPeerToken(t, b)
	tok2, _ := newPeerToken(t, b)

	if env := peerCall(t, b, tok1, "alpha", "s1", "list_sessions", nil); prCode(env) != "ok" {
		t.Fatalf("first call binds alpha: %v", env)
	}
	if env := peerCall(t, b, tok2, "alpha", "s9", "list_sessions", nil); prCode(env) != "REMOTE_RELAY_AUTH" {
		t.Fatalf("a second token claims alpha's name: %v", env)
	}
	if env := peerCall(t, b, tok2, "Alpha", "s9", "list_sessions", nil); prCode(env) != "REMOTE_RELAY_AUTH" {
		t.Fatalf("a second token claims alpha's name in other case: %v", env)
	}
	if env := peerCall(t, b, tok2, "bravo", "s9", "list_sessions", nil); prCode(env) != "REMOTE_RELAY_AUTH" {
		t.Fatalf("a peer claims this relay's own name: %v", env)
	}

	var list struct {
		PeerTokens []map[string]any `json:"peerTokens"`
	}
	var raw json.RawMessage
	if st := b.Owner("GET", "/api/v1/peer-tokens", nil, &raw); st != http.StatusOK {
		t.Fatalf("list: %d %s", st, raw)
	}
	if strings.Contains(string(raw), tok1) || strings.Contains(string(raw), tok2) {
		t.Fatalf("the list shows a token: %s", raw)
	}
	_ = json.Unmarshal(raw, &list)
	if len(list.PeerTokens) != 2 {
		t.Fatalf("list: %s", raw)
	}
	var first map[string]any
	for _, pt := range list.PeerTokens {
		if pt["id"] == id1 {
			first = pt
		}
	}
	if first == nil || first["relay"] != "alpha" || first["createdAt"] == nil || first["lastUsedAt"] == nil || strings.HasPrefix(first["lastUsedAt"].(string), "0001") {
		t.Fatalf("token 1 in the list: %v (%s)", first, raw)
	}

	// Both processes know tok1 (cached), then the owner revokes it in one.
	for _, r := range []*Relay{b, b2} {
		if st := peerReq(t, r, tok1, "GET", "/peer/v1/hello", nil, nil); st != http.StatusOK {
			t.Fatalf("hello before revoking: %d", st)
		}
	}
	var rev map[string]any
	if st := b.Owner("DELETE", "/api/v1/peer-tokens/"+id1, nil, &rev); st != http.StatusOK {
		t.Fatalf("revoke: %d %v", st, rev)
	}
	if st := peerReq(t, b, tok1, "GET", "/peer/v1/hello", nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("revoked token in the process that revoked it: %d", st)
	}
	Eventually(t, 5*time.Second, func() bool { return peerReq(t, b2, tok1, "GET", "/peer/v1/hello", nil, nil) == http.StatusUnauthorized },
		"the revoked token is refused by the relay's other process")
	if st := b.Owner("DELETE", "/api/v1/peer-tokens/"+id1, nil, &rev); st != http.StatusNotFound {
		t.Fatalf("revoke again: %d %v", st, rev)
	}
	// The name is free again for the token the owner gives alpha next.
	if env := peerCall(t, b, tok2, "alpha", "s9", "list_sessions", nil); prCode(env) != "ok" {
		t.Fatalf("a new token for alpha after the old one was revoked: %v", env)
	}
}

// R18.20: a /peer/v1/events long-poll open when its token is revoked ends
// at once with 401, in the process that revoked it and in another.
func TestPeerTokenRevokeEndsOpenPoll(t *testing.T) {
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	polls := []*Relay{b}
	if !EmbeddedMode() { // and in another process of the relay
		polls = append(polls, Start(t, Options{Redis: b.Redis, Config: func(c *config.Config) { c.Name = "bravo" }}))
	}
	watched := b.NewSession(map[string]any{"title": "watched"})
	for i, p := range polls {
		tok, id := newPeerToken(t, b)
		conv := fmt.Sprintf("conv-%d", i)
		env := peerCall(t, b, tok, "alpha", conv, "subscribe", map[string]any{"sessions": []string{watched.ID}})
		if prCode(env) != "ok" {
			t.Fatalf("subscribe: %v", env)
		}
		sub, _ := env["subscription"].(map[string]any)["id"].(string)
		var first map[string]any
		if st := peerReq(t, p, tok, "GET", "/peer/v1/events?subscription="+sub, nil, &first); st != http.StatusOK {
			t.Fatalf("first poll: %d %v", st, first)
		}
		cursor, _ := first["cursor"].(string)
		// The poll reads its subscription as it starts and again each round it
		// waits (after checking its token): a second read is an open poll.
		reads := &keyReads{}
		p.App.Redis().AddHook(reads)
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("GET", p.URL+"/peer/v1/events?subscription="+sub+"&after="+cursor+"&wait=20", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		Eventually(t, 10*time.Second, func() bool {
			select {
			case st := <-done:
				done <- st // the check below tells
				return true
			default:
			}
			return reads.of(":sub:"+sub) >= 2
		}, "process %d: the poll to wait", i)
		select {
		case st := <-done: // … unless it was answered already: then the revoke below proves nothing
			t.Fatalf("process %d: the poll ended before the revoke: %d", i, st)
		default:
		}
		var rev map[string]any
		if st := b.Owner("DELETE", "/api/v1/peer-tokens/"+id, nil, &rev); st != http.StatusOK {
			t.Fatalf("revoke: %d %v", st, rev)
		}
		select {
		case st := <-done:
			if st != http.StatusUnauthorized {
				t.Fatalf("process %d: the open poll ended with %d, want 401", i, st)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("process %d: the open poll still runs 2 s after its token was revoked", i)
		}
	}
}
