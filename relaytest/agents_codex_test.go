package relaytest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest/agentfake"
)

// R17.1–R17.5 with the real Codex (codex provider), offline: a custom model
// provider "fake" (Responses API on 127.0.0.1) through -c overrides in args,
// an empty CODEX_HOME, plugins and analytics off.
func TestAgentCodex(t *testing.T) {
	t.Parallel()
	runAgentCase(t, agentCase{typ: "codex",
		store: func(home, _ string) string { return filepath.Join(home, ".codex", "sessions") },
		setup: func(t *testing.T, home string) (config.Provider, *agentfake.Server) {
			bin := agentfake.Install(t, agentfake.Codex)
			fake := agentfake.OpenAIResponses(t, agentScript)
			if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
				t.Fatal(err)
			}
			return config.Provider{ID: "codex", Name: "Codex", Type: config.TypeCodex, Command: []string{bin},
				Models: []string{"fake-model"}, DefaultModel: "fake-model", Efforts: []string{"low", "high"},
				Args: []string{"--disable", "plugins", "-c", "analytics.enabled=false",
					"-c", `model_provider="fake"`,
					"-c", `model_providers.fake.name="fake"`,
					"-c", `model_providers.fake.base_url="` + fake.URL + `/v1"`,
					"-c", `model_providers.fake.wire_api="responses"`,
					"-c", `model_providers.fake.env_key="FAKE_API_KEY"`},
				Env: map[string]string{
					"HOME":         home,
					"CODEX_HOME":   filepath.Join(home, ".codex"),
					"FAKE_API_KEY": "dummy",
				}}, fake
		}})
}
