package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// R7.10: update_session's Claude settings reach Claude Code as its own
// environment: the auto-compact window in tokens and thinking turned off;
// a turn without them sets neither (Claude Code's defaults hold).
func TestCLIClaudeSettingsEnv(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	body := `echo "acw=${CLAUDE_CODE_AUTO_COMPACT_WINDOW-unset} think=${MAX_THINKING_TOKENS-unset}" > "$OUT"
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok"}'`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) { c.Env = map[string]string{"OUT": out} })
	read := func() string {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	turn := execTurn(t)
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "acw=unset think=unset" {
		t.Fatalf("a turn without settings: %q", got)
	}
	turn.AutoCompactWindow, turn.Thinking = 200000, "off"
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "acw=200000 think=0" {
		t.Fatalf("window 200000, thinking off: %q", got)
	}
	turn.AutoCompactWindow, turn.Thinking = 0, "on"
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "acw=unset think=unset" {
		t.Fatalf("auto window, thinking on (Claude Code's default): %q", got)
	}
}
