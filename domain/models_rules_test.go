package domain

// Which models and providers a prompt may name (R7.7, R7.13, R17.1), moved
// down from relaytest: another provider's spelling of a model id, a
// provider the relay cannot run now, a CLI whose binary is missing.

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
)

// R7.13 (issue 13): a provider whose ids are spelled differently rejects
// another provider's spelling before anything is created or sent —
// remoteCode <PROVIDER>_MODEL_UNAVAILABLE with the closest match, or for
// create_session the code of the one other provider that has the id
// (<PROVIDER>_PROVIDER_REQUIRED); a provider id's "-" is "_" in the code.
func TestRulesModelCrossProviderSpellings(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		r2Scripted("gh-copilot", "Copilot", "claude-opus-5.5"), r2Scripted("claude-sub", "Claude", "claude-opus-5-5")}})
	a := f.session(NewSession{Title: "lead"})
	b := f.session(NewSession{Title: "on copilot", Provider: "gh-copilot"})
	total := f.r2Total(a)
	before := f.messages(b)

	env := f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "x", "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff([]any{"GH_COPILOT_MODEL_UNAVAILABLE", []any{"claude-opus-5.5"}}, []any{env["remoteCode"], env["suggestions"]}); diff != "" {
		t.Errorf("send: remoteCode, suggestions (-want +got):\n%s", diff)
	}
	actHas(t, "send error", env["error"], "did you mean 'claude-opus-5.5'?", "Nothing was sent.")
	if diff := cmp.Diff([]any{before, "claude-opus-5.5"}, []any{f.messages(b), f.actStored(b).Model}); diff != "" {
		t.Errorf("after the refused send: messages, model (-want +got):\n%s", diff)
	}

	// create_session on Copilot with Claude's spelling: the code of the one
	// other provider that has the id (issue 21 item 11; the seed's words).
	env = f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "gh-copilot", "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff("CLAUDE_SUB_PROVIDER_REQUIRED", env["remoteCode"]); diff != "" {
		t.Errorf("create on copilot remoteCode (-want +got):\n%s", diff)
	}
	actHas(t, "create error", env["error"], "did you mean 'claude-opus-5.5'?", `pass provider "claude-sub"`, "No session was created.")

	env = f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "x", "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff("CLAUDE_SUB_PROVIDER_REQUIRED", env["remoteCode"]); diff != "" {
		t.Errorf("create without provider remoteCode (-want +got):\n%s", diff)
	}
	actHas(t, "create error", env["error"], `pass provider "claude-sub"`, "No session was created.")

	env = f.actFail(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff("GH_COPILOT_MODEL_UNAVAILABLE", env["remoteCode"]); diff != "" {
		t.Errorf("update remoteCode (-want +got):\n%s", diff)
	}
	actHas(t, "update error", env["error"], "Nothing was changed.")
	if diff := cmp.Diff(total, f.r2Total(a)); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
}

// Issue 21 item 11 (R7.13, the seed's "Welche Modelle angenommen werden"):
// create_session on a provider whose ids are spelled with dots (Copilot)
// with another provider's spelling of an id answers with the code of the one
// other provider that has the id — CLAUDE_PROVIDER_REQUIRED — not with the
// Copilot provider's MODEL_UNAVAILABLE; nothing is created, and send and
// update_session keep MODEL_UNAVAILABLE with the closest match.
func TestRulesModelCopilotSpellingOnCreateNamesTheOtherProvider(t *testing.T) {
	t.Parallel()
	cop := r2Scripted("copilot", "Copilot", "claude-opus-5.5", "gpt-5.4")
	cop.DefaultModel = "gpt-5.4"
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		cop, r2Scripted("claude", "Claude", "claude-opus-5-5")}})
	a := f.session(NewSession{Title: "lead"})
	b := f.session(NewSession{Title: "on copilot", Provider: "copilot"})
	total := f.r2Total(a)

	env := f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "copilot", "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff([]any{"CLAUDE_PROVIDER_REQUIRED", []any{"claude-opus-5.5"}}, []any{env["remoteCode"], env["suggestions"]}); diff != "" {
		t.Errorf("create: remoteCode, suggestions (-want +got):\n%s", diff)
	}
	actHas(t, "error", env["error"], "Unknown model 'claude-opus-5-5' for Copilot", "did you mean 'claude-opus-5.5'?",
		`Provider "claude" offers 'claude-opus-5-5': pass provider "claude".`, "No session was created.")
	if diff := cmp.Diff(total, f.r2Total(a)); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}

	// Not create_session: the closest match, the session stays on Copilot.
	env = f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "x", "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff("COPILOT_MODEL_UNAVAILABLE", env["remoteCode"]); diff != "" {
		t.Errorf("send remoteCode (-want +got):\n%s", diff)
	}
	env = f.actFail(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "model": "claude-opus-5-5"}, CodeUnknownModel)
	if diff := cmp.Diff("COPILOT_MODEL_UNAVAILABLE", env["remoteCode"]); diff != "" {
		t.Errorf("update remoteCode (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("copilot", f.actStored(b).Provider); diff != "" {
		t.Errorf("provider kept (-want +got):\n%s", diff)
	}
}

