package relaytest

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// activityTexts are the texts of a session's 🛰️/activity lines, oldest first.
func activityTexts(r *Relay, sid string) []string {
	var out []string
	for _, m := range r.Messages(sid, "activity") {
		out = append(out, str(m["text"]))
	}
	return out
}

// Issue 21 item 9 (R17.3, R19.3; the seed's "Der Tool-Aufruf in der
// Antwort"): every relay_tool call a session makes during its turn gets one
// 🛰️ line — the relay writes it, whatever the provider: here the ones whose
// calls come over the wire, exec (over /mcp) and openai (the scripted and
// external sessions' lines, and none outside a turn, are
// domain.TestRulesTaskActivityLineOfEveryCall; the agent CLIs and ACP
// agents: TestAgentCLIs*, TestACP* check their one line).
func TestSeedRelayWritesTheActivityLineOfEveryCall(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed for the exec callback: %v", err)
	}
	dir := t.TempDir()
	cb := filepath.Join(dir, "callback.sh")
	if err := os.WriteFile(cb, []byte(execCallbackScript), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := &llmFake{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "cb", Name: "Callback", Type: config.TypeExec, Command: []string{"/bin/sh", cb}, Models: []string{"cb-1"}},
			config.Provider{ID: "local", Name: "Local", Type: config.TypeOpenAI, BaseURL: srv.URL + "/v1", Models: []string{"llama-test"}})
	}})
	// exec: the command calls relay_tool over /mcp with the session's token.
	e := r.NewSession(map[string]any{"provider": "cb", "title": "exec"})
	if tr := r.WaitTurn(r.Message(e.ID, "list them"), 30*time.Second, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("exec turn ended %s: %s", tr.Status, tr.Error)
	}
	wantEq(t, "exec lines", activityTexts(r, e.ID), []string{"🛰️ list_sessions → desk"})

	// openai: the model's tool call.
	o := r.NewSession(map[string]any{"provider": "local", "title": "llm"})
	if tr := r.WaitTurn(r.Message(o.ID, "Which sessions are there?"), 30*time.Second, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("openai turn ended %s: %s", tr.Status, tr.Error)
	}
	wantEq(t, "openai lines", activityTexts(r, o.ID), []string{"🛰️ list_sessions → desk"})
}

// TestSeedClaudeSettingsReachTheTurn (issue 21 item 10, R7.10): a Claude
// session's auto_compact_window and thinking_* take effect on its next turn:
// an exec provider marked claude gets them as RELAY_AUTO_COMPACT_WINDOW,
// RELAY_THINKING and RELAY_THINKING_DISPLAY; a DeepSeek-style provider gets
// the window (its "auto" as 400,000 tokens) and no thinking; any other
// provider gets none of them.
func TestSeedClaudeSettingsReachTheTurn(t *testing.T) {
	show := []string{"/bin/sh", "-c", `echo "acw=$RELAY_AUTO_COMPACT_WINDOW think=$RELAY_THINKING disp=$RELAY_THINKING_DISPLAY"`}
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "claude-api", Name: "Claude API", Type: config.TypeExec, Command: show, Models: []string{"m1"}, Claude: true},
			config.Provider{ID: "deepseek", Name: "DeepSeek", Type: config.TypeExec, Command: show, Models: []string{"m1"},
				CompactWindowZero: 400000, AlwaysThinks: true},
			config.Provider{ID: "plain", Name: "Plain", Type: config.TypeExec, Command: show, Models: []string{"m1"}})
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	// The conversation's first create_session asks the owner once.
	first, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, "allow")
	mustEnvOK(t, first)
	for _, c := range []struct {
		prov, before, after string
	}{
		{"claude-api", "acw= think= disp=", "acw=200000 think=off disp=summarized"},
		{"deepseek", "acw=400000 think= disp=", "acw=200000 think= disp="},
		{"plain", "acw= think= disp=", "acw= think= disp="},
	} {
		// Started by this conversation, so update_session needs no card.
		env := m.MustOK(map[string]any{"action": "create_session", "relay": "this", "text": "one", "provider": c.prov, "wait_seconds": 15})
		if env["status"] != "done" || obj(t, env["reply"], "reply")["text"] != c.before {
			t.Errorf("%s before update_session: %v, want reply %q", c.prov, env, c.before)
		}
		sid := str(env["session"])
		m.MustOK(map[string]any{"action": "update_session", "relay": "this", "session": sid,
			"auto_compact_window": 200000, "thinking_enabled": "off", "thinking_display": "summarized"})
		if turn := r.WaitTurn(r.Message(sid, "two"), 30*time.Second, "done", "error"); turn.Reply != c.after {
			t.Errorf("%s after update_session: reply %q (%s), want %q", c.prov, turn.Reply, turn.Error, c.after)
		}
	}
}
