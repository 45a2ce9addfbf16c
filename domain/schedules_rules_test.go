package domain

// The schedule (§9) and ask (§10) rule suites moved down from relaytest:
// limits, bad input, unschedule / Cancel / archive, the owner's lists, the
// inbox, answers and dismissals, on the simulated clock.

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
)

// R9.9: at most N schedules fire into one conversation and one conversation
// sets at most N for other sessions (REMOTE_RELAY_SCHEDULE_LIMIT); nothing is
// created; an ended schedule frees its place.
func TestRulesScheduleLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) {
		l.SchedulesIntoConversation = 2
		l.SchedulesForOthers = 2
	}})
	a := f.session(NewSession{Title: "a"})
	b := f.session(NewSession{Title: "b"})
	c := f.session(NewSession{Title: "c"})
	d := f.session(NewSession{Title: "d"})
	e := f.session(NewSession{Title: "e"})
	every := func(extra map[string]any) map[string]any {
		args := map[string]any{"action": "schedule", "text": "later", "every_minutes": 60}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	own1 := f.schSet(a, every(nil))
	f.schSet(a, every(nil))
	limit := outcome{Code: CodeScheduleLimit, Has: true}
	if diff := cmp.Diff(limit, outcomeOf(f.call(a, every(nil)), "Nothing was scheduled.")); diff != "" {
		t.Errorf("a third into a (-want +got):\n%s", diff)
	}
	f.schSet(a, every(map[string]any{"session": b}))
	f.schSet(a, every(map[string]any{"session": c}))
	if diff := cmp.Diff(limit, outcomeOf(f.call(a, every(map[string]any{"session": d})), "Nothing was scheduled.")); diff != "" {
		t.Errorf("a third for others (-want +got):\n%s", diff)
	}
	f.schSet(e, every(map[string]any{"session": b})) // the second into b
	if diff := cmp.Diff(limit, outcomeOf(f.call(d, every(map[string]any{"session": b})), "")); diff != "" {
		t.Errorf("a third into b (-want +got):\n%s", diff)
	}
	if n := len(f.schOwnerList()); n != 5 {
		t.Fatalf("%d active schedules, want 5 (refused ones create nothing)", n)
	}
	f.ok(a, map[string]any{"action": "unschedule", "schedule_id": own1})
	f.schSet(a, every(nil))
}

