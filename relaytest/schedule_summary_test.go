package relaytest

import (
	"testing"
	"time"
)

// Issue 13 (untested before): the full summary strings of the schedule
// actions — schedule into the own conversation and into another session,
// list_schedules, unschedule.
func TestScheduleSummaryStrings(t *testing.T) {
	clock := schClock()
	r := Start(t, Options{Clock: clock})
	a := r.NewSession(map[string]any{"title": "setter"})
	b := r.NewSession(map[string]any{"title": "target"})
	m := r.Connect(a.Token, nil)
	at := clock.Now().Add(time.Hour).Truncate(time.Second)
	next := at.UTC().Format("2006-01-02T15:04:05.000Z")

	env := m.MustOK(map[string]any{"action": "schedule", "text": "self", "title": "Self", "every_minutes": 90, "at": at.Format(time.RFC3339)})
	own := str(env["schedule_id"])
	wantEq(t, "own summary", env["summary"], "schedule → desk: every 90 min, next "+next+" ("+own+")")

	env = m.MustOK(map[string]any{"action": "schedule", "session": b.ID, "text": "ping", "title": "Ping", "at": at.Format(time.RFC3339)})
	into := str(env["schedule_id"])
	wantEq(t, "into summary", env["summary"], "schedule → desk session "+b.ID[:8]+": once, next "+next+" ("+into+")")

	env = m.MustOK(map[string]any{"action": "list_schedules"})
	wantEq(t, "list summary", env["summary"], "list_schedules → desk: 2 active, 0 ended in the last hour")

	env = m.MustOK(map[string]any{"action": "unschedule", "schedule_id": own})
	wantEq(t, "unschedule summary", env["summary"], "unschedule → desk: "+own+" ended")
	env = m.MustOK(map[string]any{"action": "list_schedules"})
	wantEq(t, "list summary after unschedule", env["summary"], "list_schedules → desk: 1 active, 1 ended in the last hour")
}
