package relaytest

import (
	"net/http"
	"testing"
)

// R23.5: POST /api/v1/sessions/{id}/token gives an external session a new
// token; the old one is refused at once, in this process and in another
// serve process on the same Redis that had it cached (R18.2, R18.19).
func TestExternalNewToken(t *testing.T) {
	t.Parallel()
	a := Start(t, Options{})
	var b *Relay
	if !EmbeddedMode() {
		b = Start(t, Options{Redis: a.Redis})
	}
	ext := a.NewSession(map[string]any{"provider": "external", "title": "my terminal"})
	if ext.Token == "" {
		t.Fatal("POST /sessions with provider external answered no token")
	}
	for _, r := range []*Relay{a, b} {
		if r != nil && rawMCPStatus(t, r.URL, ext.Token) != http.StatusOK { // cached now
			t.Fatalf("the external session's first token is refused on %s", r.URL)
		}
	}
	var out map[string]any
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/token", nil, &out); st != http.StatusOK {
		t.Fatalf("new token: %d %v", st, out)
	}
	tok, _ := out["token"].(string)
	if tok == "" || tok == ext.Token || out["session"] != ext.ID {
		t.Fatalf("new token answer: %v", out)
	}
	for _, r := range []*Relay{a, b} {
		if r == nil {
			continue
		}
		if st := rawMCPStatus(t, r.URL, ext.Token); st != http.StatusUnauthorized {
			t.Fatalf("the old token after a new one on %s: %d, want 401", r.URL, st)
		}
		if st := rawMCPStatus(t, r.URL, tok); st != http.StatusOK {
			t.Fatalf("the new token on %s: %d, want 200", r.URL, st)
		}
	}
	a.Connect(tok, nil).MustOK(map[string]any{"action": "list_relays"})

	// Not an external session: a clear error, nothing changed.
	plain := a.NewSession(map[string]any{"title": "scripted"})
	out = nil
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+plain.ID+"/token", nil, &out); st != http.StatusBadRequest ||
		out["code"] != "REMOTE_RELAY_UNSUPPORTED" {
		t.Fatalf("new token of a scripted session: %d %v", st, out)
	}
	wantHas(t, "error", out["error"], "is not an external session")
	if rawMCPStatus(t, a.URL, plain.Token) != http.StatusOK {
		t.Fatal("the refused request changed the scripted session's token")
	}
	// Archived: its token was revoked; no new one.
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/archive", nil, nil); st != http.StatusOK {
		t.Fatalf("archive: %d", st)
	}
	out = nil
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/token", nil, &out); st != http.StatusBadRequest {
		t.Fatalf("new token of an archived session: %d %v", st, out)
	}
	if st := rawMCPStatus(t, a.URL, tok); st != http.StatusUnauthorized {
		t.Fatalf("the archived session's token: %d, want 401", st)
	}
}