// R9.1, R3.3, R3.4a, R4.3: bad input schedules nothing.
func TestRulesScheduleBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "archived"})
	if _, err := f.r.OwnerArchive(f.ctx, b); err != nil {
		t.Fatalf("archive: %v", err)
	}
	past := f.clk.Now().Add(-time.Minute).Format(time.RFC3339)
	future := f.clk.Now().Add(time.Hour)
	cases := []struct {
		name string
		args map[string]any
		code string
	}{
		{"at in the past", map[string]any{"text": "x", "at": past}, CodeInvalidInput},
		{"at with a space", map[string]any{"text": "x", "at": future.Format("2006-01-02 15:04:05Z07:00")}, CodeInvalidInput},
		{"at in words", map[string]any{"text": "x", "at": "tomorrow 9am"}, CodeInvalidInput},
		{"at without zone", map[string]any{"text": "x", "at": future.Format("2006-01-02T15:04:05")}, CodeInvalidInput},
		{"every 0", map[string]any{"text": "x", "every_minutes": 0}, CodeInvalidInput},
		{"every -1", map[string]any{"text": "x", "every_minutes": -1}, CodeInvalidInput},
		{"every 525601", map[string]any{"text": "x", "every_minutes": 525601}, CodeInvalidInput},
		{"every 1.5", map[string]any{"text": "x", "every_minutes": 1.5}, CodeInvalidInput},
		{"empty text", map[string]any{"text": "", "every_minutes": 5}, CodeInvalidInput},
		{"blank text", map[string]any{"text": "   ", "every_minutes": 5}, CodeInvalidInput},
		{"no text", map[string]any{"every_minutes": 5}, CodeInvalidInput},
		{"title of 201", map[string]any{"text": "x", "every_minutes": 5, "title": strings.Repeat("t", 201)}, CodeInvalidInput},
		{"neither at nor every", map[string]any{"text": "x", "title": "when?"}, CodeInvalidInput},
		{"unknown session", map[string]any{"text": "x", "every_minutes": 5, "session": schNoSession}, CodeNotFound},
		{"relay that is not paired", map[string]any{"text": "x", "every_minutes": 5, "relay": "other-box"}, CodeUnknownRelay},
	}
	for _, c := range cases {
		c.args["action"] = "schedule"
		if diff := cmp.Diff(outcome{Code: c.code, Has: true}, outcomeOf(f.call(a, c.args), "Nothing was")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	// A schedule into an archived session is refused (the code is not fixed by the SPEC).
	if env := f.call(a, map[string]any{"action": "schedule", "text": "x", "every_minutes": 5, "session": b}); env["ok"] != false {
		t.Errorf("schedule into an archived session: want a failure, got %v", env)
	}
	for _, args := range []map[string]any{
		{"action": "list_schedules", "relay": "other-box"},
		{"action": "unschedule", "relay": "other-box", "schedule_id": "sch_0123456789"},
	} {
		if diff := cmp.Diff(outcome{Code: CodeUnknownRelay, Has: true}, outcomeOf(f.call(a, args), "")); diff != "" {
			t.Errorf("%v (-want +got):\n%s", args["action"], diff)
		}
	}
	if l := f.listedSchedules(a); len(l) != 0 {
		t.Fatalf("bad input created schedules: %v", l)
	}
	if l := f.schOwnerList(); len(l) != 0 {
		t.Fatalf("bad input created schedules: %v", l)
	}
	// The bounds themselves are accepted.
	edge1 := f.schSet(a, map[string]any{"text": "x", "every_minutes": 525600, "title": strings.Repeat("t", 200)})
	edge2 := f.schSet(a, map[string]any{"text": "x", "every_minutes": 1})
	for _, id := range []string{edge1, edge2} {
		f.ok(a, map[string]any{"action": "unschedule", "schedule_id": id})
	}
	if diff := cmp.Diff(outcome{Code: CodeInvalidInput, Has: true}, outcomeOf(f.call(a, map[string]any{"action": "unschedule"}), "")); diff != "" {
		t.Errorf("unschedule without an id (-want +got):\n%s", diff)
	}
}

// R9.7–R9.9, R7.16, §12: unschedule by the setter or the target (another
// conversation's: NOT_FOUND), the owner's Cancel, archiving the target or the
// setter ends the schedules, the owner's list shows active ones.
func TestRulesScheduleUnscheduleCancelArchive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "setter"})
	b := f.session(NewSession{Title: "bee"})
	c := f.session(NewSession{Title: "sea"})
	d := f.session(NewSession{Title: "dee"})
	e := f.session(NewSession{Title: "eve"})
	set := func(caller, target string) string {
		args := map[string]any{"text": "later", "every_minutes": 60}
		if target != "" {
			args["session"] = target
		}
		return f.schSet(caller, args)
	}
	own, intoB, intoC, intoD := set(a, ""), set(a, b), set(a, c), set(a, d)
	bOwn, eIntoB := set(b, ""), set(e, b)

	ol := f.schOwnerList()
	if diff := cmp.Diff(schSorted(own, intoB, intoC, intoD, bOwn, eIntoB), schKeys(ol)); diff != "" {
		t.Fatalf("the owner's schedules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"setBy": a, "session": map[string]any{"id": b, "title": "bee"}},
		map[string]any{"setBy": ol[intoB]["setBy"], "session": ol[intoB]["session"]}); diff != "" {
		t.Errorf("the owner's list of %s (-want +got):\n%s", intoB, diff)
	}
	if diff := cmp.Diff(schSorted(own, intoB, intoC, intoD), schKeys(f.listedSchedules(a))); diff != "" {
		t.Errorf("a's list_schedules (-want +got):\n%s", diff)
	}
	lb := f.listedSchedules(b)
	if diff := cmp.Diff(schSorted(intoB, bOwn, eIntoB), schKeys(lb)); diff != "" {
		t.Errorf("b's list_schedules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(any(a), lb[intoB]["setBy"]); diff != "" {
		t.Errorf("setBy seen by the target (-want +got):\n%s", diff)
	}
	if got := schNoKeys(lb[bOwn], "setBy"); got != nil {
		t.Errorf("b's own schedule has %v", got)
	}

	// Another conversation's schedule is not found.
	notFound := outcome{Code: CodeNotFound, Has: true}
	for _, c := range []struct{ caller, id string }{{b, own}, {c, intoB}, {b, "sch_000000000000"}} {
		if diff := cmp.Diff(notFound, outcomeOf(f.call(c.caller, map[string]any{"action": "unschedule", "schedule_id": c.id}), "")); diff != "" {
			t.Errorf("unschedule %s by %s (-want +got):\n%s", c.id, c.caller, diff)
		}
	}
	env := f.ok(a, map[string]any{"action": "unschedule", "schedule_id": own})
	if diff := cmp.Diff(any(own), env["schedule_id"]); diff != "" {
		t.Errorf("unschedule schedule_id (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(notFound, outcomeOf(f.call(a, map[string]any{"action": "unschedule", "schedule_id": own}), "")); diff != "" {
		t.Errorf("unschedule twice (-want +got):\n%s", diff)
	}
	f.ok(b, map[string]any{"action": "unschedule", "relay": "this", "schedule_id": intoB}) // the target may end it (R9.8)

	if _, err := f.r.CancelSchedule(f.ctx, intoC); err != nil {
		t.Fatalf("owner Cancel: %v", err)
	}
	_, err := f.r.CancelSchedule(f.ctx, "sch_000000000000")
	if diff := cmp.Diff(CodeNotFound, schCode(err)); diff != "" {
		t.Errorf("owner Cancel of an unknown schedule (-want +got):\n%s", diff)
	}
	if _, err := f.r.CancelSchedule(f.ctx, intoC); schCode(err) == CodeInternal {
		t.Errorf("owner Cancel of an ended schedule: %v", err)
	}
	for _, sid := range []string{d, e} { // target of intoD; setter of eIntoB
		if _, err := f.r.OwnerArchive(f.ctx, sid); err != nil {
			t.Fatalf("archive: %v", err)
		}
	}

	la := f.listedSchedules(a)
	for id, want := range map[string]string{own: "unscheduled", intoB: "unscheduled", intoC: "unscheduled", intoD: "archived"} {
		s := la[id]
		if s == nil {
			t.Errorf("%s is not listed as ended within the hour", id)
			continue
		}
		if diff := cmp.Diff(map[string]any{"endReason": want, "nextFireAt": nil},
			map[string]any{"endReason": s["endReason"], "nextFireAt": s["nextFireAt"]}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", id, diff)
		}
	}
	lb = f.listedSchedules(b)
	if diff := cmp.Diff([]any{"archived", nil}, []any{lb[eIntoB]["endReason"], lb[bOwn]["endReason"]}); diff != "" {
		t.Errorf("endReason of the schedule set by an archived conversation, and of b's own (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{bOwn}, schKeys(f.schOwnerList())); diff != "" {
		t.Errorf("the owner's schedules after ending (-want +got):\n%s", diff)
	}
}

// R4.2, R9.1, R10.4: with agent sessions off, schedules fail with
// REMOTE_RELAY_DISABLED even for the own conversation, while ask (own),
// list_questions and withdraw work; ask with session is DISABLED.
func TestRulesScheduleAndAskAgentSessionsOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{})
	a := f.session(NewSession{Title: "alone"})
	b := f.session(NewSession{Title: "other"})
	for _, args := range []map[string]any{
		{"action": "schedule", "text": "later", "every_minutes": 5},
		{"action": "schedule", "relay": "this", "text": "later", "at": f.clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
		{"action": "list_schedules"},
		{"action": "unschedule", "schedule_id": "sch_000000000000"},
		{"action": "ask", "question": "ok?", "session": b},
	} {
		if diff := cmp.Diff(outcome{Code: CodeDisabled, Has: true}, outcomeOf(f.call(a, args), "")); diff != "" {
			t.Errorf("%v (-want +got):\n%s", args, diff)
		}
	}
	if l := f.schOwnerList(); len(l) != 0 {
		t.Fatalf("schedules created while agent sessions are off: %v", l)
	}
	if l := f.askInbox(); len(l) != 0 {
		t.Fatalf("asks created by refused calls: %v", l)
	}
	q1 := f.askSet(a, map[string]any{"question": "Keep the old API?"})
	q2 := f.askSet(a, map[string]any{"relay": "this", "question": "Rename the module?"})
	f.ok(a, map[string]any{"action": "withdraw", "question_id": q2})
	qs := f.askQuestions(a, nil)
	if diff := cmp.Diff([]any{"pending", "withdrawn"}, []any{qs[q1]["status"], qs[q2]["status"]}); diff != "" {
		t.Errorf("statuses of q1, q2 (-want +got):\n%s", diff)
	}
	// The answer still reaches the asking conversation.
	f.askAnswer(q1, InboxAnswer{Answer: "yes"})
	f.askEvent(a, "question_answered "+q1)
}

// R10.1: open asks per asking conversation and per concerned session are
// limited (REMOTE_RELAY_QUESTION_LIMIT); answering or withdrawing frees a place.
func TestRulesAskLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) {
		l.OpenAsksPerConversation = 2
		l.OpenAsksPerSession = 2
	}})
	a := f.session(NewSession{Title: "a"})
	b := f.session(NewSession{Title: "b"})
	c := f.session(NewSession{Title: "c"})
	d := f.session(NewSession{Title: "d"})
	limit := outcome{Code: CodeQuestionLimit, Has: true}
	q1 := f.askSet(a, map[string]any{"question": "one?"})
	f.askSet(a, map[string]any{"question": "two?"})
	if diff := cmp.Diff(limit, outcomeOf(f.call(a, map[string]any{"action": "ask", "question": "three?"}), "Nothing was asked.")); diff != "" {
		t.Errorf("a third ask (-want +got):\n%s", diff)
	}
	f.ok(a, map[string]any{"action": "withdraw", "question_id": q1})
	q3 := f.askSet(a, map[string]any{"question": "three?"})
	if diff := cmp.Diff(limit, outcomeOf(f.call(a, map[string]any{"action": "ask", "question": "four?"}), "")); diff != "" {
		t.Errorf("a third ask after a withdrawal (-want +got):\n%s", diff)
	}
	f.askAnswer(q3, InboxAnswer{Answer: "ok"})
	f.askSet(a, map[string]any{"question": "four?"})

	f.askSet(c, map[string]any{"question": "b one?", "session": b})
	f.askSet(d, map[string]any{"question": "b two?", "session": b})
	if diff := cmp.Diff(limit, outcomeOf(f.call(d, map[string]any{"action": "ask", "question": "b three?", "session": b}), "")); diff != "" {
		t.Errorf("a third ask about b (-want +got):\n%s", diff)
	}
	if n := len(f.askInbox()); n != 4 {
		t.Errorf("%d open asks, want 4 (refused ones ask nothing)", n)
	}
}

