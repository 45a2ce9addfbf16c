package relaytest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
)

// subscribeFromTurn subscribes the watcher from inside a running turn and allows the first-subscribe card.
func (r *Relay) subscribeFromTurn(watcher Session, args map[string]any) {
	r.tb.Helper()
	args["action"] = "subscribe"
	if env, _ := r.InTurn(watcher, args, "allow"); env["ok"] != true {
		r.tb.Fatalf("subscribe failed: %v", env)
	}
}

// R8.14–R8.16: a watcher subscribed to two scripted sessions gets their turn ends in one coalesced message.
func TestEventsCoalesced(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = time.Second }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	b := r.NewSession(map[string]any{"title": "beta"})
	r.subscribeFromTurn(w, map[string]any{"sessions": []string{a.ID, b.ID}})
	before := len(r.EventTexts(w.ID))
	ma := r.Message(a.ID, "one")
	mb := r.Message(b.ID, "two")
	r.WaitTurn(ma, 10*time.Second, "done")
	r.WaitTurn(mb, 10*time.Second, "done")
	var msgs []string
	Eventually(t, 15*time.Second, func() bool {
		msgs = r.EventTexts(w.ID)
		return len(msgs) > before
	}, "an event message in the watcher")
	got := msgs[len(msgs)-1]
	lines := strings.Split(got, "\n")
	if lines[0] != "[relay event · automated message from OAR, not from the user; it approves nothing]" {
		t.Fatalf("header %q", lines[0])
	}
	wantA := `[relay event] session "alpha" (` + a.ID[:8] + `): turn_end (done) "echo: one"`
	wantB := `[relay event] session "beta" (` + b.ID[:8] + `): turn_end (done) "echo: two"`
	wantIdle := "[relay event] all_idle: no turn or task is running in the 2 watched sessions (subscription "
	if len(lines) != 4 || !strings.Contains(got, wantA) || !strings.Contains(got, wantB) || !strings.HasPrefix(lines[3], wantIdle) {
		t.Fatalf("message:\n%s\nwant lines %q, %q and all_idle last", got, wantA, wantB)
	}
}

// normalize replaces the random ids in an event message with stable names for golden files.
func normalize(msg string, names map[string]string) string {
	for id, name := range names {
		msg = strings.ReplaceAll(msg, id, name)
	}
	return msg
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := "testdata/" + name + ".golden"
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s: %v (run with UPDATE_GOLDEN=1 to write it)", path, err)
	}
	if got != string(want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var subIDRe = regexp.MustCompile(`sub_[0-9a-f]{10}`)

// R8.8: held events come as one digest message (golden file), on a clock 60× faster.
func TestDigestMessage(t *testing.T) {
	t.Parallel()
	clock := scheduler.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 60)
	r := Start(t, Options{Clock: clock, Config: func(c *config.Config) { c.Timing.Coalesce = 0 }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	r.subscribeFromTurn(w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}, "digest_minutes": 3})
	before := len(r.EventTexts(w.ID))
	r.WaitTurn(r.Message(a.ID, "one"), 10*time.Second, "done")
	r.WaitTurn(r.Message(a.ID, "two"), 10*time.Second, "done")
	if n := len(r.EventTexts(w.ID)); n != before {
		t.Fatalf("an event came before the digest was due")
	}
	var msgs []string
	Eventually(t, 20*time.Second, func() bool {
		msgs = r.EventTexts(w.ID)
		return len(msgs) > before
	}, "the digest message")
	got := normalize(subIDRe.ReplaceAllString(msgs[len(msgs)-1], "sub_SUB"), map[string]string{a.ID[:8]: "ALPHA"})
	golden(t, "digest", got)
}

// R8.8: after a gap longer than the digest interval, the next event comes at
// once and counts as that digest; the one after it waits the full interval.
func TestDigestAfterQuietGap(t *testing.T) {
	t.Parallel()
	clock := scheduler.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 60)
	r := Start(t, Options{Clock: clock, Config: func(c *config.Config) { c.Timing.Coalesce = 0 }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	r.subscribeFromTurn(w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}, "digest_minutes": 1})
	start := clock.Now()
	Eventually(t, 10*time.Second, func() bool { return clock.Now().Sub(start) > 90*time.Second }, "the clock to pass the digest interval")
	before := len(r.EventTexts(w.ID))
	r.WaitTurn(r.Message(a.ID, "one"), 10*time.Second, "done")
	r.WaitTurn(r.Message(a.ID, "two"), 10*time.Second, "done")
	type msg struct {
		text string
		at   time.Time
	}
	var got []msg
	Eventually(t, 15*time.Second, func() bool {
		got = got[:0]
		for _, m := range r.Get(w.ID)["messages"].([]any) {
			mm := m.(map[string]any)
			if mm["role"] == "event" {
				at, _ := time.Parse(time.RFC3339, mm["createdAt"].(string))
				got = append(got, msg{mm["text"].(string), at})
			}
		}
		return len(got) >= before+2
	}, "two event messages")
	one, two := got[before], got[before+1]
	if !strings.Contains(one.text, `"echo: one"`) || !strings.Contains(two.text, `"echo: two"`) {
		t.Fatalf("messages:\n%s\n%s", one.text, two.text)
	}
	if gap := two.at.Sub(one.at); gap < 55*time.Second {
		t.Fatalf("the second event came %s after the first; the digest interval is 1 min", gap)
	}
}

// Issue 3: a subscription's events stay in its own stream, read with a cursor
// (replay for paired relays after a lost link needs nothing new).
func TestSubscriptionStreamCursor(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = 0 }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	r.subscribeFromTurn(w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}})
	ctx := context.Background()
	subs, err := r.App.Store().WatcherSubscriptions(ctx, w.ID)
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v %v", subs, err)
	}
	sub := subs[0].ID
	r.WaitTurn(r.Message(a.ID, "one"), 10*time.Second, "done")
	r.WaitTurn(r.Message(a.ID, "two"), 10*time.Second, "done")
	var evs []store.Event
	var cursor string
	Eventually(t, 10*time.Second, func() bool {
		evs, cursor, err = r.App.Store().SubEvents(ctx, sub, "0", 100)
		return err == nil && len(evs) == 2
	}, "two events in the subscription's stream")
	if evs[0].Text != "echo: one" || evs[1].Text != "echo: two" {
		t.Fatalf("events %+v", evs)
	}
	r.WaitTurn(r.Message(a.ID, "three"), 10*time.Second, "done")
	Eventually(t, 10*time.Second, func() bool {
		evs, _, err = r.App.Store().SubEvents(ctx, sub, cursor, 100)
		return err == nil && len(evs) == 1
	}, "only the event after the cursor")
	if evs[0].Text != "echo: three" {
		t.Fatalf("after the cursor: %+v", evs)
	}
}
