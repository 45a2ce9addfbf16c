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
