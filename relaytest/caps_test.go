package relaytest

// R7.8 spending caps and the billing switch (issue 13): a provider at its
// monthly cap refuses a send and a switch onto it, nothing queued; usage
// shows the cap's meters (R7.3).

import (
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// capConfig has two scripted providers that bill the same models two ways:
// claude (switch_to claude-api) and claude-api with a cap of 60 tokens.
func capConfig(c *config.Config) {
	sub := config.ScriptedProvider()
	sub.ID, sub.Name, sub.SwitchTo = "claude", "Claude", "claude-api"
	api := config.ScriptedProvider()
	api.ID, api.Name, api.MonthlyCap, api.CapUnit = "claude-api", "Claude API", 60, config.CapTokens
	c.Providers = append(c.Providers, sub, api)
}

func usageOf(t *testing.T, m *MCP, id string) map[string]any {
	t.Helper()
	env := m.MustOK(map[string]any{"action": "usage", "relay": "this"})
	for _, p := range env["providers"].([]any) {
		if pv := p.(map[string]any); pv["id"] == id {
			return pv
		}
	}
	t.Fatalf("usage has no provider %s: %v", id, env)
	return nil
}

func TestSpendingCap(t *testing.T) {
	r := Start(t, Options{Config: capConfig})
	a := r.NewSession(map[string]any{"title": "caller"})
	b := r.NewSession(map[string]any{"title": "on the key", "provider": "claude-api"})
	c := r.NewSession(map[string]any{"title": "on the plan", "provider": "claude"})
	m := r.Connect(a.Token, nil)
	now := time.Now().UTC()
	resets := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)

	pv := usageOf(t, m, "claude-api")
	wantEq(t, "used", pv["used"], 0.0)
	wantEq(t, "quota", pv["quota"], 60.0)
	wantEq(t, "remaining", pv["remaining"], 60.0)
	wantEq(t, "utilization", pv["utilization"], 0.0)
	wantEq(t, "unit", pv["unit"], "tokens")
	wantEq(t, "status", pv["status"], "ok")
	if ra, _ := time.Parse(time.RFC3339Nano, str(pv["resetsAt"])); ra.Format(time.RFC3339Nano) != resets {
		t.Errorf("resetsAt = %v, want %s", pv["resetsAt"], resets)
	}
	if _, has := usageOf(t, m, "claude")["quota"]; has {
		t.Errorf("a provider without a cap shows a quota")
	}

	// One turn of 50 characters (echo: about 100 tokens) spends the cap.
	env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "spend the whole monthly cap of the key in one turn"})
	wantEq(t, "status", env["status"], "done")
	pv = usageOf(t, m, "claude-api")
	if used, _ := pv["used"].(float64); used < 60 {
		t.Fatalf("used = %v after a turn of ~100 tokens", pv["used"])
	}
	wantEq(t, "remaining", pv["remaining"], 0.0)
	wantEq(t, "status", pv["status"], "cap_reached")
	if u, _ := pv["utilization"].(float64); u < 1 {
		t.Errorf("utilization = %v at the cap", pv["utilization"])
	}

	// A send to a session on the capped provider: refused, nothing queued.
	before := messageCount(t, r, b.ID)
	env = m.MustFail(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "once more", "wait_seconds": 0}, codeProviderUnav)
	wantEq(t, "remoteCode", env["remoteCode"], "CLAUDE_API_CAP_REACHED")
	wantHas(t, "error", env["error"], "monthly cap", `provider: "claude"`, "ask the owner to raise the cap", "Nothing was sent.")
	if n := messageCount(t, r, b.ID); n != before {
		t.Errorf("a refused send queued a prompt: %d messages, want %d", n, before)
	}

	// A billing switch onto the capped provider: refused, nothing switched or sent.
	before = messageCount(t, r, c.ID)
	env = m.MustFail(map[string]any{"action": "send", "relay": "this", "session": c.ID, "text": "to the key", "provider": "claude-api", "wait_seconds": 0}, codeProviderUnav)
	wantEq(t, "remoteCode", env["remoteCode"], "CLAUDE_API_CAP_REACHED")
	wantHas(t, "error", env["error"], "Cannot switch billing", "Nothing was sent.")
	if n := messageCount(t, r, c.ID); n != before {
		t.Errorf("a refused switch queued a prompt: %d messages, want %d", n, before)
	}
	wantEq(t, "provider of the plan session", r.Get(c.ID)["provider"], "claude")

	// The way out the error names: switch the capped session to the plan.
	env = m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "on the plan now", "provider": "claude"})
	wantEq(t, "status", env["status"], "done")
	wantEq(t, "provider after the switch", r.Get(b.ID)["provider"], "claude")
}

