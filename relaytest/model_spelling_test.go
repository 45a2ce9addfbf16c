package relaytest

import (
	"testing"

	"github.com/oar/relay/config"
)

// R7.13 (issue 13, untested before): a provider whose ids are spelled
// differently rejects another provider's spelling before anything is created
// or sent — remoteCode <PROVIDER>_MODEL_UNAVAILABLE with the closest match,
// or for create_session the code of the one other provider that has the id
// (<PROVIDER>_PROVIDER_REQUIRED); a provider id's "-" is "_" in the code.
func TestCrossProviderModelSpellings(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		cop := config.ScriptedProvider()
		cop.ID, cop.Name, cop.Models, cop.DefaultModel = "gh-copilot", "Copilot", []string{"claude-opus-5.5"}, "claude-opus-5.5"
		cl := config.ScriptedProvider()
		cl.ID, cl.Name, cl.Models, cl.DefaultModel = "claude-sub", "Claude", []string{"claude-opus-5-5"}, "claude-opus-5-5"
		c.Providers = append(c.Providers, cop, cl)
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	b := r.NewSession(map[string]any{"title": "on copilot", "provider": "gh-copilot"})
	m := r.Connect(a.Token, nil)
	total := sessionTotal(t, m, "all")
	before := messageCount(t, r, b.ID)

	env := m.MustFail(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "x", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "send remoteCode", env["remoteCode"], "GH_COPILOT_MODEL_UNAVAILABLE")
	wantEq(t, "send suggestions", env["suggestions"], []any{"claude-opus-5.5"})
	wantHas(t, "send error", env["error"], "did you mean 'claude-opus-5.5'?", "Nothing was sent.")
	wantEq(t, "messages", messageCount(t, r, b.ID), before)
	wantEq(t, "model kept", r.Get(b.ID)["model"], "claude-opus-5.5")

	// create_session on Copilot with Claude's spelling: the code of the one
	// other provider that has the id (issue 21 item 11; the seed's words).
	env = m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "gh-copilot", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "create on copilot remoteCode", env["remoteCode"], "CLAUDE_SUB_PROVIDER_REQUIRED")
	wantHas(t, "create error", env["error"], "did you mean 'claude-opus-5.5'?", `pass provider "claude-sub"`, "No session was created.")

	env = m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "create without provider remoteCode", env["remoteCode"], "CLAUDE_SUB_PROVIDER_REQUIRED")
	wantHas(t, "create error", env["error"], `pass provider "claude-sub"`, "No session was created.")

	env = m.MustFail(map[string]any{"action": "update_session", "relay": "this", "session": b.ID, "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "update remoteCode", env["remoteCode"], "GH_COPILOT_MODEL_UNAVAILABLE")
	wantHas(t, "update error", env["error"], "Nothing was changed.")
	wantEq(t, "sessions", sessionTotal(t, m, "all"), total)
}