// R10.8, R7.16: archiving the session an ask concerns ends the open ask
// (withdrawn, nobody told); the inbox no longer lists it.
func TestRulesAskEndsWhenSessionArchived(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "asker"})
	b := f.session(NewSession{Title: "doomed"})
	qb := f.askSet(a, map[string]any{"question": "Keep it?", "session": b})
	qa := f.askSet(a, map[string]any{"question": "Later?"})
	if _, err := f.r.OwnerArchive(f.ctx, b); err != nil {
		t.Fatalf("archive: %v", err)
	}
	qs := f.askQuestions(a, nil)
	if diff := cmp.Diff([]any{"withdrawn", "pending"}, []any{qs[qb]["status"], qs[qa]["status"]}); diff != "" {
		t.Errorf("statuses of the ask about the archived session and of the other (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{qa}, schKeys(f.askInbox())); diff != "" {
		t.Errorf("inbox (-want +got):\n%s", diff)
	}
	if _, err := f.r.AnswerAsk(f.ctx, qb, InboxAnswer{Answer: "yes"}); err == nil || schCode(err) == CodeInternal {
		t.Errorf("answering an ended ask: %v, want a refusal (4xx)", err)
	}
	// Nobody is told: the next event in the asker is the later answer, alone.
	f.askAnswer(qa, InboxAnswer{Answer: "yes"})
	f.askEvent(a, "question_answered "+qa)
	msgs := f.history(a, "event")
	if len(msgs) != 1 {
		t.Errorf("%d event messages in the asker, want 1 (the answer): %v", len(msgs), msgs)
	}
	for _, m := range msgs {
		if strings.Contains(m.Text, qb) {
			t.Errorf("an event told about the ended ask: %q", m.Text)
		}
	}
}

// R9.1, R9.2, R9.7, R9.6 (own conversation not counted): every_minutes 1 into
// the own conversation fires on the grid, never before its nextFireAt, with
// the exact header; the scripted agent answers the text; list_schedules shows
// firedCount, lastFiredAt and nextFireAt. The same with `at` (whole seconds)
// as the grid's first time plus every_minutes 1.
func TestRulesScheduleOwnConversationGrid(t *testing.T) {
	t.Parallel()
	for _, withAt := range []bool{false, true} {
		t.Run(map[bool]string{false: "every", true: "at+every"}[withAt], func(t *testing.T) {
			t.Parallel()
			schGrid(t, withAt)
		})
	}
}

