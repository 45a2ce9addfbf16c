package relaytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// R17.5 through the relay: a CLI silent for timing.agent_silence is
// stopped and its turn ends with an error that says so (a fake CLI script).
func TestAgentSilenceWatchdog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cli := filepath.Join(dir, "claude")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\necho '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"x\"}'\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Timing.AgentSilence = time.Second
		c.Providers = append(c.Providers, config.Provider{ID: "quiet", Type: config.TypeClaudeCode, Command: []string{cli}})
	}})
	s := r.NewSession(map[string]any{"title": "quiet", "provider": "quiet"})
	start := time.Now()
	turn := r.WaitTurn(r.Message(s.ID, "hello"), 20*time.Second, "done", "error", "stopped")
	if turn.Status != "error" || !strings.Contains(turn.Error, "printed nothing for 1s") {
		t.Fatalf("turn %s: %q", turn.Status, turn.Error)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the silent CLI was stopped after %s", d)
	}
}

// R17.3, R7.3: a usage-limit event ends the turn with its reason and shows
// the provider paused in usage; the next done turn ends the pause. Tokens
// and the CLI's cost of a done turn are counted (a fake CLI script).
func TestAgentUsageLimitPauses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cli := filepath.Join(dir, "claude")
	script := `#!/bin/sh
for a in "$@"; do last="$a"; done
case "$last" in
*limit*)
  echo '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"five_hour","resetsAt":1900000000}}'
  echo '{"type":"result","subtype":"success","is_error":true,"result":"Claude AI usage limit reached|1900000000"}'
  exit 1;;
esac
echo '{"type":"result","subtype":"success","is_error":false,"result":"fine","total_cost_usd":0.5,"usage":{"input_tokens":100,"output_tokens":10}}'
`
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "cc", Type: config.TypeClaudeCode, Command: []string{cli}})
	}})
	s := r.NewSession(map[string]any{"title": "limited", "provider": "cc"})
	m := r.Connect(r.NewSession(map[string]any{"title": "orch"}).Token, nil)
	usageOf := func() map[string]any {
		env := m.MustOK(map[string]any{"action": "usage", "relay": "this"})
		for _, p := range list(t, env["providers"], "providers") {
			if pm := p.(map[string]any); pm["id"] == "cc" {
				return pm
			}
		}
		t.Fatal("no usage entry for cc")
		return nil
	}
	turn := r.WaitTurn(r.Message(s.ID, "hit the limit"), 20*time.Second, "done", "error", "stopped")
	if turn.Status != "error" || !strings.Contains(turn.Error, "usage or rate limit") || !strings.Contains(turn.Error, "five_hour") {
		t.Fatalf("turn %s: %q", turn.Status, turn.Error)
	}
	u := usageOf()
	if u["paused"] != true || u["status"] != "paused" || !strings.Contains(str(u["pausedReason"]), "five_hour") {
		t.Fatalf("usage after the limit: %v", u)
	}
	turn = r.WaitTurn(r.Message(s.ID, "go on"), 20*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || turn.Reply != "fine" {
		t.Fatalf("turn %s %q: %q", turn.Status, turn.Reply, turn.Error)
	}
	u = usageOf()
	counted := u["counted"].(map[string]any)
	if u["paused"] != false || u["status"] != "ok" || counted["turns"] != float64(1) || counted["inputTokens"] != float64(100) ||
		counted["outputTokens"] != float64(10) || counted["costUSD"] != 0.5 {
		t.Fatalf("usage after a done turn: %v", u)
	}
}
