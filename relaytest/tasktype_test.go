package relaytest

import "testing"

// Issue 13: task types are the names of the seed's example — `local_bash`
// for a shell command, `local_agent` for a sub-agent — in read_session,
// list_sessions and read_task_output.
func TestTaskTypesAsInTheSeed(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "reader"})
	b := r.NewSession(map[string]any{"title": "worker"})
	m := r.Connect(a.Token, nil)
	r.WaitTurn(r.Message(b.ID, Script(
		map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"x"}, "line_ms": 60000, "background": true}},
		map[string]any{"subagent": map[string]any{"description": "explore repo", "ms": 60000}},
		map[string]any{"reply": "started"})), turnWait, "done")
	t.Cleanup(func() { r.Owner("POST", "/api/v1/sessions/"+b.ID+"/stop", nil, nil) })

	types := map[string]any{}
	ids := map[string]string{}
	for _, x := range list(t, readSession(m, b.ID, 1)["tasks"], "tasks") {
		tk := x.(map[string]any)
		types[str(tk["description"])] = tk["type"]
		ids[str(tk["description"])] = str(tk["taskId"])
	}
	wantEq(t, "read_session types", types, map[string]any{"npm test": "local_bash", "explore repo": "local_agent"})
	ls := list(t, m.MustOK(map[string]any{"action": "list_sessions", "relay": "this"})["sessions"], "sessions")
	for _, x := range list(t, findByID(t, ls, b.ID)["tasks"], "tasks") {
		tk := x.(map[string]any)
		wantEq(t, "list_sessions type of "+str(tk["description"]), tk["type"], types[str(tk["description"])])
	}
	env := m.MustOK(map[string]any{"action": "read_task_output", "relay": "this", "session": b.ID, "task_id": ids["npm test"]})
	wantEq(t, "read_task_output type", obj(t, env["task"], "task")["type"], "local_bash")
}
