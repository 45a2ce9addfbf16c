package relaytest

import (
	"net/http"
	"testing"

	"github.com/oar/relay/config"
)

// sessionIDs are the ids of a list_sessions result.
func sessionIDs(env map[string]any) map[string]bool {
	out := map[string]bool{}
	list, _ := env["sessions"].([]any)
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			id, _ := m["id"].(string)
			out[id] = true
		}
	}
	return out
}

// TestPeerTokenScopeStarted (R18.35), over HTTP: a peer token made with
// scope "started" reaches only the sessions its relay's agents started or
// prompted: the owner's own session is not listed, not readable and cannot
// be prompted (not found, as if it were not there), "all" cannot be watched;
// the session its agent started is listed and read. A token of the default
// scope still reads the owner's session. The listing shows each token's scope.
func TestPeerTokenScopeStarted(t *testing.T) {
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	own := b.NewSession(map[string]any{"title": "the owner's own"})

	var issued map[string]any
	if st := b.Owner("POST", "/api/v1/peer-tokens", map[string]any{"label": "alpha", "scope": "started"}, &issued); st != http.StatusCreated || issued["scope"] != "started" {
		t.Fatalf("scoped peer token: %d %v", st, issued)
	}
	scoped, scopedID := issued["token"].(string), issued["id"].(string)
	wide, wideID := newPeerToken(t, b)
	var bad map[string]any
	if st := b.Owner("POST", "/api/v1/peer-tokens", map[string]any{"scope": "everything"}, &bad); st != http.StatusBadRequest || bad["code"] != "REMOTE_RELAY_INVALID_INPUT" {
		t.Errorf("a peer token of an unknown scope: %d %v", st, bad)
	}
	var listed struct {
		PeerTokens []map[string]any `json:"peerTokens"`
	}
	if st := b.Owner("GET", "/api/v1/peer-tokens", nil, &listed); st != http.StatusOK {
		t.Fatalf("peer tokens: %d", st)
	}
	scopes := map[string]any{}
	for _, x := range listed.PeerTokens {
		scopes[x["id"].(string)] = x["scope"]
	}
	if scopes[scopedID] != "started" || scopes[wideID] != "all" {
		t.Errorf("the listing's scopes: %v (scoped %s, default %s)", scopes, scopedID, wideID)
	}

	// The scoped token: the owner's session is not there.
	if env := peerCall(t, b, scoped, "alpha", "s1", "list_sessions", map[string]any{"scope": "all"}); prCode(env) != "ok" || sessionIDs(env)[own.ID] {
		t.Errorf("list_sessions with a started-scoped token shows the owner's session: %v", env)
	}
	for _, action := range []string{"read_session", "send", "wait", "stop", "archive"} {
		args := map[string]any{"session": own.ID}
		if action == "send" {
			args["text"] = "hello"
		}
		if env := peerCall(t, b, scoped, "alpha", "s1", action, args); prCode(env) != "REMOTE_RELAY_NOT_FOUND" {
			t.Errorf("%s of the owner's session with a started-scoped token: %v", action, env)
		}
	}
	if env := peerCall(t, b, scoped, "alpha", "s1", "subscribe", map[string]any{"sessions": []string{"all"}}); prCode(env) != "REMOTE_RELAY_FORBIDDEN" {
		t.Errorf("subscribe all with a started-scoped token: %v", env)
	}
	if env := peerCall(t, b, scoped, "alpha", "s1", "subscribe", map[string]any{"sessions": []string{own.ID}}); prCode(env) != "REMOTE_RELAY_NOT_FOUND" {
		t.Errorf("subscribe to the owner's session with a started-scoped token: %v", env)
	}

	// A session alpha's agent starts there is its own.
	env := peerCall(t, b, scoped, "alpha", "s1", "create_session", map[string]any{"title": "alpha's", "text": "hello", "wait_seconds": 0})
	if prCode(env) != "ok" {
		t.Fatalf("create_session with a started-scoped token: %v", env)
	}
	started, _ := env["session"].(string)
	if started == "" {
		t.Fatalf("create_session names no session: %v", env)
	}
	if env := peerCall(t, b, scoped, "alpha", "s1", "read_session", map[string]any{"session": started}); prCode(env) != "ok" {
		t.Errorf("read_session of the session alpha started: %v", env)
	}
	if env := peerCall(t, b, scoped, "alpha", "s2", "list_sessions", map[string]any{"scope": "all"}); prCode(env) != "ok" || !sessionIDs(env)[started] || sessionIDs(env)[own.ID] {
		t.Errorf("list_sessions with a started-scoped token: %v", env)
	}

	// The default scope is the seed's: the owner's session is readable.
	if env := peerCall(t, b, wide, "charlie", "s1", "read_session", map[string]any{"session": own.ID}); prCode(env) != "ok" {
		t.Errorf("read_session of the owner's session with a default peer token: %v", env)
	}
	if env := peerCall(t, b, wide, "charlie", "s1", "list_sessions", map[string]any{"scope": "all"}); !sessionIDs(env)[own.ID] {
		t.Errorf("list_sessions with a default peer token lacks the owner's session: %v", env)
	}
}
