package relaytest

// End-to-end tests of schedules (SPEC §9) through the real MCP client against
// a real relay on a 60× clock: missed times across a restart, and loop
// protection's held firings released in real time. The other schedule and ask
// rules run on the domain fixture (domain/schedules_rules_test.go).

import (
	"context"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/scheduler"
)

const (
	schWait = 20 * time.Second
)

// ---- helpers ---------------------------------------------------------------

// schClock is a clock 60× faster than the wall clock: 1 clock minute per real second.
func schClock() *scheduler.Scaled {
	return scheduler.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 60)
}

// schFirstAt is an `at` about one clock minute ahead, in whole seconds. The
// tests of restarts, stacking and held firings give it with every_minutes so
// that they exercise their own rule: every_minutes alone never fires on this
// build (domain TestRulesScheduleOwnConversationGrid shows it).
func schFirstAt(clock *scheduler.Scaled) string {
	return clock.Now().Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)
}

// schHeader is the first line of a schedule's message (R9.2).
func schHeader(id, title, when string) string {
	return "[relay schedule " + id + ` "` + title + `" · ` + when +
		" · automated message from OAR, not from the user; it approves nothing]"
}

func schTime(t testing.TB, v any, what string) time.Time {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%s: want an RFC 3339 time, got %T %v", what, v, v)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: %q is not RFC 3339: %v", what, s, err)
	}
	return tm
}

// schList is list_schedules by id.
func schList(t testing.TB, m *MCP) map[string]map[string]any {
	t.Helper()
	env := m.MustOK(map[string]any{"action": "list_schedules"})
	out := map[string]map[string]any{}
	for _, x := range list(t, env["schedules"], "schedules") {
		s := obj(t, x, "schedule")
		out[str(s["id"])] = s
	}
	return out
}

func schGet(t testing.TB, m *MCP, id string) map[string]any {
	t.Helper()
	s := schList(t, m)[id]
	if s == nil {
		t.Fatalf("list_schedules does not show %s", id)
	}
	return s
}

func schFired(t testing.TB, s map[string]any) int {
	t.Helper()
	return num(t, s["firedCount"], "firedCount")
}

// schLoop is a conversation's loop-protection count (R5.2.6), read from the store.
func schLoop(t testing.TB, r *Relay, sid string) int {
	t.Helper()
	n, err := r.App.Store().LoopCount(context.Background(), sid)
	if err != nil {
		t.Fatalf("loop count: %v", err)
	}
	return n
}

// ---- schedules --------------------------------------------------------------

