package relaytest

// End-to-end tests of schedules (SPEC §9) through the real MCP client against
// a real relay on a 60× clock: missed times across a restart. The other
// schedule and ask rules run on the domain fixture
// (domain/schedules_rules_test.go).

import (
	"context"
	"testing"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/store"
)

const (
	schWait = 20 * time.Second
)

// ---- helpers ---------------------------------------------------------------

// schClock is a clock 60× faster than the wall clock: 1 clock minute per real second.
func schClock() *clock.Scaled {
	return clock.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 60)
}

// schFirstAt is an `at` about one clock minute ahead, in whole seconds, given
// with every_minutes so that the grid starts at a known time.
func schFirstAt(clock *clock.Scaled) string {
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
	// Its turn runs before the stop: a repeat is skipped while the previous
	// firing's message still waits in the queue (R9.4, not this test's
	// subject), and the catch-up after the restart would race the drain.
	sc, err := r.App.Store().GetSchedule(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	r.WaitTurn(sc.LastTurn, schWait, store.TurnDone, store.TurnError, store.TurnStopped)

	r.Stop()
	stoppedAt := clock.Now()
	// At least 3.5 clock minutes pass with no relay running, the test's
	// subject, in two steps. The occurrence the relay queued before the stop
	// (at the latest the first grid time after it) waits in the job queue at
	// a wall time, which Skip does not move: the test waits on the clock
	// until it is due (at most 1 clock minute, 1 s of wall time), as it is
	// when a relay comes back after that long. Without that wait the leftover
	// job, not the restart, would fire the missed time, up to a clock minute
	// after the restart.
	queued := first.Add((stoppedAt.Sub(first)/time.Minute + 1) * time.Minute)
	if d := queued.Sub(clock.Now()); d > 0 {
		<-clock.NewTimer(d).C()
	}
	// The rest is skipped, to 1 s after the first grid time 3.5 minutes or
	// more after the stop: the catch-up has nearly a grid minute (1 s of wall
	// time) before the next grid time. A catch-up that took its time before a
	// grid time and queued its message after it (under load) is followed at
	// once by that grid time's own firing (right, R9.3), which the checks
	// below, reading the messages' times, would take for a second catch-up.
	backGrid := first.Add((stoppedAt.Add(3*time.Minute+30*time.Second).Sub(first) + time.Minute - 1) / time.Minute * time.Minute)
	clock.Skip(max(backGrid.Add(time.Second).Sub(clock.Now()), 0)) // 0: a timer late by minutes under load
	bootAt := clock.Now()
	t.Logf("the relay was down from %s to %s (clock), the missed occurrence queued for %s", stoppedAt, bootAt, queued)
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
	t.Logf("the missed time fired %s (clock) after the restart, the next at %s", r1.Sub(bootAt), r2c)
	if !r1.Before(backGrid.Add(time.Minute)) {
		t.Errorf("the missed time fired %s (clock) after the restart, at %s; want it at once, before the next grid time", r1.Sub(bootAt), r1)
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

// ---- asks -------------------------------------------------------------------
