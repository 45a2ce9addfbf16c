package domain

// The event rules on the simulated clock (SPEC §8): subscriptions, the
// coalescing window, digests, quiet hours, the wake limit and the idle and
// stall events, delivered by the fanout, flush, release, summary, heartbeat
// and stallscan jobs when the clock reaches them.

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R8.14–R8.16: a watcher subscribed to two scripted sessions gets their turn
// ends in one coalesced message, with all_idle last.
func TestRulesEvCoalesced(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: func(tm *config.Timing) { tm.Coalesce = time.Second }})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	f.evSub(w, map[string]any{"sessions": []string{a, b}}, true)
	before := len(f.evTexts(w))
	f.prompt(a, "one")
	f.prompt(b, "two")
	f.run()
	if n := len(f.evTexts(w)); n != before {
		t.Fatalf("%d event messages before the window closed, want %d", n, before)
	}
	f.advance(time.Second)
	msgs := f.evTexts(w)
	if len(msgs) != before+1 {
		t.Fatalf("%d event messages after the window, want %d: %q", len(msgs), before+1, msgs)
	}
	got := msgs[len(msgs)-1]
	lines := strings.Split(got, "\n")
	if lines[0] != evHeader {
		t.Fatalf("header %q", lines[0])
	}
	wantA := evLine("alpha", a, `turn_end (done) "echo: one"`)
	wantB := evLine("beta", b, `turn_end (done) "echo: two"`)
	wantIdle := "[relay event] all_idle: no turn or task is running in the 2 watched sessions (subscription "
	if len(lines) != 4 || !strings.Contains(got, wantA) || !strings.Contains(got, wantB) || !strings.HasPrefix(lines[3], wantIdle) {
		t.Fatalf("message:\n%s\nwant lines %q, %q and all_idle last", got, wantA, wantB)
	}
}

// R8.8: held events come as one digest message (golden file) when the
// digest is due, not a second before.
func TestRulesEvDigestMessage(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}, "digest_minutes": 3}, true)
	before := len(f.evTexts(w))
	f.evDone(a, "one")
	f.evDone(a, "two")
	f.advance(3*time.Minute - time.Second)
	if n := len(f.evTexts(w)); n != before {
		t.Fatalf("an event came before the digest was due")
	}
	f.advance(time.Second)
	msgs := f.evTexts(w)
	if len(msgs) != before+1 {
		t.Fatalf("%d event messages when the digest was due, want %d: %q", len(msgs), before+1, msgs)
	}
	got := evNormalize(evSubIDRe.ReplaceAllString(msgs[len(msgs)-1], "sub_SUB"), map[string]string{a[:8]: "ALPHA"})
	evGolden(t, "ev_digest", got)
}

// R8.8: after a gap longer than the digest interval, the next event comes at
// once and counts as that digest; the one after it waits the full interval.
func TestRulesEvDigestAfterQuietGap(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}, "digest_minutes": 1}, true)
	f.advance(90 * time.Second)
	before := len(f.history(w, "event"))
	f.evDone(a, "one")
	if n := len(f.history(w, "event")); n != before+1 {
		t.Fatalf("%d event messages after the gap, want the first at once (%d)", n, before+1)
	}
	f.evDone(a, "two")
	f.advance(time.Minute)
	got := f.history(w, "event")
	if len(got) < before+2 {
		t.Fatalf("%d event messages a minute on, want %d", len(got), before+2)
	}
	one, two := got[before], got[before+1]
	if !strings.Contains(one.Text, `"echo: one"`) || !strings.Contains(two.Text, `"echo: two"`) {
		t.Fatalf("messages:\n%s\n%s", one.Text, two.Text)
	}
	if gap := two.CreatedAt.Sub(one.CreatedAt); gap < 55*time.Second {
		t.Fatalf("the second event came %s after the first; the digest interval is 1 min", gap)
	}
}

// Issue 3: a subscription's events stay in its own stream, read with a
// cursor (replay for paired relays after a lost link needs nothing new).
func TestRulesEvSubscriptionStreamCursor(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}}, true)
	subs, err := f.st.WatcherSubscriptions(f.ctx, w)
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v %v", subs, err)
	}
	sub := subs[0].ID
	f.evDone(a, "one")
	f.evDone(a, "two")
	evs, cursor, err := f.st.SubEvents(f.ctx, sub, "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, ev := range evs {
		texts = append(texts, ev.Text)
	}
	if diff := cmp.Diff([]string{"echo: one", "echo: two"}, texts); diff != "" {
		t.Fatalf("events in the subscription's stream (-want +got):\n%s", diff)
	}
	f.evDone(a, "three")
	evs, _, err = f.st.SubEvents(f.ctx, sub, cursor, 100)
	if err != nil {
		t.Fatal(err)
	}
	texts = nil
	for _, ev := range evs {
		texts = append(texts, ev.Text)
	}
	if diff := cmp.Diff([]string{"echo: three"}, texts); diff != "" {
		t.Fatalf("events after the cursor (-want +got):\n%s", diff)
	}
}

