package relaytest

// Issue 13: rules of the seed that were missing or bent (R7.11 partial,
// R8.15, R8.17, R9.6, list_questions with session, the strings).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
)

// R7.11: a running result of send and wait carries partial: what the reply
// has so far, its last 2,000 characters.
func TestRunningResultCarriesPartial(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "caller"})
	b := r.NewSession(map[string]any{"title": "worker"})
	m := r.Connect(a.Token, nil)

	long := strings.Repeat("é", 2400) + "END"
	env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "wait_seconds": 2,
		"text": Script(map[string]any{"reply": "half done"}, map[string]any{"sleep_ms": 60000})})
	wantEq(t, "status", env["status"], "running")
	wantEq(t, "partial", env["partial"], "half done")
	mid := env["message_id"].(string)
	// wait returns the same, and the partial is cut to its last 2,000 characters.
	env = m.MustOK(map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": mid, "wait_seconds": 1})
	wantEq(t, "wait status", env["status"], "running")
	wantEq(t, "wait partial", env["partial"], "half done")
	r.Owner("POST", "/api/v1/sessions/"+b.ID+"/stop", nil, nil)
	r.WaitTurn(mid, 20*time.Second, "stopped")

	env = m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "wait_seconds": 2,
		"text": Script(map[string]any{"reply": long}, map[string]any{"sleep_ms": 60000})})
	wantEq(t, "status", env["status"], "running")
	p, _ := env["partial"].(string)
	if utf8.RuneCountInString(p) != 2000 || !strings.HasSuffix(p, "END") {
		t.Errorf("partial has %d characters (want the last 2000), ends %q", utf8.RuneCountInString(p), p[max(0, len(p)-10):])
	}
	// A queued result has no partial.
	c := r.NewSession(map[string]any{"title": "queued"})
	r.Message(c.ID, Script(map[string]any{"sleep_ms": 60000}))
	env = m.MustOK(map[string]any{"action": "send", "relay": "this", "session": c.ID, "wait_seconds": 0, "text": "later"})
	if _, ok := env["partial"]; ok || env["status"] != "queued" {
		t.Errorf("queued result: %v", env)
	}
	for _, s := range []Session{b, c} {
		if st := r.Owner("POST", "/api/v1/sessions/"+s.ID+"/archive", nil, nil); st != http.StatusOK {
			t.Errorf("archive: %d", st)
		}
	}
}

// R8.17: when the wake-limit summary and a subscription's digest fall
// together, one `Digest of …` line names both (600× clock: 1 h = 6 s).
func TestDigestAndWakeLimitSummaryOneLine(t *testing.T) {
	clock := clock.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 600)
	r := Start(t, Options{Clock: clock, Config: func(c *config.Config) {
		c.Timing.Coalesce = 0
		c.Timing.WakeLimitPerHour = 2
		c.Timing.WakeSummaryEvery = 30 * time.Minute // 3 s real
	}})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	b := r.NewSession(map[string]any{"title": "beta"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}}, true)
	mw := r.Connect(w.Token, nil)
	dig := ev2SubMCP(t, mw, map[string]any{"sessions": []string{b.ID}, "events": []string{"turn_end"}, "digest_minutes": 6})["id"].(string)

	for _, txt := range []string{"w1", "w2"} {
		ev2Done(t, r, a.ID, txt)
		ev2WaitMsg(t, r, w.ID, `"echo: `+txt+`"`)
	}
	// Over the limit: a plain event is held for the summary, then the digest's events join it.
	ev2Done(t, r, a.ID, "h1")
	ev2Done(t, r, b.ID, "d1")
	ev2Done(t, r, b.ID, "d2")
	ev2WaitCount(t, r, w.ID, `"echo: d2"`, 1)
	msgs := r.EventTexts(w.ID)
	want := strings.Join([]string{ev2Header,
		fmt.Sprintf("Digest of 3 events (subscription %s every 6 min, with the summary held by the wake limit: 2 wakes in the last hour; questions and errors come at once):", dig),
		ev2Line(a, `turn_end (done) "echo: h1"`),
		ev2Line(b, `turn_end (done) "echo: d1"`),
		ev2Line(b, `turn_end (done) "echo: d2"`)}, "\n")
	if len(msgs) != 3 || msgs[2] != want {
		t.Fatalf("event messages:\n%s\nwant the third\n%s", strings.Join(msgs, "\n---\n"), want)
	}
}