// R7.8 billing switch (issue 13, untested before): the card line, the
// partner lacking the session's model, and the rollback when the queue
// refuses the message after the card (a rejected message switches nothing).
func TestBillingSwitchCardModelRollback(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		sub := config.ScriptedProvider()
		sub.ID, sub.Name, sub.SwitchTo, sub.Models = "claude", "Claude", "claude-api", []string{"scripted-1", "big"}
		api := config.ScriptedProvider()
		api.ID, api.Name = "claude-api", "Claude API"
		c.Providers = append(c.Providers, sub, api)
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	create := func(extra map[string]any) string {
		args := map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}
		for k, v := range extra {
			args[k] = v
		}
		env := m.MustOK(args)
		return str(env["session"])
	}
	first, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": "claude", "title": "helper", "wait_seconds": 15}, "allow")
	mustEnvOK(t, first)
	helper := str(first["session"])

	// The partner lacks the session's model: REMOTE_RELAY_UNKNOWN_MODEL, nothing switched or sent.
	big := create(map[string]any{"provider": "claude", "model": "big", "title": "big"})
	before := messageCount(t, r, big)
	env := m.MustFail(map[string]any{"action": "send", "relay": "this", "session": big, "text": "x", "provider": "claude-api", "wait_seconds": 0}, codeUnknownModel)
	wantHas(t, "error", env["error"], "'big'", "Nothing was sent.")
	wantEq(t, "provider after a refused switch", r.Get(big)["provider"], "claude")
	wantEq(t, "messages after a refused switch", messageCount(t, r, big), before)

	// Three sessions of this conversation at work, a fourth idle.
	var busy []string
	for i := 0; i < 3; i++ {
		busy = append(busy, create(map[string]any{"text": sleepScript(60000), "wait_seconds": 0}))
	}
	fourth := create(nil)
	t.Cleanup(func() {
		for _, s := range append(busy, fourth) {
			r.Owner("POST", "/api/v1/sessions/"+s+"/stop", nil, nil)
		}
	})
	// In ask mode the switch asks a card that names it.
	if st := r.Owner("PATCH", "/api/v1/sessions/"+a.ID, map[string]any{"mode": "ask"}, nil); st != 200 {
		t.Fatalf("mode ask: status %d", st)
	}
	before = messageCount(t, r, helper)
	mid := r.Message(a.ID, Script(map[string]any{"tool": map[string]any{"action": "send", "relay": "this", "session": helper,
		"text": "on the key", "provider": "claude-api", "wait_seconds": 0}}))
	card := r.WaitCard(a.ID)
	wantHas(t, "card lines", cardText(card), "Switches billing to Claude API")
	// Meanwhile the owner puts the fourth to work: the message no longer fits the 4-at-work cap.
	r.WaitTurn(r.Message(fourth, sleepScript(60000)), turnWait, "running")
	r.Decide(str(card["id"]), "allow")
	turn := r.WaitTurn(mid, turnWait, "done")
	res := ToolResults(turn.Reply)
	if len(res) != 1 || res[0]["code"] != codeSessionLimit {
		t.Fatalf("send after the cap filled: %q", turn.Reply)
	}
	wantHas(t, "error", res[0]["error"], "Nothing was sent.")
	wantEq(t, "provider after a refused message", r.Get(helper)["provider"], "claude")
	wantEq(t, "messages after a refused message", messageCount(t, r, helper), before)
}