func schGrid(t *testing.T, withAt bool) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	f.clk.Advance(1234 * time.Millisecond) // off the whole second, as a real clock is
	a := f.session(NewSession{Title: "ticker"})
	setAt := f.clk.Now()
	args := map[string]any{"action": "schedule", "text": "tick", "title": "Ticker", "every_minutes": 1}
	var at time.Time
	if withAt {
		at = setAt.Add(time.Minute).Truncate(time.Second)
		args["at"] = at.Format(time.RFC3339)
	}
	env := f.ok(a, args)
	id, _ := env["schedule_id"].(string)
	if !schIDRe.MatchString(id) {
		t.Fatalf("schedule_id %q", id)
	}
	sum, _ := env["summary"].(string)
	if diff := cmp.Diff([]any{"desk", true}, []any{env["relay"], strings.Contains(sum, "schedule → desk") && strings.Contains(sum, id)}); diff != "" {
		t.Errorf("relay, summary %q (-want +got):\n%s", sum, diff)
	}
	sc, _ := env["schedule"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"id": id, "title": "Ticker", "everyMinutes": float64(1), "once": false}, sc, cmpIgnoreKeys("nextFireAt")); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
	first := f.schTime(sc["nextFireAt"], "schedule.nextFireAt")
	if !first.After(setAt) || first.After(setAt.Add(time.Minute+30*time.Second)) {
		t.Fatalf("first nextFireAt %s: want within one interval after %s", first, setAt)
	}
	if withAt && !first.Equal(at) {
		t.Fatalf("first nextFireAt %s, want at %s", first, at)
	}

	ls := f.listedSchedules(a)[id]
	wantAt := any(nil)
	if withAt {
		wantAt = ts(at)
	}
	if diff := cmp.Diff(map[string]any{"session": map[string]any{"id": a, "title": "ticker"}, "title": "Ticker", "textStart": "tick",
		"at": wantAt, "everyMinutes": float64(1), "once": false}, ls, cmpIgnoreKeys("id", "nextFireAt", "lastFiredAt", "firedCount")); diff != "" {
		t.Errorf("list_schedules (-want +got):\n%s", diff)
	}

	// The nextFireAt seen while firedCount was n is the due time of firing n+1.
	due := map[int]time.Time{}
	var cur map[string]any
	for n := 0; n < 3; n++ {
		due[n] = f.schTime(f.listedSchedules(a)[id]["nextFireAt"], "nextFireAt")
		cur = f.schFired(a, id, n+1, 2*time.Minute)
	}
	msgs := f.history(a, "schedule")
	if len(msgs) != 3 {
		t.Fatalf("firedCount 3 but %d schedule messages", len(msgs))
	}
	header := scheduleHeaderText(id, "Ticker", "every 1 min")
	for k := 1; k <= 3; k++ {
		msg, d := msgs[k-1], due[k-1]
		if diff := cmp.Diff(header+"\ntick", msg.Text); diff != "" {
			t.Errorf("firing %d text (-want +got):\n%s", k, diff)
		}
		if msg.CreatedAt.Before(d) {
			t.Errorf("firing %d at %s, before its nextFireAt %s (R9.2)", k, msg.CreatedAt, d)
		}
		if off := d.Sub(first) % time.Minute; off != 0 {
			t.Errorf("firing %d was due at %s, off the grid of %s by %s (R9.3)", k, d, first, off)
		}
		if late := msg.CreatedAt.Sub(d); late >= time.Minute {
			t.Errorf("firing %d came %s (clock) after its due time %s: not on the grid", k, late, d)
		}
		if k > 1 && !d.Equal(due[k-2].Add(time.Minute)) {
			t.Errorf("firing %d due %s, want the next grid time %s", k, d, due[k-2].Add(time.Minute))
		}
		tr, err := f.r.Turn(f.ctx, msg.ID)
		if err != nil {
			t.Fatalf("turn of firing %d: %v", k, err)
		}
		if diff := cmp.Diff("echo: tick", tr.Reply); diff != "" {
			t.Errorf("firing %d reply (-want +got):\n%s", k, diff)
		}
	}
	if got := schNoKeys(cur, "setBy", "skippedCount", "heldForApproval", "heldSince", "endReason"); got != nil {
		t.Errorf("the own schedule has %v", got)
	}
	last := f.schTime(cur["lastFiredAt"], "lastFiredAt")
	if last.Before(due[2]) || last.After(msgs[2].CreatedAt) {
		t.Errorf("lastFiredAt %s: want between its due time %s and its message %s", last, due[2], msgs[2].CreatedAt)
	}
	next := f.schTime(cur["nextFireAt"], "nextFireAt")
	if !next.After(last) || next.Sub(first)%time.Minute != 0 {
		t.Errorf("nextFireAt %s after lastFiredAt %s: want the next grid time of %s", next, last, first)
	}
	if n, err := f.st.LoopCount(f.ctx, a); err != nil || n != 0 {
		t.Errorf("a schedule into the own conversation counted %d (%v) toward loop protection, want 0 (R9.6)", n, err)
	}
}

// R9.4: a repeat is skipped while the previous firing's message still waits in
// the queue (the session is busy), and skippedCount counts it.
func TestRulesScheduleNoStacking(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "busy"})
	// The busy turn: its first create_session waits on a card.
	busy, done := f.schStart(a, map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "x"}})
	card := f.card(a, done)
	if card == nil {
		t.Fatalf("the busy turn asked no card")
	}
	id := f.schSet(a, map[string]any{"text": "nudge", "title": "Nudge", "every_minutes": 1,
		"at": f.clk.Now().Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)})
	if got := schNoKeys(f.listedSchedules(a)[id], "skippedCount"); got != nil {
		t.Errorf("the fresh schedule has %v", got)
	}
	var cur map[string]any
	for i := 0; ; i++ {
		cur = f.listedSchedules(a)[id]
		if s, _ := cur["skippedCount"].(float64); s >= 1 {
			break
		}
		if i > 180 {
			t.Fatalf("no skipped repeat in 3 minutes: %v", cur)
		}
		f.schJobs(time.Second)
	}
	if diff := cmp.Diff(float64(1), cur["firedCount"]); diff != "" {
		t.Errorf("firedCount while the first firing waits (-want +got):\n%s", diff)
	}
	msgs := f.history(a, "schedule")
	if len(msgs) != 1 {
		t.Fatalf("%d schedule messages while the first waits in the queue, want 1", len(msgs))
	}
	if tr, err := f.r.Turn(f.ctx, msgs[0].ID); err != nil || tr.Status != "queued" {
		t.Fatalf("the first firing's turn is %v (%v), want queued", tr, err)
	}

	// The busy turn ends: the waiting firing runs, and the schedule fires again.
	if _, err := f.r.DecideCard(f.ctx, card.ID, "deny"); err != nil {
		t.Fatal(err)
	}
	<-done
	if tr, err := f.r.Turn(f.ctx, busy); err != nil || tr.Status != "done" {
		t.Fatalf("the busy turn: %v (%v)", tr, err)
	}
	tr, err := f.r.Turn(f.ctx, msgs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("echo: nudge", tr.Reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	f.schFired(a, id, 2, 2*time.Minute)
}

// R9.6, R5.2.3: a schedule with `session` from a conversation in ask mode asks
// a card; in plan mode a denied card schedules nothing; into the own
// conversation no card is asked; outside a turn the card cannot be asked.
func TestRulesScheduleSessionCard(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "asker", Mode: "ask"})
	p := f.session(NewSession{Title: "planner", Mode: "plan"})
	b := f.session(NewSession{Title: "target"})

	env, card := f.schInTurn(a, map[string]any{"action": "schedule", "session": b, "text": "check", "title": "Check", "every_minutes": 60}, "allow")
	idB, _ := env["schedule_id"].(string)
	sum, _ := env["summary"].(string)
	if diff := cmp.Diff([]any{true, "schedule", b, true, true}, []any{env["ok"], card.Action, *card.Target,
		strings.Contains(strings.Join(card.Lines, "\n"), "Check"), strings.Contains(sum, "schedule → desk session "+b[:8]+": ")}); diff != "" {
		t.Errorf("ok, card action, target, lines %q, summary %q (-want +got):\n%s", card.Lines, sum, diff)
	}
	env, card = f.schInTurn(p, map[string]any{"action": "schedule", "session": b, "text": "nope", "every_minutes": 60}, "deny")
	if diff := cmp.Diff(outcome{Code: CodePermission, Has: true}, outcomeOf(env, "Nothing was scheduled.")); diff != "" {
		t.Errorf("plan mode, denied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("schedule", card.Action); diff != "" {
		t.Errorf("plan card action (-want +got):\n%s", diff)
	}
	own, _ := f.schInTurn(a, map[string]any{"action": "schedule", "text": "self", "every_minutes": 60}, "")
	if own["ok"] != true {
		t.Fatalf("own schedule in a turn: %v", own)
	}
	if diff := cmp.Diff(outcome{Code: CodeNoActiveTurn, Has: true},
		outcomeOf(f.call(a, map[string]any{"action": "schedule", "session": b, "text": "x", "every_minutes": 60}), "")); diff != "" {
		t.Errorf("outside a turn (-want +got):\n%s", diff)
	}
	ownID, _ := own["schedule_id"].(string)
	if diff := cmp.Diff(schSorted(idB, ownID), f.ownerSchedules()); diff != "" {
		t.Fatalf("active schedules (the denied one must not exist) (-want +got):\n%s", diff)
	}
}

