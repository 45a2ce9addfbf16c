package domain

// Questions, id prefixes and the schedule actions' summaries (R3.7, R10.6,
// issue 13), moved down from relaytest.

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Issue 13 (R10.6): list_questions with session lists every open ask about
// that session, whoever asked it, not only the caller's; without session
// only the caller's own.
func TestRulesAskListQuestionsAboutSessionListsEveryOpenAsk(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "a"})
	b := f.session(NewSession{Title: "b"})
	c := f.session(NewSession{Title: "c"})
	own := f.askSet(b, map[string]any{"question": "b's own?"})
	byC := f.askSet(c, map[string]any{"relay": "this", "session": b, "question": "c about b?"})
	gone := f.askSet(c, map[string]any{"relay": "this", "session": b, "question": "withdrawn"})
	f.ok(c, map[string]any{"action": "withdraw", "question_id": gone})
	byA := f.askSet(a, map[string]any{"relay": "this", "session": b, "question": "a about b?"})
	f.askSet(a, map[string]any{"relay": "this", "session": c, "question": "a about c?"})

	env := f.ok(a, map[string]any{"action": "list_questions", "session": b})
	type listed struct {
		Status  any
		AskedBy any
	}
	got := map[string]listed{}
	qs, _ := env["questions"].([]any)
	for _, x := range qs {
		q, _ := x.(map[string]any)
		got[q["id"].(string)] = listed{q["status"], q["askedBy"]}
	}
	want := map[string]listed{own: {"pending", b}, byC: {"pending", c}, byA: {"pending", nil}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the open asks about b, and only they (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("list_questions → desk: 3 open, 0 closed in the last day", env["summary"]); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	// Without session: only the caller's own asks.
	env = f.ok(a, map[string]any{"action": "list_questions"})
	if qs, _ := env["questions"].([]any); len(qs) != 2 {
		t.Errorf("list_questions without session: %d asks, want the caller's 2: %v", len(qs), env["questions"])
	}
}

// R3.7: schedule and ask ids are accepted as a unique prefix of 8 or more characters.
func TestRulesAskIDPrefixes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "a"})
	id := f.schSet(a, map[string]any{"text": "later", "every_minutes": 60})
	f.actFail(a, map[string]any{"action": "unschedule", "schedule_id": id[:7]}, CodeNotFound)
	if env := f.ok(a, map[string]any{"action": "unschedule", "schedule_id": id[:10]}); env["schedule_id"] != id {
		t.Fatalf("unschedule by prefix ended %v, want %s", env["schedule_id"], id)
	}
	qid := f.askSet(a, map[string]any{"question": "ok?"})
	env := f.ok(a, map[string]any{"action": "withdraw", "question_id": qid[:9]})
	if diff := cmp.Diff([]any{qid, "withdrawn"}, []any{env["question_id"], env["status"]}); diff != "" {
		t.Errorf("withdraw by prefix (-want +got):\n%s", diff)
	}
}

// Issue 13: the full summary strings of the schedule actions — schedule
// into the own conversation and into another session, list_schedules,
// unschedule.
func TestRulesAskScheduleSummaryStrings(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "setter"})
	b := f.session(NewSession{Title: "target"})
	at := f.clk.Now().Add(time.Hour).Truncate(time.Second)
	next := at.UTC().Format("2006-01-02T15:04:05.000Z")
	summary := func(args map[string]any) (string, any) {
		t.Helper()
		env := f.ok(a, args)
		id, _ := env["schedule_id"].(string)
		return id, env["summary"]
	}

	own, sum := summary(map[string]any{"action": "schedule", "text": "self", "title": "Self", "every_minutes": 90, "at": at.Format(time.RFC3339)})
	if diff := cmp.Diff("schedule → desk: every 90 min, next "+next+" ("+own+")", sum); diff != "" {
		t.Errorf("own summary (-want +got):\n%s", diff)
	}
	into, sum := summary(map[string]any{"action": "schedule", "session": b, "text": "ping", "title": "Ping", "at": at.Format(time.RFC3339)})
	if diff := cmp.Diff("schedule → desk session "+b[:8]+": once, next "+next+" ("+into+")", sum); diff != "" {
		t.Errorf("into summary (-want +got):\n%s", diff)
	}
	if _, sum = summary(map[string]any{"action": "list_schedules"}); sum != "list_schedules → desk: 2 active, 0 ended in the last hour" {
		t.Errorf("list summary %q", sum)
	}
	if _, sum = summary(map[string]any{"action": "unschedule", "schedule_id": own}); sum != "unschedule → desk: "+own+" ended" {
		t.Errorf("unschedule summary %q", sum)
	}
	if _, sum = summary(map[string]any{"action": "list_schedules"}); sum != "list_schedules → desk: 1 active, 1 ended in the last hour" {
		t.Errorf("list summary after unschedule %q", sum)
	}
}
