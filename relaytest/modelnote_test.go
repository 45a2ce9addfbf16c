package relaytest

import "testing"

// R7.13: when the provider reports that another model ran than the one the
// turn asked for, the turn's result (send, wait, create_session) says so in
// modelNote; a turn on the model asked for has none.
func TestModelNoteWhenAnotherModelRan(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "caller"})
	b := r.NewSession(map[string]any{"title": "worker"})
	m := r.Connect(a.Token, nil)
	other := Script(map[string]any{"model": "scripted-2"}, map[string]any{"reply": "ran elsewhere"})

	env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "plain"})
	wantEq(t, "status", env["status"], "done")
	if n, has := env["modelNote"]; has {
		t.Errorf("a turn on the model asked for has modelNote %v", n)
	}

	env = m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": other})
	wantEq(t, "status", env["status"], "done")
	wantEq(t, "reply model", env["reply"].(map[string]any)["model"], "scripted-2")
	wantHas(t, "send modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")

	env = m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": other, "wait_seconds": 0})
	env = m.MustOK(map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": env["message_id"], "wait_seconds": 15})
	wantEq(t, "status", env["status"], "done")
	wantHas(t, "wait modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")

	env, _ = r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": other, "wait_seconds": 15}, "allow")
	wantEq(t, "status", env["status"], "done")
	wantHas(t, "create_session modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")
}