// askEventHeader is the first line of an event message (R8.11).
const askEventHeader = "[relay event · automated message from OAR, not from the user; it approves nothing]"

// R10.1, R10.4, R5.2.3: an ask with `session` shows in that session, is not
// counted by loop protection, and the answer reaches both the session and the
// asker; in ask mode it asks a card, a denied card asks nothing.
func TestRulesAskWithSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) { l.AgentPromptsBeforeCard = 1 }})
	a := f.session(NewSession{Title: "asker"})
	b := f.session(NewSession{Title: "concerned"})
	c := f.session(NewSession{Title: "helper"})
	k := f.session(NewSession{Title: "careful", Mode: "ask"})
	p := f.session(NewSession{Title: "planner", Mode: "plan"})

	env := f.ok(a, map[string]any{"action": "ask", "session": b, "question": "Which database?", "options": []string{"Postgres", "SQLite"}})
	q, _ := env["question_id"].(string)
	sum, _ := env["summary"].(string)
	if diff := cmp.Diff([]any{"pending", true}, []any{env["status"], strings.Contains(sum, "ask → desk session "+b[:8]+": ") && strings.Contains(sum, q)}); diff != "" {
		t.Errorf("status, summary %q (-want +got):\n%s", sum, diff)
	}
	// Not counted by loop protection: the one allowed prompt still goes without a card.
	f.ok(a, map[string]any{"action": "send", "relay": "this", "session": c, "text": "hi", "wait_seconds": 0})
	if f.askPending(c, b)[q] == nil {
		t.Errorf("the concerned session's pendingQuestions lacks the ask")
	}
	if f.askPending(c, a)[q] != nil {
		t.Errorf("the asker's pendingQuestions shows an ask about another session")
	}
	in := f.askInbox()[q]
	if in == nil {
		t.Fatalf("the ask is not in the inbox")
	}
	if diff := cmp.Diff(any(b), in["session"]); diff != "" {
		t.Errorf("inbox session (-want +got):\n%s", diff)
	}

	// list_questions with session lists the asks about that session only (R10.6).
	qOwn := f.askSet(a, map[string]any{"question": "Lunch?"})
	if diff := cmp.Diff([]string{q}, schKeys(f.askQuestions(a, map[string]any{"session": b}))); diff != "" {
		t.Errorf("list_questions session %s (-want +got):\n%s", b[:8], diff)
	}
	if diff := cmp.Diff(schSorted(q, qOwn), schKeys(f.askQuestions(a, nil))); diff != "" {
		t.Errorf("list_questions (-want +got):\n%s", diff)
	}

	f.askAnswer(q, InboxAnswer{Answer: "SQLite for now", Choice: "SQLite"})
	line := `[relay event] question_answered ` + q + ` "Which database?": "SQLite for now" (choice: SQLite, via desk)`
	for _, sid := range []string{a, b} {
		if diff := cmp.Diff(askEventHeader+"\n"+line, f.askEvent(sid, "question_answered "+q).Text); diff != "" {
			t.Errorf("answer event in %s (-want +got):\n%s", sid[:8], diff)
		}
	}

	env, card := f.schInTurn(k, map[string]any{"action": "ask", "session": b, "question": "Deploy?"}, "allow")
	if diff := cmp.Diff([]any{true, "ask", b}, []any{env["ok"], card.Action, *card.Target}); diff != "" {
		t.Errorf("ok, card action, target (-want +got):\n%s", diff)
	}
	own, _ := f.schInTurn(k, map[string]any{"action": "ask", "question": "Mine?"}, "") // own conversation: no card
	if own["ok"] != true {
		t.Errorf("own ask in a turn: %v", own)
	}
	before := len(f.askInbox())
	env, _ = f.schInTurn(p, map[string]any{"action": "ask", "session": b, "question": "Nope?"}, "deny")
	if diff := cmp.Diff(outcome{Code: CodePermission, Has: true}, outcomeOf(env, "Nothing was asked.")); diff != "" {
		t.Errorf("denied ask (-want +got):\n%s", diff)
	}
	if n := len(f.askInbox()); n != before {
		t.Errorf("a denied ask changed the inbox from %d to %d", before, n)
	}
	for _, c := range []struct {
		caller, session, code string
	}{{k, b, CodeNoActiveTurn}, {a, schNoSession, CodeNotFound}} {
		if diff := cmp.Diff(outcome{Code: c.code, Has: true},
			outcomeOf(f.call(c.caller, map[string]any{"action": "ask", "session": c.session, "question": "x"}), "")); diff != "" {
			t.Errorf("ask by %s about %s (-want +got):\n%s", c.caller[:8], c.session[:8], diff)
		}
	}
}

