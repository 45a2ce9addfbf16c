package config

import (
	"strings"
	"testing"
)

// Issue 21 item 10 (R7.10): a provider says whether its sessions are Claude
// sessions (claude, exec and openai only) and may declare its own window
// semantics (compact_window_zero, always_thinks: a DeepSeek endpoint).
func TestLoadSessionSettingTraits(t *testing.T) {
	withHome(t)
	p := writeFile(t, `providers:
  - id: claude-api
    type: openai
    base_url: http://127.0.0.1:11434/v1
    claude: true
  - id: deepseek
    type: openai
    base_url: http://127.0.0.1:11435/v1
    compact_window_zero: 400000
    always_thinks: true
  - id: cc
    type: claude-code
`)
	c, err := Load(map[string]string{"config": p}, envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	ca, _ := c.Provider("claude-api")
	ds, _ := c.Provider("deepseek")
	cc, _ := c.Provider("cc")
	if !ca.Claude || !ca.ClaudeSessions() || ds.ClaudeSessions() || !cc.ClaudeSessions() {
		t.Errorf("Claude sessions: claude-api %v, deepseek %v, cc %v", ca.ClaudeSessions(), ds.ClaudeSessions(), cc.ClaudeSessions())
	}
	if ds.CompactWindowZero != 400000 || !ds.AlwaysThinks {
		t.Errorf("deepseek = %+v", ds)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"providers:\n  - id: s\n    type: scripted\n    claude: true\n", "claude applies only to types exec and openai"},
		{"providers:\n  - id: c\n    type: claude-code\n    claude: true\n", "claude applies only to types exec and openai"},
		{"providers:\n  - id: e\n    type: exec\n    command: [x]\n    compact_window_zero: -1\n", "compact_window_zero must be a number of tokens above 0"},
		{"providers:\n  - id: e\n    type: exec\n    command: [x]\n    claude: true\n    always_thinks: true\n", "not Claude sessions"},
		{"providers:\n  - id: c\n    type: claude-code\n    compact_window_zero: 1000\n", "not Claude sessions"},
		{"providers:\n  - id: e\n    type: exec\n    command: [x]\n    claude: maybe\n", "claude"},
	} {
		_, err := Load(map[string]string{"config": writeFile(t, tc.yaml)}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}