// R7.7: a send naming a provider the relay has but cannot run now is
// PROVIDER_UNAVAILABLE, with nothing sent (the rest of send's rules are in
// TestRulesActSend).
func TestRulesModelSendProviderUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})
	before := f.messages(b)
	env := f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": b, "wait_seconds": 15,
		"text": "x", "provider": "claude-api"}, CodeProviderUnavailable)
	if s, _ := env["remoteCode"].(string); s == "" {
		t.Errorf("remoteCode missing: %v", env)
	}
	actHas(t, "error", env["error"], "Nothing was sent.")
	if n := f.messages(b); n != before {
		t.Errorf("the failed send changed the target: %d messages, want %d", n, before)
	}
}

// R17.1: a CLI provider whose binary cannot be found is a warning, not an
// exit: relay_info and usage show it unavailable and why, and a prompt to it
// is PROVIDER_UNAVAILABLE with nothing queued — from an agent and from the
// owner (the owner API's message and create with text).
func TestRulesModelAgentProviderUnavailable(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{{ID: "gone", Name: "Gone",
		Type: config.TypeClaudeCode, Command: []string{"no-such-claude-binary-xyz"}, Models: []string{"m"}, DefaultModel: "m"}}})
	orch := f.session(NewSession{Title: "orch"})
	info := f.ok(orch, map[string]any{"action": "relay_info", "relay": "this"})
	var gone map[string]any
	provs, _ := info["providers"].([]any)
	for _, p := range provs {
		if pm, _ := p.(map[string]any); pm["id"] == "gone" {
			gone = pm
		} else if pm["available"] != true || pm["status"] != nil {
			t.Fatalf("scripted provider %v", pm)
		}
	}
	if gone == nil {
		t.Fatalf("relay_info lists no provider gone: %v", info["providers"])
	}
	if diff := cmp.Diff([]any{false, "unavailable"}, []any{gone["available"], gone["status"]}); diff != "" {
		t.Errorf("relay_info provider gone (-want +got):\n%s", diff)
	}
	actHas(t, "statusReason", gone["statusReason"], `"no-such-claude-binary-xyz" was not found on PATH`)
	if st := f.r2Usage(orch, "gone")["status"]; st != "unavailable" {
		t.Errorf("usage status of gone %v", st)
	}

	// A session on it may exist (the owner made it before the CLI went away); prompts are refused.
	s := f.session(NewSession{Title: "on gone", Provider: "gone"})
	if _, err := f.r.OwnerMessage(f.ctx, s, "hi"); schCode(err) != CodeProviderUnavailable {
		t.Errorf("owner message: %v, want %s", err, CodeProviderUnavailable)
	}
	env := f.actFail(orch, map[string]any{"action": "send", "relay": "this", "session": s, "text": "hi", "wait_seconds": 0}, CodeProviderUnavailable)
	actHas(t, "send error", env["error"], "not found on PATH")
	f.actFail(orch, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": "gone"}, CodeProviderUnavailable)
	if msgs := f.history(s, ""); len(msgs) != 0 {
		t.Errorf("something was queued: %v", msgs)
	}
	if _, err := f.r.OwnerCreateSession(f.ctx, NewSession{Provider: "gone", Text: "hi"}); schCode(err) != CodeProviderUnavailable {
		t.Errorf("owner create with text: %v, want %s", err, CodeProviderUnavailable)
	}
	if n := len(f.enq.pending()); n != 0 {
		t.Errorf("jobs enqueued for refused prompts: %v", f.enq.pending())
	}
}
