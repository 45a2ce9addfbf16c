package relaytest

import (
	"path/filepath"
	"testing"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest/agentfake"
)

// R17.1–R17.5 with the real Claude Code (claude-code provider), offline:
// ANTHROPIC_BASE_URL points at a fake Messages API on 127.0.0.1.
func TestAgentClaudeCode(t *testing.T) {
	t.Parallel()
	runAgentCase(t, agentCase{deltas: true, typ: "claude-code",
		store: func(home, _ string) string { return filepath.Join(home, ".claude", "projects") },
		setup: func(t *testing.T, home string) (config.Provider, *agentfake.Server) {
			bin := agentfake.Install(t, agentfake.ClaudeCode)
			fake := agentfake.Anthropic(t, agentScript)
			return config.Provider{ID: "claude", Name: "Claude Code", Type: config.TypeClaudeCode, Command: []string{bin},
				Models: []string{"claude-sonnet-4-5"}, DefaultModel: "claude-sonnet-4-5", Efforts: []string{"low", "high"},
				Env: map[string]string{
					"HOME":               home,
					"CLAUDE_CONFIG_DIR":  filepath.Join(home, ".claude"),
					"ANTHROPIC_BASE_URL": fake.URL,
					"ANTHROPIC_API_KEY":  "dummy",
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
					"DISABLE_AUTOUPDATER":                      "1",
					"ENABLE_TOOL_SEARCH":                       "false",
				}}, fake
		}})
}
