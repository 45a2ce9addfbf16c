package relaytest

import (
	"testing"
	"time"
)

// Issue 13: a schedule into another session is treated like a send — it
// respects the 4-at-work cap of the conversation that started the target; a
// firing over the cap waits and is tried again, it is not dropped.
func TestScheduleIntoSessionRespectsFourAtWork(t *testing.T) {
	clock := schClock()
	r := Start(t, Options{Clock: clock})
	a := r.NewSession(map[string]any{"title": "setter"})
	m := r.Connect(a.Token, nil)
	create := func(text string) map[string]any {
		return map[string]any{"action": "create_session", "relay": "this", "text": text, "wait_seconds": 0}
	}
	// The first create_session is allowed on a card; the next ones follow without.
	res, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "title": "helper", "wait_seconds": 15}, "allow")
	mustEnvOK(t, res)
	helper := str(res["session"])
	var busy []string
	for i := 0; i < 4; i++ {
		env := m.MustOK(create(sleepScript(60000)))
		busy = append(busy, str(env["session"]))
	}
	t.Cleanup(func() {
		for _, s := range busy {
			r.Owner("POST", "/api/v1/sessions/"+s+"/stop", nil, nil)
		}
	})
	// A send to the idle helper would make a fifth at work: refused.
	m.MustFail(map[string]any{"action": "send", "relay": "this", "session": helper, "text": "x", "wait_seconds": 0}, codeSessionLimit)

	env := m.MustOK(map[string]any{"action": "schedule", "session": helper, "text": "ping", "title": "Ping", "at": schFirstAt(clock)})
	id := str(env["schedule_id"])
	due := schTime(t, obj(t, env["schedule"], "schedule")["nextFireAt"], "nextFireAt")
	for clock.Now().Before(due.Add(2 * time.Minute)) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(r.Messages(helper, "schedule")); n != 0 {
		t.Fatalf("the schedule fired into a fifth session at work (%d firings)", n)
	}
	cur := schGet(t, m, id)
	wantEq(t, "firedCount over the cap", cur["firedCount"], float64(0))
	if cur["endReason"] != nil {
		t.Fatalf("the firing over the cap was dropped: %v", cur)
	}

	// One of the four ends: the waiting firing goes.
	stopped := r.Owner("POST", "/api/v1/sessions/"+busy[0]+"/stop", nil, nil)
	if stopped != 200 {
		t.Fatalf("stop: status %d", stopped)
	}
	Eventually(t, schWait, func() bool { return len(r.Messages(helper, "schedule")) == 1 }, "the waiting firing to reach the helper")
	// R18.15: a schedule another conversation set carries its setter's line first.
	wantEq(t, "text", r.Messages(helper, "schedule")[0]["text"], agentLine("setter", "scripted-1")+"\n"+schHeader(id, "Ping", "once")+"\nping")
}