// R8.12 (issue 13): an urgent event (an error) flushes the watcher's open
// coalescing window at once — it comes in one message with the events the
// window gathered, not after the window.
func TestRulesEvUrgentFlushesCoalescingWindow(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: func(tm *config.Timing) { tm.Coalesce = time.Minute }})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	f.evSub(w, map[string]any{"sessions": []string{a, b}, "events": []string{"turn_end", "error"}}, true)

	f.evDone(a, "gathered")
	f.advance(time.Second) // the turn_end waits in the open window (one minute)
	if n := len(f.evTexts(w)); n != 0 {
		t.Fatalf("%d event messages before the window closed, want 0", n)
	}
	tid := f.prompt(b, script(map[string]any{"error": "boom"}))
	f.run() // no time passes: the error does not wait for the window
	f.evTurnStatus(tid, store.TurnError)
	msgs := f.evTexts(w)
	if len(msgs) != 1 {
		t.Fatalf("%d event messages, want the one flushed by the error: %q", len(msgs), msgs)
	}
	for _, line := range []string{evLine("alpha", a, `turn_end (done) "echo: gathered"`), evLine("beta", b, `error "boom"`)} {
		if !strings.Contains(msgs[0], line) {
			t.Errorf("the flushed message lacks %q:\n%s", line, msgs[0])
		}
	}
}

// R8.17: after WakeLimitPerHour wakes the rest come as one summary; errors
// still come at once; an hour later wakes are plain again. The wake limit
// must hold whatever the coalescing window, 0 included.
func TestRulesEvWakeLimitSummary(t *testing.T) {
	t.Parallel()
	for _, co := range []time.Duration{0, time.Minute} {
		t.Run("coalesce="+co.String(), func(t *testing.T) {
			t.Parallel()
			evWakeLimitScenario(t, co)
		})
	}
}

func evWakeLimitScenario(t *testing.T, coalesce time.Duration) {
	f := newEvFixture(t, evOptions{timing: func(tm *config.Timing) {
		tm.Coalesce = coalesce
		tm.WakeLimitPerHour = 2
		tm.WakeSummaryEvery = 30 * time.Minute
	}})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}}, true)
	f.evSubDirect(w, map[string]any{"sessions": []string{b}, "events": []string{"error"}})
	last := func() string {
		t.Helper()
		msgs := f.evTexts(w)
		if len(msgs) == 0 {
			t.Fatalf("no event message")
		}
		return msgs[len(msgs)-1]
	}

	for i, txt := range []string{"w1", "w2"} {
		f.evDone(a, txt)
		f.advance(coalesce)
		if diff := cmp.Diff(evHeader+"\n"+evLine("alpha", a, `turn_end (done) "echo: `+txt+`"`), last()); diff != "" {
			t.Fatalf("wake %d (-want +got):\n%s", i+1, diff)
		}
	}
	// Over the limit: three prompts at once fall into one summary.
	for _, txt := range []string{"h1", "h2", "h3"} {
		f.prompt(a, txt)
	}
	f.run()
	f.advance(30*time.Minute + coalesce)
	msgs := f.evTexts(w)
	if len(msgs) != 3 || !strings.Contains(msgs[2], "Summary of") {
		t.Fatalf("after 2 wakes within the hour (limit 2) the next events must come as one wake-limit summary, not wake one by one; "+
			"the event messages are:\n%s", strings.Join(msgs, "\n---\n"))
	}
	want := strings.Join([]string{evHeader,
		"Summary of 3 events held by the wake limit (2 wakes in the last hour; questions and errors come at once):",
		evLine("alpha", a, `turn_end (done) "echo: h1"`),
		evLine("alpha", a, `turn_end (done) "echo: h2"`),
		evLine("alpha", a, `turn_end (done) "echo: h3"`)}, "\n")
	if diff := cmp.Diff(want, msgs[2]); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	// An error still comes at once, on its own: no clock time passes.
	tid := f.prompt(b, script(map[string]any{"error": "boom"}))
	f.run()
	f.evTurnStatus(tid, store.TurnError)
	if diff := cmp.Diff(evHeader+"\n"+evLine("beta", b, `error "boom"`), last()); diff != "" {
		t.Errorf("error message (-want +got):\n%s", diff)
	}
	// An hour after the last wake the limit no longer applies.
	f.advance(61 * time.Minute)
	f.evDone(a, "w3")
	f.advance(coalesce)
	if diff := cmp.Diff(evHeader+"\n"+evLine("alpha", a, `turn_end (done) "echo: w3"`), last()); diff != "" {
		t.Errorf("a wake an hour later, want a plain wake (-want +got):\n%s", diff)
	}
}
