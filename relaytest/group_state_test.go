package relaytest

import "testing"

// R7.5 (issue 13): the members of a session's group in read_session carry
// state with the R7.4 values: running_turn for a running turn and for one
// only queued, background_only while only a background task runs, else idle.
func TestGroupMemberStates(t *testing.T) {
	// One worker: while busy's turn sleeps, queued's prompt cannot start.
	r := Start(t, Options{Concurrency: 1})
	ownerGroup(t, r, "Crew")
	head := r.NewSession(map[string]any{"title": "crew head", "group": "Crew"})
	busy := r.NewSession(map[string]any{"title": "crew busy", "group": "Crew"})
	queued := r.NewSession(map[string]any{"title": "crew queued", "group": "Crew"})
	bg := r.NewSession(map[string]any{"title": "crew bg", "group": "Crew"})
	idle := r.NewSession(map[string]any{"title": "crew idle", "group": "Crew"})
	reader := r.NewSession(map[string]any{"title": "reader"})
	m := r.Connect(reader.Token, nil)

	// bg: its turn ended, a background task still runs.
	r.WaitTurn(r.Message(bg.ID, Script(map[string]any{"task": map[string]any{"description": "slow build", "lines": []string{"never yet"},
		"line_ms": 60000, "exit": 0, "background": true}}, map[string]any{"reply": "started"})), turnWait, "done")
	// busy: a turn running; queued: a prompt waiting for the one worker.
	t.Cleanup(func() { r.Owner("POST", "/api/v1/sessions/"+busy.ID+"/stop", nil, nil) })
	r.WaitTurn(r.Message(busy.ID, sleepScript(60000)), turnWait, "running")
	r.Message(queued.ID, "waits")

	g := obj(t, readSession(m, head.ID, 1)["group"], "group")
	got := map[string]any{}
	for _, x := range g["members"].([]any) {
		mv := x.(map[string]any)
		got[str(mv["id"])] = mv["state"]
	}
	wantEq(t, "member with a running turn", got[busy.ID], "running_turn")
	wantEq(t, "member with a queued turn", got[queued.ID], "running_turn")
	wantEq(t, "member with a background task", got[bg.ID], "background_only")
	wantEq(t, "idle member", got[idle.ID], "idle")
	// The same values as list_sessions (R7.4).
	ls := list(t, m.MustOK(map[string]any{"action": "list_sessions", "relay": "this"})["sessions"], "sessions")
	for _, id := range []string{busy.ID, queued.ID, bg.ID, idle.ID} {
		wantEq(t, "list_sessions state of "+id[:8], findByID(t, ls, id)["state"], got[id])
	}
}
