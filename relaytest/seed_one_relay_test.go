package relaytest

import (
	"testing"

	"github.com/oar/relay/config"
)

// Issue 21 item 11 (R7.13, the seed's "Welche Modelle angenommen werden"):
// create_session on a provider whose ids are spelled with dots (Copilot)
// with another provider's spelling of an id answers with the code of the one
// other provider that has the id — CLAUDE_PROVIDER_REQUIRED — not with the
// Copilot provider's MODEL_UNAVAILABLE; nothing is created, and send and
// update_session keep MODEL_UNAVAILABLE with the closest match.
func TestSeedCopilotSpellingOnCreateNamesTheOtherProvider(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		cop := config.ScriptedProvider()
		cop.ID, cop.Name, cop.Models, cop.DefaultModel = "copilot", "Copilot", []string{"claude-opus-5.5", "gpt-5.4"}, "gpt-5.4"
		cl := config.ScriptedProvider()
		cl.ID, cl.Name, cl.Models, cl.DefaultModel = "claude", "Claude", []string{"claude-opus-5-5"}, "claude-opus-5-5"
		c.Providers = append(c.Providers, cop, cl)
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	b := r.NewSession(map[string]any{"title": "on copilot", "provider": "copilot"})
	m := r.Connect(a.Token, nil)
	total := sessionTotal(t, m, "all")

	env := m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "copilot", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "remoteCode", env["remoteCode"], "CLAUDE_PROVIDER_REQUIRED")
	wantHas(t, "error", env["error"], "Unknown model 'claude-opus-5-5' for Copilot", "did you mean 'claude-opus-5.5'?",
		`Provider "claude" offers 'claude-opus-5-5': pass provider "claude".`, "No session was created.")
	wantEq(t, "suggestions", env["suggestions"], []any{"claude-opus-5.5"})
	wantEq(t, "sessions", sessionTotal(t, m, "all"), total)

	// Not create_session: the closest match, the session stays on Copilot.
	env = m.MustFail(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "x", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "send remoteCode", env["remoteCode"], "COPILOT_MODEL_UNAVAILABLE")
	env = m.MustFail(map[string]any{"action": "update_session", "relay": "this", "session": b.ID, "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "update remoteCode", env["remoteCode"], "COPILOT_MODEL_UNAVAILABLE")
	wantEq(t, "provider kept", r.Get(b.ID)["provider"], "copilot")
}