// R10.1–R10.3, R10.6, R10.7, R8.11, R5.2.6: an ask is pending at once, shows in
// the inbox and in read_session; the owner's answer arrives as the exact
// question_answered event while a quiet-hours subscription holds other events;
// a dismissal too; the answer does not reset loop protection; answer_question
// on an ask is FORBIDDEN; list_questions shows every status; only the asker withdraws.
func TestRulesAskInboxAnswerDismissWithdraw(t *testing.T) {
	t.Parallel()
	// The clock starts at 09:00 UTC; the quiet window 06:00–23:00 UTC lasts the whole test.
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) { l.AgentPromptsBeforeCard = 2 }})
	a := f.session(NewSession{Title: "asker"})
	b := f.session(NewSession{Title: "watched"})
	c := f.session(NewSession{Title: "helper"})

	env, card := f.schInTurn(a, map[string]any{"action": "subscribe", "sessions": []string{b}, "events": []string{"turn_end", "question_answered"},
		"quiet_hours": map[string]any{"from": "06:00", "to": "23:00", "tz": "UTC"}}, "allow")
	sub, _ := env["subscription"].(map[string]any)
	subID, _ := sub["id"].(string)
	if env["ok"] != true || card.Action != "subscribe" || subID == "" {
		t.Fatalf("subscribe: %v (card %s)", env, card.Action)
	}
	heldCount := func() any {
		env := f.ok(a, map[string]any{"action": "list_subscriptions"})
		list, _ := env["subscriptions"].([]any)
		for _, v := range list {
			if s, _ := v.(map[string]any); s["id"] == subID {
				return s["heldCount"]
			}
		}
		t.Fatalf("list_subscriptions lacks %s: %v", subID, env)
		return nil
	}
	one := f.prompt(b, "one")
	f.run()
	if tr, err := f.r.Turn(f.ctx, one); err != nil || tr.Status != "done" {
		t.Fatalf("b's turn: %v (%v)", tr, err)
	}
	if diff := cmp.Diff(float64(1), heldCount()); diff != "" {
		t.Fatalf("heldCount: the quiet window must hold b's turn_end (-want +got):\n%s", diff)
	}
	eventsBefore := len(f.history(a, "event"))

	// Use up loop protection (2 of 2).
	for i := 0; i < 2; i++ {
		f.ok(a, map[string]any{"action": "send", "relay": "this", "session": c, "text": "p" + string(rune('0'+i)), "wait_seconds": 0})
	}

	env = f.ok(a, map[string]any{"action": "ask", "question": "Ship it?", "options": []string{"A", "B"}, "recommendation": "A", "detail": "All green."})
	q1, _ := env["question_id"].(string)
	sum, _ := env["summary"].(string)
	if !askIDRe.MatchString(q1) {
		t.Fatalf("ask: %v", env)
	}
	if diff := cmp.Diff([]any{"pending", "desk", true}, []any{env["status"], env["relay"], strings.Contains(sum, "ask → desk") && strings.Contains(sum, q1)}); diff != "" {
		t.Errorf("status, relay, summary %q (-want +got):\n%s", sum, diff)
	}
	in := f.askInbox()[q1]
	if in == nil {
		t.Fatalf("the ask is not in the inbox")
	}
	if diff := cmp.Diff(map[string]any{"question": "Ship it?", "options": []any{"A", "B"}, "status": "pending", "session": a, "recommendation": "A"},
		map[string]any{"question": in["question"], "options": in["options"], "status": in["status"], "session": in["session"], "recommendation": in["recommendation"]}); diff != "" {
		t.Errorf("inbox (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"id": q1, "kind": "ask", "question": "Ship it?", "options": []any{"A", "B"}}, f.askPending(b, a)[q1]); diff != "" {
		t.Errorf("read_session's pending question (-want +got):\n%s", diff)
	}

	// Only the owner answers asks, before anything else is looked at.
	for _, who := range []string{b, a} {
		env := f.call(who, map[string]any{"action": "answer_question", "relay": "this", "session": a, "question_id": q1, "answer": "yes"})
		if diff := cmp.Diff(outcome{Code: CodeForbidden, Has: true}, outcomeOf(env, "Nothing was")); diff != "" {
			t.Errorf("answer_question by %s (-want +got):\n%s", who[:8], diff)
		}
	}

	if diff := cmp.Diff("answered", f.askAnswer(q1, InboxAnswer{Answer: "yes", Choice: "A"})); diff != "" {
		t.Errorf("answered status (-want +got):\n%s", diff)
	}
	want := askEventHeader + "\n" + `[relay event] question_answered ` + q1 + ` "Ship it?": "yes" (choice: A, via desk)`
	if diff := cmp.Diff(want, f.askEvent(a, "question_answered "+q1).Text); diff != "" {
		t.Errorf("answer event message (-want +got):\n%s", diff)
	}
	if n := len(f.history(a, "event")); n != eventsBefore+1 {
		t.Errorf("%d event messages after the answer, want %d", n, eventsBefore+1)
	}
	if diff := cmp.Diff(float64(1), heldCount()); diff != "" {
		t.Errorf("heldCount after the answer: the quiet window must still hold b's turn_end (-want +got):\n%s", diff)
	}
	if _, err := f.r.AnswerAsk(f.ctx, q1, InboxAnswer{Answer: "again"}); err == nil || schCode(err) == CodeInternal {
		t.Errorf("answering an answered ask: %v, want a refusal (4xx)", err)
	}
	if f.askInbox()[q1] != nil {
		t.Errorf("the answered ask is still in the inbox")
	}
	// The answer does not reset loop protection.
	if diff := cmp.Diff(outcome{Code: CodeNoActiveTurn, Has: true},
		outcomeOf(f.call(a, map[string]any{"action": "send", "relay": "this", "session": c, "text": "p3", "wait_seconds": 0}), "")); diff != "" {
		t.Errorf("a third send (-want +got):\n%s", diff)
	}

	q2 := f.askSet(a, map[string]any{"question": "Drop the cache?"})
	f.askAnswer(q2, InboxAnswer{Dismiss: true})
	if diff := cmp.Diff(askEventHeader+"\n"+`[relay event] question_answered `+q2+` "Drop the cache?": dismissed (via desk)`,
		f.askEvent(a, "question_answered "+q2).Text); diff != "" {
		t.Errorf("dismiss event message (-want +got):\n%s", diff)
	}

	q3 := f.askSet(a, map[string]any{"question": "Rewrite in Rust?"})
	if diff := cmp.Diff(outcome{Code: CodeForbidden, Has: true}, outcomeOf(f.call(b, map[string]any{"action": "withdraw", "question_id": q3}), "")); diff != "" {
		t.Errorf("withdraw by another (-want +got):\n%s", diff)
	}
	env = f.ok(a, map[string]any{"action": "withdraw", "question_id": q3})
	if diff := cmp.Diff(any("withdrawn"), env["status"]); diff != "" {
		t.Errorf("withdraw status (-want +got):\n%s", diff)
	}
	if f.askInbox()[q3] != nil {
		t.Errorf("the withdrawn ask is still in the inbox")
	}
	q4 := f.askSet(a, map[string]any{"question": "Tag the release?"})

	qs := f.askQuestions(a, nil)
	if len(qs) != 4 {
		t.Fatalf("list_questions: %d asks, want 4: %v", len(qs), qs)
	}
	if diff := cmp.Diff([]any{"answered", "yes", "A", "desk", "dismissed", true, "withdrawn", "pending"},
		[]any{qs[q1]["status"], qs[q1]["answer"], qs[q1]["choice"], qs[q1]["via"], qs[q2]["status"], qs[q2]["dismissed"], qs[q3]["status"], qs[q4]["status"]}); diff != "" {
		t.Errorf("list_questions: q1 status, answer, choice, via; q2 status, dismissed; q3, q4 status (-want +got):\n%s", diff)
	}
	if other := f.askQuestions(b, nil); len(other) != 0 {
		t.Errorf("b's list_questions shows a's asks: %v", other)
	}
	// No event for a withdrawal.
	f.run()
	for _, msg := range f.history(a, "event") {
		if strings.Contains(msg.Text, q3) {
			t.Errorf("an event told about the withdrawn ask: %q", msg.Text)
		}
	}
}

