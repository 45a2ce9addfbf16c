package domain

// Fixture helpers of the schedule and ask rule suites (schedules_rules_test.go).

import (
	"encoding/json"
	"errors"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

var (
	schIDRe = regexp.MustCompile(`^sch_[0-9a-f]{8,}$`)
	askIDRe = regexp.MustCompile(`^ask_[0-9a-f]{8,}$`)
)

// schNoSession is a session id no session has.
const schNoSession = "0000000000000000ffffffffffffffff"

// schSet schedules as caller and returns the new schedule's id.
func (f *fixture) schSet(caller string, args map[string]any) string {
	f.t.Helper()
	args["action"] = "schedule"
	env := f.ok(caller, args)
	id, _ := env["schedule_id"].(string)
	if !schIDRe.MatchString(id) {
		f.t.Fatalf("schedule_id %q is not sch_…: %v", id, env)
	}
	return id
}

// schOwnerList is the owner's list of active schedules by id.
func (f *fixture) schOwnerList() map[string]map[string]any {
	f.t.Helper()
	all, err := f.r.Schedules(f.ctx)
	if err != nil {
		f.t.Fatalf("schedules: %v", err)
	}
	return schByID(f.t, all)
}

// schByID is a typed list as the owner API shows it (its JSON), by id.
func schByID[T any](t testing.TB, all []T) map[string]map[string]any {
	t.Helper()
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, m := range list {
		id, _ := m["id"].(string)
		out[id] = m
	}
	return out
}

// schKeys is a map's keys, sorted.
func schKeys[V any](m map[string]V) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// schSorted is ids sorted.
func schSorted(ids ...string) []string {
	out := append([]string{}, ids...)
	sort.Strings(out)
	return out
}

// askSet asks as caller and returns the question id (pending at once).
func (f *fixture) askSet(caller string, args map[string]any) string {
	f.t.Helper()
	args["action"] = "ask"
	env := f.ok(caller, args)
	id, _ := env["question_id"].(string)
	if !askIDRe.MatchString(id) || env["status"] != "pending" {
		f.t.Fatalf("ask: want question_id ask_… and status pending, got %v", env)
	}
	return id
}

// askInbox is the owner's inbox of open asks by id.
func (f *fixture) askInbox() map[string]map[string]any {
	f.t.Helper()
	all, err := f.r.Inbox(f.ctx)
	if err != nil {
		f.t.Fatalf("inbox: %v", err)
	}
	return schByID(f.t, all)
}

// askAnswer is the owner's answer that must be taken.
func (f *fixture) askAnswer(id string, in InboxAnswer) string {
	f.t.Helper()
	out, err := f.r.AnswerAsk(f.ctx, id, in)
	if err != nil {
		f.t.Fatalf("answer %s %+v: %v", id, in, err)
	}
	return out.Status
}

// askQuestions is caller's list_questions by question id.
func (f *fixture) askQuestions(caller string, args map[string]any) map[string]map[string]any {
	f.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	args["action"] = "list_questions"
	env := f.ok(caller, args)
	out := map[string]map[string]any{}
	list, _ := env["questions"].([]any)
	for _, v := range list {
		m, _ := v.(map[string]any)
		id, _ := m["question_id"].(string)
		out[id] = m
	}
	return out
}

// askEvent runs what is due and returns sid's event message containing frag.
func (f *fixture) askEvent(sid, frag string) store.Message {
	f.t.Helper()
	f.run()
	for _, m := range f.history(sid, "event") {
		if strings.Contains(m.Text, frag) {
			return m
		}
	}
	f.t.Fatalf("no event message in %s containing %q: %v", sid, frag, f.history(sid, "event"))
	return store.Message{}
}

// schCode is the code of an owner method's error: "" for none, CodeInternal
// for one that is not an *Error (the owner API's 5xx).
func schCode(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	default:
		return CodeInternal
	}
}

