package relaytest

import "testing"

// R3.7: schedule and ask ids are accepted as a unique prefix of 8 or more characters.
func TestIDPrefixes(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "a"})
	m := r.Connect(a.Token, nil)
	env := m.MustOK(map[string]any{"action": "schedule", "text": "later", "every_minutes": 60})
	id := env["schedule_id"].(string)
	m.MustFail(map[string]any{"action": "unschedule", "schedule_id": id[:7]}, "REMOTE_RELAY_NOT_FOUND")
	env = m.MustOK(map[string]any{"action": "unschedule", "schedule_id": id[:10]})
	if env["schedule_id"] != id {
		t.Fatalf("unschedule by prefix ended %v, want %s", env["schedule_id"], id)
	}
	env = m.MustOK(map[string]any{"action": "ask", "question": "ok?"})
	qid := env["question_id"].(string)
	env = m.MustOK(map[string]any{"action": "withdraw", "question_id": qid[:9]})
	if env["question_id"] != qid || env["status"] != "withdrawn" {
		t.Fatalf("withdraw by prefix: %v", env)
	}
}
