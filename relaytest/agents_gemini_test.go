package relaytest

import (
	"path/filepath"
	"testing"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/relaytest/agentfake"
)

// R17.1–R17.5 with the real Gemini CLI (gemini-cli provider), offline:
// GOOGLE_GEMINI_BASE_URL points at a fake Gemini API on 127.0.0.1; the
// provider writes the settings file into the session's GEMINI_CLI_HOME.
func TestAgentGeminiCLI(t *testing.T) {
	t.Parallel()
	runAgentCase(t, agentCase{deltas: true, typ: "gemini-cli",
		store: func(home, sid string) string {
			return filepath.Join(provider.GeminiHome(filepath.Join(home, ".cache", "relay", "agents"), sid), ".gemini", "tmp")
		},
		setup: func(t *testing.T, home string) (config.Provider, *agentfake.Server) {
			bin := agentfake.Install(t, agentfake.GeminiCLI)
			fake := agentfake.Gemini(t, agentScript)
			return config.Provider{ID: "gemini", Name: "Gemini CLI", Type: config.TypeGeminiCLI, Command: []string{bin},
				Models: []string{"gemini-2.5-flash"}, DefaultModel: "gemini-2.5-flash",
				Env: map[string]string{
					"HOME":                   home,
					"GOOGLE_GEMINI_BASE_URL": fake.URL,
					"GEMINI_API_KEY":         "dummy",
				}}, fake
		}})
}