// Issue 13: a schedule into another session is treated like a send — it
// respects the 4-at-work cap of the conversation that started the target; a
// firing over the cap waits and is tried again, it is not dropped.
func TestRulesScheduleIntoSessionRespectsFourAtWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "setter"})
	create := func(text string) map[string]any {
		return map[string]any{"action": "create_session", "relay": "this", "text": text, "wait_seconds": 0}
	}
	// The first create_session is allowed on a card; the next ones follow without.
	// (The helper's turn runs on the same run as the creating turn: no waiting for its reply.)
	res, _ := f.schInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "title": "helper", "wait_seconds": 0}, "allow")
	helper, _ := res["session"].(string)
	if res["ok"] != true || helper == "" {
		t.Fatalf("create_session in a turn: %v", res)
	}
	f.run() // the helper's first turn ends: it is idle
	var busy []string
	for i := 0; i < 4; i++ {
		env := f.ok(a, create("busy")) // their turns stay queued: nothing drains them
		s, _ := env["session"].(string)
		busy = append(busy, s)
	}
	// A send to the idle helper would make a fifth at work: refused.
	if diff := cmp.Diff(outcome{Code: CodeSessionLimit, Has: true},
		outcomeOf(f.call(a, map[string]any{"action": "send", "relay": "this", "session": helper, "text": "x", "wait_seconds": 0}), "")); diff != "" {
		t.Errorf("send to a fifth (-want +got):\n%s", diff)
	}

	env := f.ok(a, map[string]any{"action": "schedule", "session": helper, "text": "ping", "title": "Ping",
		"at": f.clk.Now().Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)})
	id, _ := env["schedule_id"].(string)
	sc, _ := env["schedule"].(map[string]any)
	due := f.schTime(sc["nextFireAt"], "nextFireAt")
	f.schJobs(due.Add(2 * time.Minute).Sub(f.clk.Now()))
	if n := len(f.history(helper, "schedule")); n != 0 {
		t.Fatalf("the schedule fired into a fifth session at work (%d firings)", n)
	}
	cur := f.listedSchedules(a)[id]
	if diff := cmp.Diff([]any{float64(0), nil}, []any{cur["firedCount"], cur["endReason"]}); diff != "" {
		t.Fatalf("firedCount and endReason over the cap: the firing must wait, not be dropped (-want +got):\n%s", diff)
	}

	// One of the four ends: the waiting firing goes.
	if _, err := f.r.OwnerStop(f.ctx, busy[0]); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := f.r.Drain(f.ctx, busy[0]); err != nil {
		t.Fatalf("drain %s: %v", busy[0], err)
	}
	for i := 0; len(f.history(helper, "schedule")) == 0; i++ {
		if i > 120 {
			t.Fatalf("the waiting firing did not reach the helper in 2 minutes")
		}
		f.schJobs(time.Second)
	}
	msgs := f.history(helper, "schedule")
	// R18.15: a schedule another conversation set carries its setter's line first.
	if diff := cmp.Diff([]string{agentLine("setter", "scripted-1") + "\n" + scheduleHeaderText(id, "Ping", "once") + "\nping"},
		[]string{msgs[0].Text}); diff != "" || len(msgs) != 1 {
		t.Errorf("%d firings; text (-want +got):\n%s", len(msgs), diff)
	}
}

