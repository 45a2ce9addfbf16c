package domain

// The schedule rules on the simulated clock: a firing happens when the
// clock reaches its time, not a second before, with no sleeping.

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func scheduleHeaderText(id, title, when string) string {
	return "[relay schedule " + id + ` "` + title + `" · ` + when +
		" · automated message from OAR, not from the user; it approves nothing]"
}

// listedSchedules is list_schedules' schedules by id.
func (f *fixture) listedSchedules(caller string) map[string]map[string]any {
	f.t.Helper()
	env := f.call(caller, map[string]any{"action": "list_schedules"})
	if env["ok"] != true {
		f.t.Fatalf("list_schedules: %v", env)
	}
	out := map[string]map[string]any{}
	list, _ := env["schedules"].([]any)
	for _, v := range list {
		m, _ := v.(map[string]any)
		id, _ := m["id"].(string)
		out[id] = m
	}
	return out
}

// ownerSchedules is the ids of the owner's list of active schedules, sorted.
func (f *fixture) ownerSchedules() []string {
	f.t.Helper()
	all, err := f.r.Schedules(f.ctx)
	if err != nil {
		f.t.Fatalf("schedules: %v", err)
	}
	var ids []string
	for _, v := range all {
		ids = append(ids, v.ID)
	}
	sort.Strings(ids)
	return ids
}

// R9.1, R9.2: a schedule with only `at` fires once, at that time (any zone
// offset), and ends "fired"; list_schedules still shows it, unschedule no more.
func TestRulesScheduleAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "alarm"})
	atA := f.clk.Now().Add(2 * time.Minute)
	atB := atA.Add(2 * time.Minute)
	envA := f.call(a, map[string]any{"action": "schedule", "relay": "this", "text": "once-a", "title": "Alarm A", "at": atA.Format(time.RFC3339)})
	envB := f.call(a, map[string]any{"action": "schedule", "relay": "desk", "text": "once-b", "title": "Alarm B",
		"at": atB.In(time.FixedZone("CET", 3600)).Format(time.RFC3339)})
	idA, _ := envA["schedule_id"].(string)
	idB, _ := envB["schedule_id"].(string)
	for _, c := range []struct {
		env map[string]any
		id  string
		at  time.Time
	}{{envA, idA, atA}, {envB, idB, atB}} {
		want := map[string]any{"id": c.id, "once": true, "everyMinutes": nil, "nextFireAt": ts(c.at)}
		got, _ := c.env["schedule"].(map[string]any)
		if diff := cmp.Diff(want, got, cmpIgnoreKeys("title")); diff != "" {
			t.Errorf("schedule %s (-want +got):\n%s", c.id, diff)
		}
	}
	active := []string{idA, idB}
	sort.Strings(active)
	if diff := cmp.Diff(active, f.ownerSchedules()); diff != "" {
		t.Errorf("the owner's active schedules (-want +got):\n%s", diff)
	}

	steps := []struct {
		name  string
		by    time.Duration
		fired []string // the schedule messages' texts after the step
	}{
		{"a second before A", 2*time.Minute - time.Second, nil},
		{"A's time", time.Second, []string{scheduleHeaderText(idA, "Alarm A", "once") + "\nonce-a"}},
		{"a second before B", 2*time.Minute - time.Second, []string{scheduleHeaderText(idA, "Alarm A", "once") + "\nonce-a"}},
		{"B's time", time.Second, []string{
			scheduleHeaderText(idA, "Alarm A", "once") + "\nonce-a", scheduleHeaderText(idB, "Alarm B", "once") + "\nonce-b"}},
	}
	for _, st := range steps {
		f.advance(st.by)
		var got []string
		for _, m := range f.history(a, "schedule") {
			got = append(got, m.Text)
		}
		if diff := cmp.Diff(st.fired, got); diff != "" {
			t.Fatalf("%s: schedule messages (-want +got):\n%s", st.name, diff)
		}
	}
	// Each firing's turn ran: the scripted agent echoed it.
	var replies []string
	for _, m := range f.history(a, "assistant") {
		replies = append(replies, m.Text)
	}
	if len(replies) != 2 {
		t.Errorf("replies %q, want one per firing", replies)
	}
	if diff := cmp.Diff([]string(nil), f.ownerSchedules()); diff != "" {
		t.Errorf("the owner's active schedules once both fired (-want +got):\n%s", diff)
	}
	ls := f.listedSchedules(a)
	for _, c := range []struct {
		id string
		at time.Time
	}{{idA, atA}, {idB, atB}} {
		got := ls[c.id]
		want := map[string]any{"endReason": "fired", "firedCount": float64(1), "nextFireAt": nil, "once": true,
			"at": ts(c.at), "lastFiredAt": ts(c.at)}
		sub := map[string]any{}
		for k := range want {
			sub[k] = got[k]
		}
		if diff := cmp.Diff(want, sub); diff != "" {
			t.Errorf("listed %s (-want +got):\n%s", c.id, diff)
		}
	}
	if diff := cmp.Diff(outcome{Code: CodeNotFound, Has: true}, outcomeOf(f.call(a, map[string]any{"action": "unschedule", "schedule_id": idA}), "")); diff != "" {
		t.Errorf("unschedule of an ended schedule (-want +got):\n%s", diff)
	}
	// Over an hour on nothing fired again, and the ended schedules left the list.
	f.advance(time.Hour + time.Second)
	if n := len(f.history(a, "schedule")); n != 2 {
		t.Errorf("%d schedule messages an hour on, want 2", n)
	}
	if ls := f.listedSchedules(a); len(ls) != 0 {
		t.Errorf("listed an hour after they ended: %v", ls)
	}
}