// schNoKeys reports the keys of m that are present.
func schNoKeys(m map[string]any, keys ...string) []string {
	var out []string
	for _, k := range keys {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// schTime is an RFC 3339 time of a view.
func (f *fixture) schTime(v any, what string) time.Time {
	f.t.Helper()
	s, ok := v.(string)
	if !ok {
		f.t.Fatalf("%s: want an RFC 3339 time, got %T %v", what, v, v)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		f.t.Fatalf("%s: %q is not RFC 3339: %v", what, s, err)
	}
	return tm
}

// schFired moves the clock on, a second at a time for at most limit,
// until schedule id of caller's list has fired n times; it returns the list's view.
func (f *fixture) schFired(caller, id string, n int, limit time.Duration) map[string]any {
	f.t.Helper()
	for waited := time.Duration(0); ; waited += time.Second {
		cur := f.listedSchedules(caller)[id]
		if c, _ := cur["firedCount"].(float64); int(c) >= n {
			return cur
		}
		if waited >= limit {
			f.t.Fatalf("%s fired %v times after %s, want %d: %v", id, cur["firedCount"], limit, n, cur)
		}
		f.advance(time.Second)
	}
}

// schStart queues a scripted turn of steps for sid and runs it (and what is
// due) on a goroutine of its own; the channel closes when that run ends.
func (f *fixture) schStart(sid string, steps ...map[string]any) (string, <-chan struct{}) {
	f.t.Helper()
	tid := f.prompt(sid, script(steps...))
	done := f.goRun()
	return tid, done
}

// schInTurn runs one relay_tool call in a turn of sid (relay "this" unless
// given); decision "" wants no card, else the card is decided so. It returns
// the call's envelope and the card.
func (f *fixture) schInTurn(sid string, tool map[string]any, decision string) (map[string]any, *store.Card) {
	f.t.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	tid, done := f.schStart(sid, map[string]any{"tool": tool})
	card := f.card(sid, done)
	switch {
	case decision == "" && card != nil:
		f.t.Errorf("%v asked a card %v, want none", tool, card.Lines)
		decision = "deny"
		fallthrough
	case card != nil:
		if _, err := f.r.DecideCard(f.ctx, card.ID, decision); err != nil {
			f.t.Fatalf("decide %s: %v", card.ID, err)
		}
	case decision != "":
		f.t.Fatalf("%v asked no card, want one decided %s", tool, decision)
	}
	<-done
	res := f.toolResults(tid)
	if len(res) != 1 {
		f.t.Fatalf("the turn holds %d tool results, want 1", len(res))
	}
	return res[0], card
}

// schJobs moves the clock on by d, a second at a time, running the due jobs
// and the drains of sids only (a turn of another session is running, or may
// not start).
func (f *fixture) schJobs(d time.Duration, sids ...string) {
	f.t.Helper()
	for ; d > 0; d -= time.Second {
		f.clk.Advance(time.Second)
		f.schDue(sids...)
	}
}

// askPending is read_session's pending asks of sid, read by caller, by id.
func (f *fixture) askPending(caller, sid string) map[string]map[string]any {
	f.t.Helper()
	env := f.ok(caller, map[string]any{"action": "read_session", "relay": "this", "session": sid, "last": 5})
	out := map[string]map[string]any{}
	list, _ := env["pendingQuestions"].([]any)
	for _, v := range list {
		q, _ := v.(map[string]any)
		if q["kind"] == "ask" {
			id, _ := q["id"].(string)
			out[id] = q
		}
	}
	return out
}

// schTakeDrain takes a waiting drain job of one of sids.
func (e *recordingEnqueuer) schTakeDrain(sids []string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, j := range e.jobs {
		if j.typ != "drain" {
			continue
		}
		for _, s := range sids {
			if j.session == s {
				e.jobs = append(e.jobs[:i], e.jobs[i+1:]...)
				return s, true
			}
		}
	}
	return "", false
}

// schDue runs the jobs due now and the drains of sids, until none is left.
func (f *fixture) schDue(sids ...string) {
	f.t.Helper()
	for {
		if s, ok := f.enq.schTakeDrain(sids); ok {
			if err := f.r.Drain(f.ctx, s); err != nil && !errors.Is(err, ErrRetryLater) {
				f.t.Fatalf("drain %s: %v", s, err)
			}
			continue
		}
		j, ok := f.enq.next(false, f.clk.Now())
		if !ok {
			return
		}
		if err := f.r.RunJob(f.ctx, j.typ, j.payload); err != nil {
			f.t.Fatalf("job %s %s: %v", j.typ, j.payload, err)
		}
	}
}