// R9.6, R5.2.6: a schedule into another session counts toward loop protection
// once when set and once per firing; when the count is used up a firing is
// held (heldForApproval, heldSince) and goes at once when the owner writes in
// the setting conversation, or when the owner allows the setter's next card
// for a prompt to another agent — any other card does not (issue 13).
func TestRulesScheduleSessionLoopProtectionHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) { l.AgentPromptsBeforeCard = 2 }})
	a := f.session(NewSession{Title: "setter"})
	b := f.session(NewSession{Title: "target"})
	c := f.session(NewSession{Title: "bystander"})
	loop := func() int {
		t.Helper()
		n, err := f.st.LoopCount(f.ctx, a)
		if err != nil {
			t.Fatalf("loop count: %v", err)
		}
		return n
	}
	fired := func(cur map[string]any) int { n, _ := cur["firedCount"].(float64); return int(n) }
	// until moves the clock on (running b's turns) until cond holds of a's view of the schedule.
	var id string
	until := func(what string, cond func(map[string]any) bool, drain ...string) map[string]any {
		t.Helper()
		for i := 0; ; i++ {
			cur := f.listedSchedules(a)[id]
			if cond(cur) {
				return cur
			}
			if i > 300 {
				t.Fatalf("%s: not in 5 minutes: %v", what, cur)
			}
			f.schJobs(time.Second, drain...)
		}
	}
	env := f.ok(a, map[string]any{"action": "schedule", "session": b, "text": "ping", "title": "Ping", "every_minutes": 1,
		"at": f.clk.Now().Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)})
	id, _ = env["schedule_id"].(string)
	sc, _ := env["schedule"].(map[string]any)
	first := f.schTime(sc["nextFireAt"], "nextFireAt")
	if n := loop(); n != 1 {
		t.Fatalf("loop count after setting %d, want 1 (counted once when set)", n)
	}

	held := func(cur map[string]any) bool { return cur["heldForApproval"] == true }
	cur := until("the second firing to be held", held, a, b, c)
	if diff := cmp.Diff(float64(1), cur["firedCount"]); diff != "" {
		t.Errorf("firedCount while held (-want +got):\n%s", diff)
	}
	if hs := f.schTime(cur["heldSince"], "heldSince"); hs.Before(first.Add(time.Minute)) {
		t.Errorf("heldSince %s before the second due time %s", hs, first.Add(time.Minute))
	}
	if n := loop(); n != 2 {
		t.Errorf("loop count after one firing %d, want 2 (once when set, once per firing)", n)
	}
	msgs := f.history(b, "schedule")
	if len(msgs) != 1 {
		t.Fatalf("%d firings reached the target, want 1", len(msgs))
	}
	if diff := cmp.Diff(agentLine("setter", "scripted-1")+"\n"+scheduleHeaderText(id, "Ping", "every 1 min")+"\nping", msgs[0].Text); diff != "" { // R18.15
		t.Errorf("text (-want +got):\n%s", diff)
	}
	if msgs[0].From == nil || msgs[0].From.Session != a {
		t.Errorf("firing from = %+v, want the setting session %s", msgs[0].From, a)
	}
	lb := f.listedSchedules(b)[id]
	if diff := cmp.Diff([]any{a, true}, []any{lb["setBy"], lb["heldForApproval"]}); diff != "" {
		t.Errorf("setBy and heldForApproval in the target's list (-want +got):\n%s", diff)
	}
	// The count is used up for the setter's other prompts too.
	if diff := cmp.Diff(outcome{Code: CodeNoActiveTurn, Has: true},
		outcomeOf(f.call(a, map[string]any{"action": "send", "relay": "this", "session": c, "text": "hi", "wait_seconds": 0}), "")); diff != "" {
		t.Errorf("a send of the setter (-want +got):\n%s", diff)
	}

	wrote := f.clk.Now()
	f.prompt(a, "carry on")
	until("the held firing to be released", func(cur map[string]any) bool { return fired(cur) >= 2 }, a, b, c)
	msgs = f.history(b, "schedule")
	if len(msgs) < 2 {
		t.Fatalf("%d firings reached the target, want 2", len(msgs))
	}
	if rel := msgs[1].CreatedAt; rel.Before(wrote) || rel.Sub(wrote) >= time.Minute {
		t.Errorf("released firing at %s; the owner wrote at %s: want it at once", rel, wrote)
	}
	// From 0 (the owner wrote): +1 for the released firing, +1 for the next one, then held again.
	cur = until("the schedule to be held again after two more firings",
		func(cur map[string]any) bool { return held(cur) && fired(cur) >= 3 }, a, b, c)
	if diff := cmp.Diff(float64(3), cur["firedCount"]); diff != "" {
		t.Errorf("firedCount when held again (-want +got):\n%s", diff)
	}

	// The cards need an agent turn of the setter; the owner's message that
	// starts it resets the count (and releases the held firing), so while the
	// turn's first card waits the clock moves on until firings used it up again.
	// The first card is update_session's on a session the setter did not start:
	// allowed, it releases nothing (the count stays used up, so the minute's
	// re-check keeps holding too). The second is the send's to c.
	n0 := fired(cur)
	mid, done := f.schStart(a,
		map[string]any{"tool": map[string]any{"action": "update_session", "relay": "this", "session": c, "title": "renamed"}},
		map[string]any{"tool": map[string]any{"action": "send", "relay": "this", "session": c, "text": "hi", "wait_seconds": 0}})
	card := f.card(a, done)
	if card == nil || card.Action != "update_session" {
		t.Fatalf("first card %+v, want update_session's", card)
	}
	cur = until("the schedule to be held again while the card waits (the released firing and the next one)",
		func(cur map[string]any) bool { return held(cur) && fired(cur) >= n0+2 }, b)
	before := fired(cur)
	if _, err := f.r.DecideCard(f.ctx, card.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	card = f.card(a, done)
	if card == nil || card.Action != "send" {
		t.Fatalf("second card %+v, want send's", card)
	}
	f.schJobs(3*time.Minute, b)
	if n := fired(f.listedSchedules(a)[id]); n != before {
		t.Errorf("firedCount %d after an allowed update_session card, want %d: only a card for a prompt to another agent releases a held firing", n, before)
	}
	allowed := f.clk.Now()
	if _, err := f.r.DecideCard(f.ctx, card.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	<-done // the turn ends; the release is due at once
	f.schDue(b)
	if n := fired(f.listedSchedules(a)[id]); n <= before {
		t.Fatalf("firedCount %d: the held firing was not released by the allowed send card", n)
	}
	msgs = f.history(b, "schedule")
	// At once: well within the minute the safety-net re-check could take.
	if rel := msgs[before].CreatedAt; rel.Before(allowed) || rel.Sub(allowed) >= 30*time.Second {
		t.Errorf("released firing at %s; the card was allowed at %s: want it at once", rel, allowed)
	}
	if tr, err := f.r.Turn(f.ctx, mid); err != nil || tr.Status != "done" {
		t.Errorf("the setter's turn: %+v (%v)", tr, err)
	}
}