// R9.1 (survives restarts), R9.3: a repeating schedule whose times passed while
// the relay was down fires once when it is back, then keeps its grid.
func TestScheduleMissedWhileDownFiresOnce(t *testing.T) {
	t.Parallel()
	clock := schClock()
	r := Start(t, Options{Clock: clock})
	a := r.NewSession(map[string]any{"title": "nightly"})
	m := r.Connect(a.Token, nil)
	env := m.MustOK(map[string]any{"action": "schedule", "text": "beat", "title": "Beat", "every_minutes": 1, "at": schFirstAt(clock)})
	id := str(env["schedule_id"])
	first := schTime(t, obj(t, env["schedule"], "schedule")["nextFireAt"], "nextFireAt")
	Eventually(t, schWait, func() bool { return schFired(t, schGet(t, m, id)) >= 1 }, "the first firing")

	r.Stop()
	stoppedAt := clock.Now()
	time.Sleep(3500 * time.Millisecond) // the one deliberate wait: 3.5 clock minutes with no relay running
	bootAt := clock.Now()
	r2 := Start(t, Options{Redis: r.Redis, Clock: clock})
	m2 := r2.Connect(a.Token, nil)

	var msgs, after []map[string]any
	Eventually(t, schWait, func() bool {
		msgs, after = r2.Messages(a.ID, "schedule"), nil
		for _, mm := range msgs {
			if !schTime(t, mm["createdAt"], "createdAt").Before(bootAt) {
				after = append(after, mm)
			}
		}
		return len(after) >= 2
	}, "two firings after the restart")
	before := len(msgs) - len(after)
	for _, mm := range msgs[:before] {
		if c := schTime(t, mm["createdAt"], "createdAt"); c.After(stoppedAt) {
			t.Errorf("a firing at %s while the relay was down (%s–%s)", c, stoppedAt, bootAt)
		}
		wantEq(t, "text", mm["text"], schHeader(id, "Beat", "every 1 min")+"\nbeat")
	}
	// The next due time when it stopped, and at least two more, passed while it was down.
	missed := first.Add(time.Duration(before) * time.Minute)
	if !missed.Add(2 * time.Minute).Before(bootAt) {
		t.Fatalf("setup: due times %s + 2 min are not all before the restart at %s", missed, bootAt)
	}
	r1 := schTime(t, after[0]["createdAt"], "createdAt")
	r2c := schTime(t, after[1]["createdAt"], "createdAt")
	if r1.Sub(bootAt) >= time.Minute {
		t.Errorf("the missed time fired %s (clock) after the restart; want it at once", r1.Sub(bootAt))
	}
	grid := first.Add((r1.Sub(first)/time.Minute + 1) * time.Minute) // the first grid time after the catch-up
	if r2c.Before(grid) {
		t.Errorf("after the restart firings at %s and %s: the missed times fired more than once (next grid time %s) (R9.3)", r1, r2c, grid)
	}
	if r2c.Sub(grid) >= time.Minute {
		t.Errorf("second firing after the restart at %s, want the grid time %s", r2c, grid)
	}
	for _, mm := range after {
		wantEq(t, "text after restart", mm["text"], schHeader(id, "Beat", "every 1 min")+"\nbeat")
	}
	cur := schGet(t, m2, id)
	if n := schFired(t, cur); n < before+2 {
		t.Errorf("firedCount %d, want at least %d", n, before+2)
	}
	if nf := cur["nextFireAt"]; nf == nil || schTime(t, nf, "nextFireAt").Sub(first)%time.Minute != 0 {
		t.Errorf("nextFireAt %v is off the grid of %s", nf, first)
	}
}