// Issue 13 (R10.6): list_questions with session lists every open ask about
// that session, whoever asked it, not only the caller's.
func TestListQuestionsAboutSessionListsEveryOpenAsk(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "a"})
	b := r.NewSession(map[string]any{"title": "b"})
	c := r.NewSession(map[string]any{"title": "c"})
	ma, mb, mc := r.Connect(a.Token, nil), r.Connect(b.Token, nil), r.Connect(c.Token, nil)
	own := mb.MustOK(map[string]any{"action": "ask", "question": "b's own?"})["question_id"].(string)
	byC := mc.MustOK(map[string]any{"action": "ask", "relay": "this", "session": b.ID, "question": "c about b?"})["question_id"].(string)
	gone := mc.MustOK(map[string]any{"action": "ask", "relay": "this", "session": b.ID, "question": "withdrawn"})["question_id"].(string)
	mc.MustOK(map[string]any{"action": "withdraw", "question_id": gone})
	byA := ma.MustOK(map[string]any{"action": "ask", "relay": "this", "session": b.ID, "question": "a about b?"})["question_id"].(string)
	other := ma.MustOK(map[string]any{"action": "ask", "relay": "this", "session": c.ID, "question": "a about c?"})["question_id"].(string)

	env := ma.MustOK(map[string]any{"action": "list_questions", "session": b.ID})
	got := map[string]map[string]any{}
	for _, x := range list(t, env["questions"], "questions") {
		q := obj(t, x, "question")
		got[q["id"].(string)] = q
	}
	for id, by := range map[string]any{own: b.ID, byC: c.ID, byA: nil} {
		q, ok := got[id]
		if !ok {
			t.Errorf("open ask %s about b is not listed: %v", id, env["questions"])
			continue
		}
		wantEq(t, id+" status", q["status"], "pending")
		wantEq(t, id+" askedBy", q["askedBy"], by)
	}
	for _, id := range []string{gone, other} {
		if _, ok := got[id]; ok {
			t.Errorf("ask %s listed for session b", id)
		}
	}
	wantEq(t, "summary", env["summary"], "list_questions → desk: 3 open, 0 closed in the last day")
	// Without session: only the caller's own asks.
	env = ma.MustOK(map[string]any{"action": "list_questions"})
	if n := len(list(t, env["questions"], "questions")); n != 2 {
		t.Errorf("list_questions without session: %d asks, want the caller's 2: %v", n, env["questions"])
	}
}

// R8.15: an event message for a busy watcher is queued as its next prompt,
// ahead of prompts already waiting (events among themselves in order).
func TestEventMessageQueuedNextForBusyWatcher(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = 0 }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}}, true)

	busy := r.Message(w.ID, Script(map[string]any{"sleep_ms": 4000}))
	r.WaitTurn(busy, 20*time.Second, "running")
	waiting := r.Message(w.ID, "waiting behind the busy turn")
	ev2Done(t, r, a.ID, "one")
	ev2WaitMsg(t, r, w.ID, `"echo: one"`)
	ev2Done(t, r, a.ID, "two")
	ev2WaitMsg(t, r, w.ID, `"echo: two"`)
	if st := r.Turn(busy).Status; st != "running" {
		t.Fatalf("the watcher's turn ended (%s) before both events were queued: the test needs a longer sleep", st)
	}
	var evs []string
	for _, m := range r.Messages(w.ID, "event") {
		evs = append(evs, m["id"].(string))
	}
	if len(evs) != 2 {
		t.Fatalf("%d event messages, want 2", len(evs))
	}
	last := r.WaitTurn(waiting, 30*time.Second, "done")
	one, two := r.WaitTurn(evs[0], 30*time.Second, "done"), r.WaitTurn(evs[1], 30*time.Second, "done")
	if !one.StartedAt.Before(two.StartedAt) || !two.StartedAt.Before(last.StartedAt) {
		t.Errorf("turn starts: event one %s, event two %s, waiting prompt %s; want the events next, in order, before the prompt that waited",
			one.StartedAt.Format(time.StampMilli), two.StartedAt.Format(time.StampMilli), last.StartedAt.Format(time.StampMilli))
	}
}
