package domain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// TestRulesTurnTokenLivesWithItsTurn (R18.19), moved down from
// relaytest/tokens_rest_test.go (issue 24 step 3): an agent process gets a
// token of its own for its turn (the session's is stored only as a hash):
// it acts as its session while the turn runs, is never stored in plain
// text, and stops working when the turn ends, in every process once its
// cached copy is older than turnTokenCache (the turn may have ended in
// another process; the cache's life is a step of the work clock here). The
// token is checked as the api's /mcp checks a bearer token
// (SessionForToken), the call made as the session it names.
func TestRulesTurnTokenLivesWithItsTurn(t *testing.T) {
	dir := t.TempDir()
	sh := `echo "$RELAY_TOKEN" > ` + filepath.Join(dir, "tok.tmp") + ` && mv ` + filepath.Join(dir, "tok.tmp") + ` ` + filepath.Join(dir, "tok") +
		`; i=0; while [ ! -e ` + filepath.Join(dir, "go") + ` ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo finished`
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn, work: true}, r2Options{providers: []config.Provider{
		{ID: "sh", Name: "Sh", Type: config.TypeExec, Command: []string{"/bin/sh", "-c", sh}}}})
	other := f.r3Process(fixtureOptions{settings: agentSessionsOn}) // a second process of the same relay
	actAuto(f)
	d, err := f.r.OwnerCreateSession(f.ctx, NewSession{Provider: "sh", Title: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	s := d.ID
	id := f.prompt(s, "go")
	var tok string
	r3Eventually(t, 20*time.Second, "the agent wrote its token", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "tok"))
		tok = strings.TrimSpace(string(b))
		return err == nil && tok != ""
	})
	if tok == d.Token {
		t.Fatalf("the agent was handed the session's own token")
	}
	caller, ok, err := f.r.SessionForToken(f.ctx, tok)
	if err != nil || !ok || caller != s {
		t.Fatalf("the turn token names %q %v %v, want %s", caller, ok, err, s)
	}
	if got, ok, err := other.SessionForToken(f.ctx, tok); err != nil || !ok || got != s { // and caches it
		t.Fatalf("the turn token names %q %v %v in another process, want %s", got, ok, err, s)
	}
	env := f.ok(caller, map[string]any{"action": "list_sessions", "relay": "this"})
	if b, _ := json.Marshal(env); !strings.Contains(string(b), s) {
		t.Fatalf("list_sessions with the turn token: %v", env)
	}
	if got := f.r3PlainIn(tok, d.Token); len(got) > 0 {
		t.Fatalf("plain tokens stored in %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if tr := f.actTurn(id); tr.Status != store.TurnDone {
		t.Fatalf("turn: %s %q", tr.Status, tr.Error)
	}
	// The token is revoked once the turn's outcome is written (the drain's
	// deferred drop); read from the store, as no process caches it.
	r3Eventually(t, 10*time.Second, "the turn's token is revoked once its turn ended", func() bool {
		sid, err := f.st.SessionByToken(f.ctx, tok)
		return err == nil && sid == ""
	})
	f.work.Advance(turnTokenCache)
	for _, r := range []*Relay{f.r, other} {
		if _, ok, err := r.SessionForToken(f.ctx, tok); err != nil || ok {
			t.Fatalf("the turn's token is still taken on %s %s after its turn ended (%v)", r.WorkerID(), turnTokenCache, err)
		}
	}
	if _, ok, err := f.r.SessionForToken(f.ctx, d.Token); err != nil || !ok {
		t.Fatalf("the session's own token stopped working (%v)", err)
	}
}