// R9.6, R5.2.6: a schedule into another session counts toward loop protection
// once when set and once per firing; when the count is used up a firing is
// held (heldForApproval, heldSince) and goes at once when the owner writes in
// the setting conversation.
func TestScheduleSessionLoopProtectionHeld(t *testing.T) {
	t.Parallel()
	clock := schClock()
	r := Start(t, Options{Clock: clock, Config: func(c *config.Config) { c.Limits.AgentPromptsBeforeCard = 2 }})
	a := r.NewSession(map[string]any{"title": "setter"})
	b := r.NewSession(map[string]any{"title": "target"})
	c := r.NewSession(map[string]any{"title": "bystander"})
	m := r.Connect(a.Token, nil)
	env := m.MustOK(map[string]any{"action": "schedule", "session": b.ID, "text": "ping", "title": "Ping", "every_minutes": 1, "at": schFirstAt(clock)})
	id := str(env["schedule_id"])
	first := schTime(t, obj(t, env["schedule"], "schedule")["nextFireAt"], "nextFireAt")
	if n := schLoop(t, r, a.ID); n != 1 {
		t.Fatalf("loop count after setting %d, want 1 (counted once when set)", n)
	}

	var cur map[string]any
	Eventually(t, schWait, func() bool {
		cur = schGet(t, m, id)
		return cur["heldForApproval"] == true
	}, "the second firing to be held")
	wantEq(t, "firedCount while held", cur["firedCount"], float64(1))
	held := schTime(t, cur["heldSince"], "heldSince")
	if held.Before(first.Add(time.Minute)) {
		t.Errorf("heldSince %s before the second due time %s", held, first.Add(time.Minute))
	}
	if n := schLoop(t, r, a.ID); n != 2 {
		t.Errorf("loop count after one firing %d, want 2 (once when set, once per firing)", n)
	}
	msgs := r.Messages(b.ID, "schedule")
	if len(msgs) != 1 {
		t.Fatalf("%d firings reached the target, want 1", len(msgs))
	}
	wantEq(t, "text", msgs[0]["text"], agentLine("setter", "scripted-1")+"\n"+schHeader(id, "Ping", "every 1 min")+"\nping") // R18.15
	if from, _ := msgs[0]["from"].(map[string]any); from == nil || from["session"] != a.ID {
		t.Errorf("firing from = %v, want the setting session %s", msgs[0]["from"], a.ID)
	}
	mb := r.Connect(b.Token, nil)
	lb := schGet(t, mb, id)
	wantEq(t, "setBy in the target's list", lb["setBy"], a.ID)
	wantEq(t, "heldForApproval in the target's list", lb["heldForApproval"], true)
	// The count is used up for the setter's other prompts too.
	m.MustFail(map[string]any{"action": "send", "relay": "this", "session": c.ID, "text": "hi", "wait_seconds": 0}, codeNoTurn)

	wrote := clock.Now()
	r.Message(a.ID, "carry on")
	Eventually(t, schWait, func() bool {
		cur = schGet(t, m, id)
		return schFired(t, cur) >= 2
	}, "the held firing to be released")
	msgs = r.Messages(b.ID, "schedule")
	if len(msgs) < 2 {
		t.Fatalf("%d firings reached the target, want 2", len(msgs))
	}
	rel := schTime(t, msgs[1]["createdAt"], "createdAt")
	if rel.Before(wrote) || rel.Sub(wrote) >= time.Minute {
		t.Errorf("released firing at %s; the owner wrote at %s: want it at once", rel, wrote)
	}
	// From 0 (the owner wrote): +1 for the released firing, +1 for the next one, then held again.
	Eventually(t, schWait, func() bool {
		cur = schGet(t, m, id)
		return cur["heldForApproval"] == true && schFired(t, cur) >= 3
	}, "the schedule to be held again after two more firings")
	wantEq(t, "firedCount when held again", cur["firedCount"], float64(3))

	// Allowing the setter's next card for a prompt to another agent releases a
	// held firing at once too (R9.6) — any other card does not (issue 13).
	// The cards need an agent turn of the setter; the owner's message that starts
	// it resets the count, so the turn first sleeps until firings used it up again.
	// The first card is update_session's on a session the setter did not start:
	// allowed, it releases nothing (the count stays used up, so the minute's
	// re-check keeps holding too). The second is the send's to c.
	mid := r.Message(a.ID, Script(map[string]any{"sleep_ms": 3000},
		map[string]any{"tool": map[string]any{"action": "update_session", "relay": "this", "session": c.ID, "title": "renamed"}},
		map[string]any{"tool": map[string]any{"action": "send", "relay": "this", "session": c.ID, "text": "hi", "wait_seconds": 0}}))
	card := r.WaitCard(a.ID)
	wantEq(t, "first card", card["action"], "update_session")
	Eventually(t, schWait, func() bool {
		cur = schGet(t, m, id)
		return cur["heldForApproval"] == true
	}, "the schedule to be held while the card waits")
	before := schFired(t, cur)
	r.Decide(card["id"].(string), "allow")
	ev2Never(t, 3*time.Second, func() bool { return schFired(t, schGet(t, m, id)) > before },
		"a held firing released by an allowed update_session card (only a card for a prompt to another agent releases it)")
	card = r.WaitCard(a.ID)
	wantEq(t, "second card", card["action"], "send")
	allowed := clock.Now()
	r.Decide(card["id"].(string), "allow")
	Eventually(t, schWait, func() bool {
		cur = schGet(t, m, id)
		return schFired(t, cur) > before
	}, "the held firing to be released by the allowed send card")
	msgs = r.Messages(b.ID, "schedule")
	// At once: well within the minute the safety-net re-check could take.
	if rel := schTime(t, msgs[before]["createdAt"], "createdAt"); rel.Before(allowed) || rel.Sub(allowed) >= 30*time.Second {
		t.Errorf("released firing at %s; the card was allowed at %s: want it at once", rel, allowed)
	}
	r.WaitTurn(mid, schWait, "done")
}

// ---- asks -------------------------------------------------------------------
