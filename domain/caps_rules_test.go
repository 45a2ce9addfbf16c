package domain

// R7.8 spending caps and the billing switch (issue 13), moved down from
// relaytest: a provider at its monthly cap refuses a send and a switch onto
// it, nothing queued; usage shows the cap's meters (R7.3).

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// capProviders are two scripted providers that bill the same models two
// ways: claude (switch_to claude-api) and claude-api with a cap of 60 tokens.
func capProviders() []config.Provider {
	sub := r2Scripted("claude", "Claude")
	sub.SwitchTo = "claude-api"
	api := r2Scripted("claude-api", "Claude API")
	api.MonthlyCap, api.CapUnit = 60, config.CapTokens
	return []config.Provider{sub, api}
}

// R7.8, R7.3: the cap's meters in usage; a send to a capped provider and a
// billing switch onto it are refused with nothing queued; switching the
// capped session to the plan is the way out.
func TestRulesCapSpendingCap(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: capProviders()})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "on the key", Provider: "claude-api"})
	c := f.session(NewSession{Title: "on the plan", Provider: "claude"})
	now := f.clk.Now().UTC()
	resets := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)

	pv := f.r2Usage(a, "claude-api")
	meters := []string{"used", "quota", "remaining", "utilization", "unit", "status"}
	pick := func(pv map[string]any) map[string]any {
		out := map[string]any{}
		for _, k := range meters {
			out[k] = pv[k]
		}
		return out
	}
	if diff := cmp.Diff(map[string]any{"used": 0.0, "quota": 60.0, "remaining": 60.0, "utilization": 0.0, "unit": "tokens", "status": "ok"}, pick(pv)); diff != "" {
		t.Errorf("usage before a turn (-want +got):\n%s", diff)
	}
	if ra, _ := time.Parse(time.RFC3339Nano, pv["resetsAt"].(string)); ra.Format(time.RFC3339Nano) != resets {
		t.Errorf("resetsAt = %v, want %s", pv["resetsAt"], resets)
	}
	if _, has := f.r2Usage(a, "claude")["quota"]; has {
		t.Errorf("a provider without a cap shows a quota")
	}

	// One turn of 50 characters (echo: about 100 tokens) spends the cap.
	env := f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "spend the whole monthly cap of the key in one turn"})
	if env["status"] != "done" {
		t.Fatalf("send: %v", env)
	}
	pv = f.r2Usage(a, "claude-api")
	if used, _ := pv["used"].(float64); used < 60 {
		t.Fatalf("used = %v after a turn of ~100 tokens", pv["used"])
	}
	if diff := cmp.Diff([]any{0.0, "cap_reached"}, []any{pv["remaining"], pv["status"]}); diff != "" {
		t.Errorf("remaining and status at the cap (-want +got):\n%s", diff)
	}
	if u, _ := pv["utilization"].(float64); u < 1 {
		t.Errorf("utilization = %v at the cap", pv["utilization"])
	}

	// A send to a session on the capped provider: refused, nothing queued.
	before := f.messages(b)
	env = f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "once more", "wait_seconds": 0}, CodeProviderUnavailable)
	if diff := cmp.Diff("CLAUDE_API_CAP_REACHED", env["remoteCode"]); diff != "" {
		t.Errorf("remoteCode (-want +got):\n%s", diff)
	}
	actHas(t, "error", env["error"], "monthly cap", `provider: "claude"`, "ask the owner to raise the cap", "Nothing was sent.")
	if n := f.messages(b); n != before {
		t.Errorf("a refused send queued a prompt: %d messages, want %d", n, before)
	}

	// A billing switch onto the capped provider: refused, nothing switched or sent.
	before = f.messages(c)
	env = f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": c, "text": "to the key", "provider": "claude-api", "wait_seconds": 0}, CodeProviderUnavailable)
	if diff := cmp.Diff("CLAUDE_API_CAP_REACHED", env["remoteCode"]); diff != "" {
		t.Errorf("switch remoteCode (-want +got):\n%s", diff)
	}
	actHas(t, "error", env["error"], "Cannot switch billing", "Nothing was sent.")
	if diff := cmp.Diff([]any{before, "claude"}, []any{f.messages(c), f.actStored(c).Provider}); diff != "" {
		t.Errorf("the plan session after a refused switch: messages, provider (-want +got):\n%s", diff)
	}

	// The way out the error names: switch the capped session to the plan.
	env = f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "on the plan now", "provider": "claude"})
	if diff := cmp.Diff([]any{"done", "claude"}, []any{env["status"], f.actStored(b).Provider}); diff != "" {
		t.Errorf("the switch to the plan: status, provider (-want +got):\n%s", diff)
	}
}

