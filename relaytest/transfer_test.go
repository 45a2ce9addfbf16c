package relaytest

import "testing"

// R8.24 (issue 13): a subscription that watched only the caller is ended
// with a reason when transferred (the caller never watches itself, so it has
// no copy), not left active on the old side.
func TestTransferEndsSubscriptionOfOnlyTheCaller(t *testing.T) {
	r := Start(t, Options{})
	w := r.NewSession(map[string]any{"title": "old watcher"})
	v := r.NewSession(map[string]any{"title": "heir"})
	c := r.NewSession(map[string]any{"title": "watched"})
	onlyHeir := ev2Sub(t, r, w, map[string]any{"sessions": []string{v.ID}}, true)["id"].(string)
	mw := r.Connect(w.Token, nil)
	both := ev2SubMCP(t, mw, map[string]any{"sessions": []string{v.ID, c.ID}})["id"].(string)

	env, _ := ev2InTurn(t, r, v, map[string]any{"action": "transfer_subscriptions", "from": w.ID}, true)
	mustEnvOK(t, env)
	if moved := env["subscriptions"].([]any); len(moved) != 1 {
		t.Fatalf("moved %d subscriptions, want 1 (the one watching the heir and another): %v", len(moved), env)
	}
	wantEq(t, "ended", env["ended"], []any{onlyHeir})
	wantHas(t, "note", env["note"], "watched only this conversation")
	ls := ev2SubList(t, mw)
	for _, id := range []string{onlyHeir, both} {
		if ls[id]["endReason"] != "transferred" {
			t.Errorf("old subscription %s after the transfer: %v, want ended transferred", id, ls[id])
		}
	}
	if ga := r.Get(v.ID); ga["watched"] != false {
		t.Errorf("the heir is still watched after the transfer: %v", ga["watched"])
	}
}
