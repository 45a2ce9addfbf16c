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
// text, and stops working when the turn ends. The token is checked as the
// api's /mcp checks a bearer token (SessionForToken), the call made as the
// session it names.
func TestRulesTurnTokenLivesWithItsTurn(t *testing.T) {
	dir := t.TempDir()
	sh := `echo "$RELAY_TOKEN" > ` + filepath.Join(dir, "tok.tmp") + ` && mv ` + filepath.Join(dir, "tok.tmp") + ` ` + filepath.Join(dir, "tok") +
		`; i=0; while [ ! -e ` + filepath.Join(dir, "go") + ` ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo finished`
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		{ID: "sh", Name: "Sh", Type: config.TypeExec, Command: []string{"/bin/sh", "-c", sh}}}})
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
	r3Eventually(t, 10*time.Second, "the turn's token is refused once its turn ended", func() bool {
		_, ok, err := f.r.SessionForToken(f.ctx, tok)
		return err == nil && !ok
	})
	if _, ok, err := f.r.SessionForToken(f.ctx, d.Token); err != nil || !ok {
		t.Fatalf("the session's own token stopped working (%v)", err)
	}
}