// R7.8 billing switch (issue 13): the card line, the partner lacking the
// session's model, and the rollback when the queue refuses the message
// after the card (a rejected message switches nothing).
func TestRulesCapBillingSwitchCardModelRollback(t *testing.T) {
	t.Parallel()
	sub := r2Scripted("claude", "Claude", "scripted-1", "big")
	sub.SwitchTo = "claude-api"
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn},
		r2Options{providers: []config.Provider{sub, r2Scripted("claude-api", "Claude API")}})
	actAuto(f)
	a := f.session(NewSession{Title: "lead"})
	create := func(extra map[string]any) string {
		t.Helper()
		env := f.ok(a, actWith(map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, extra))
		return env["session"].(string)
	}
	first, _ := f.actInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": "claude", "title": "helper", "wait_seconds": 15}, "allow")
	actWant(t, "first create_session", first, "")
	helper, _ := first["session"].(string)

	// The partner lacks the session's model: UNKNOWN_MODEL, nothing switched or sent.
	big := create(map[string]any{"provider": "claude", "model": "big", "title": "big"})
	before := f.messages(big)
	env := f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": big, "text": "x", "provider": "claude-api", "wait_seconds": 0}, CodeUnknownModel)
	actHas(t, "error", env["error"], "'big'", "Nothing was sent.")
	if diff := cmp.Diff([]any{"claude", before}, []any{f.actStored(big).Provider, f.messages(big)}); diff != "" {
		t.Errorf("after a refused switch: provider, messages (-want +got):\n%s", diff)
	}

	// Three sessions of this conversation at work, a fourth idle.
	for i := 0; i < 3; i++ {
		create(map[string]any{"text": script(map[string]any{"sleep_ms": 600000}), "wait_seconds": 0})
	}
	fourth := create(nil)
	// In ask mode the switch asks a card that names it.
	mode := "ask"
	if _, err := f.r.OwnerPatchSession(f.ctx, a, SessionPatch{Mode: &mode}); err != nil {
		t.Fatalf("mode ask: %v", err)
	}
	before = f.messages(helper)
	mid := f.prompt(a, script(actTool(map[string]any{"action": "send", "relay": "this", "session": helper,
		"text": "on the key", "provider": "claude-api", "wait_seconds": 0})))
	card := f.actCard(a)
	actHas(t, "card lines", strings.Join(card.Lines, "\n"), "Switches billing to Claude API")
	// Meanwhile the owner puts the fourth to work: the message no longer fits the 4-at-work cap.
	f.actTurn(f.prompt(fourth, script(map[string]any{"sleep_ms": 600000})), store.TurnRunning)
	if _, err := f.r.DecideCard(f.ctx, card.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	res := f.actResults(mid, 1)[0]
	actWant(t, "send after the cap filled", res, CodeSessionLimit, "Nothing was sent.")
	if diff := cmp.Diff([]any{"claude", before}, []any{f.actStored(helper).Provider, f.messages(helper)}); diff != "" {
		t.Errorf("after a refused message: provider, messages (-want +got):\n%s", diff)
	}
}
