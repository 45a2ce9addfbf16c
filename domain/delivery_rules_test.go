package domain

// Event delivery rules moved down from relaytest (SPEC §8): a digest and the
// wake-limit summary in one line (R8.17), an event for a busy watcher
// queued next (R8.15), no echo of the watcher's own prompt (R8.18), a
// transfer of a subscription that watched only the caller (R8.24).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// dlvLines waits (actAuto running the jobs) until n event lines of sid
// contain frag and returns the event lines.
func (f *fixture) dlvLines(sid, frag string, n int) []string {
	f.t.Helper()
	var lines []string
	f.actUntil(fmt.Sprintf("%d event lines in %s containing %q", n, sid[:8], frag), func() bool {
		lines = f.evLines(sid)
		return evCount(lines, frag) >= n
	})
	return lines
}

// dlvMsg waits (actAuto running the jobs) for an event message of sid
// containing frag and returns it.
func (f *fixture) dlvMsg(sid, frag string) string {
	f.t.Helper()
	var got string
	f.actUntil(fmt.Sprintf("an event message in %s containing %q", sid[:8], frag), func() bool {
		for _, m := range f.evTexts(sid) {
			if strings.Contains(m, frag) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

// R8.17: when the wake-limit summary and a subscription's digest fall
// together, one `Digest of …` line names both.
func TestRulesDeliveryDigestAndWakeLimitSummaryOneLine(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: func(tm *config.Timing) {
		tm.Coalesce = 0
		tm.WakeLimitPerHour = 2
		tm.WakeSummaryEvery = 30 * time.Minute
	}})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}}, true)
	dig := f.evSubDirect(w, map[string]any{"sessions": []string{b}, "events": []string{"turn_end"}, "digest_minutes": 6})["id"].(string)

	for i, txt := range []string{"w1", "w2"} {
		f.evDone(a, txt)
		if msgs := f.evTexts(w); len(msgs) != i+1 || !strings.Contains(msgs[i], `"echo: `+txt+`"`) {
			t.Fatalf("wake %d: event messages %q", i+1, msgs)
		}
	}
	// Over the limit: a plain event is held for the summary, then the digest's events join it.
	f.evDone(a, "h1")
	f.evDone(b, "d1")
	f.evDone(b, "d2")
	for waited := time.Duration(0); len(f.evTexts(w)) < 3; waited += 10 * time.Second {
		if waited > 31*time.Minute {
			t.Fatalf("no third event message within 31 min: %q", f.evTexts(w))
		}
		f.advance(10 * time.Second)
	}
	msgs := f.evTexts(w)
	want := strings.Join([]string{evHeader,
		fmt.Sprintf("Digest of 3 events (subscription %s every 6 min, with the summary held by the wake limit: 2 wakes in the last hour; questions and errors come at once):", dig),
		evLine("alpha", a, `turn_end (done) "echo: h1"`),
		evLine("beta", b, `turn_end (done) "echo: d1"`),
		evLine("beta", b, `turn_end (done) "echo: d2"`)}, "\n")
	if len(msgs) != 3 {
		t.Fatalf("event messages:\n%s\nwant three", strings.Join(msgs, "\n---\n"))
	}
	if diff := cmp.Diff(want, msgs[2]); diff != "" {
		t.Errorf("the third event message (-want +got):\n%s", diff)
	}
}

// R8.15: an event message for a busy watcher is queued as its next prompt,
// ahead of prompts already waiting (events among themselves in order).
func TestRulesDeliveryEventQueuedNextForBusyWatcher(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}}, true)
	actAuto(f)

	busy := f.prompt(w, script(map[string]any{"sleep_ms": 600000}))
	f.actTurn(busy, store.TurnRunning)
	waiting := f.prompt(w, "waiting behind the busy turn")
	for _, txt := range []string{"one", "two"} {
		f.actTurn(f.prompt(a, txt))
		f.dlvMsg(w, `"echo: `+txt+`"`)
	}
	var evs []string
	for _, m := range f.history(w, "event") {
		evs = append(evs, m.ID)
	}
	if len(evs) != 2 {
		t.Fatalf("%d event messages, want 2", len(evs))
	}
	queued, err := f.st.QueuedTurns(f.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{evs[0], evs[1], waiting}, queued); diff != "" {
		t.Errorf("the watcher's queue behind its running turn: the events next, in order, then the prompt that waited (-want +got):\n%s", diff)
	}
	if _, err := f.r.OwnerStop(f.ctx, w); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{evs[0], evs[1], waiting} {
		if tr := f.actTurn(id); tr.Status != store.TurnDone {
			t.Fatalf("turn %s ended %s: %s", id, tr.Status, tr.Error)
		}
	}
	// The replies came in the order the turns ran.
	var order []string
	for _, m := range f.history(w, "assistant") {
		switch {
		case strings.Contains(m.Text, `"echo: one"`):
			order = append(order, "event one")
		case strings.Contains(m.Text, `"echo: two"`):
			order = append(order, "event two")
		case strings.Contains(m.Text, "waiting behind the busy turn"):
			order = append(order, "waiting prompt")
		}
	}
	if diff := cmp.Diff([]string{"event one", "event two", "waiting prompt"}, order); diff != "" {
		t.Errorf("the turns' order (-want +got):\n%s", diff)
	}
}

// R8.18: the watcher's own send whose reply it got does not wake it with that
// turn's turn_end; without a wait it does; errors still come; a turn_end that
// ends a once subscription wakes it even for its own prompt.
func TestRulesDeliveryNoEchoOwnPrompt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, timing: evNoCoalesce, work: true})
	w := f.session(NewSession{Title: "watcher"})
	w2 := f.session(NewSession{Title: "once-watcher"})
	a := f.session(NewSession{Title: "alpha"})
	c := f.session(NewSession{Title: "gamma"})
	f.evSub(w, map[string]any{"sessions": []string{a}}, true)
	once := f.evSub(w2, map[string]any{"sessions": []string{c}, "events": []string{"turn_end"}, "once": true}, true)
	actAuto(f)
	send := func(caller, sid string, extra map[string]any) map[string]any {
		return f.ok(caller, actWith(map[string]any{"action": "send", "relay": "this", "session": sid}, extra))
	}
	marker := func(txt string) []string {
		f.actTurn(f.prompt(a, txt))
		return f.dlvLines(w, `"echo: `+txt+`"`, 1)
	}

	// 1. send with a wait that got the reply: no echo.
	if env := send(w, a, map[string]any{"text": "waited", "wait_seconds": 15}); env["status"] != "done" {
		t.Fatalf("send: %v", env)
	}
	marker("marker1")

	// 2. wait_seconds 0 and no wait: it wakes. (The agent sleeps a second of
	// the work clock: an instant reply could be done before the call reads
	// its turn once, which is no wait either.)
	env := send(w, a, map[string]any{"text": script(map[string]any{"sleep_ms": 1000}, map[string]any{"reply": "nowait"}), "wait_seconds": 0})
	if env["status"] == "done" {
		t.Fatalf("send with wait_seconds 0 waited: %v", env)
	}
	f.pass(time.Second)
	f.actTurn(env["message_id"].(string))
	f.dlvLines(w, `"nowait"`, 1)

	// 3. wait_seconds 0 and then a wait that gets the reply: no echo.
	env = send(w, a, map[string]any{"text": script(map[string]any{"sleep_ms": 1500}, map[string]any{"reply": "later"}), "wait_seconds": 0})
	waited := f.meanwhile("wait", func() {
		env = f.ok(w, map[string]any{"action": "wait", "relay": "this", "session": a, "message_id": env["message_id"], "wait_seconds": 15})
	})
	f.due(f.work.Now().Add(15 * time.Second)) // the wait waits
	f.pass(1500 * time.Millisecond)           // the agent's sleep ends: it replies
	waited()
	if env["status"] != "done" {
		t.Fatalf("wait: %v", env)
	}
	// 4. a wait that ran out before the reply: the held turn_end is delivered.
	sent := f.meanwhile("send", func() {
		env = send(w, a, map[string]any{"text": script(map[string]any{"sleep_ms": 2500}, map[string]any{"reply": "too slow"}), "wait_seconds": 1})
	})
	f.due(f.work.Now().Add(2500 * time.Millisecond)) // the agent sleeps
	f.pass(time.Second)                              // the wait runs out
	sent()
	if env["status"] == "done" {
		t.Fatalf("send with wait_seconds 1 got the reply of a 2.5 s turn: %v", env)
	}
	f.pass(1500 * time.Millisecond) // the agent replies
	f.dlvLines(w, `"too slow"`, 1)

	// 5. an error of its own waited prompt still comes.
	if env = send(w, a, map[string]any{"text": script(map[string]any{"error": "boom"}), "wait_seconds": 15}); env["status"] != "error" {
		t.Fatalf("send: %v", env)
	}
	f.dlvLines(w, `error "boom"`, 1)
	lines := marker("marker2")
	for _, frag := range []string{`"echo: waited"`, `"later"`} {
		if n := evCount(lines, frag); n != 0 {
			t.Errorf("the watcher was woken by its own waited prompt's turn_end (%s):\n%s", frag, strings.Join(lines, "\n"))
		}
	}

	// 6. once: the turn_end that ends it wakes the watcher even for its own prompt.
	if env = send(w2, c, map[string]any{"text": "own", "wait_seconds": 15}); env["status"] != "done" {
		t.Fatalf("send: %v", env)
	}
	if diff := cmp.Diff(evHeader+"\n"+evLine("gamma", c, `turn_end (done) "echo: own"`), f.dlvMsg(w2, `"echo: own"`)); diff != "" {
		t.Errorf("once message (-want +got):\n%s", diff)
	}
	if s := f.evSubList(w2)[once["id"].(string)]; s["endReason"] != "fired" {
		t.Errorf("once subscription after its event: %v", s)
	}
}

// R8.24 (issue 13): a subscription that watched only the caller is ended
// with a reason when transferred (the caller never watches itself, so it has
// no copy), not left active on the old side.
func TestRulesDeliveryTransferEndsSubscriptionOfOnlyTheCaller(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{})
	w := f.session(NewSession{Title: "old watcher"})
	v := f.session(NewSession{Title: "heir"})
	c := f.session(NewSession{Title: "watched"})
	onlyHeir := f.evSub(w, map[string]any{"sessions": []string{v}}, true)["id"].(string)
	both := f.evSubDirect(w, map[string]any{"sessions": []string{v, c}})["id"].(string)

	env, _ := f.evInTurn(v, map[string]any{"action": "transfer_subscriptions", "from": w}, "allow")
	if env["ok"] != true {
		t.Fatalf("transfer: %v", env)
	}
	if moved, _ := env["subscriptions"].([]any); len(moved) != 1 {
		t.Fatalf("moved %d subscriptions, want 1 (the one watching the heir and another): %v", len(moved), env)
	}
	if diff := cmp.Diff([]any{onlyHeir}, env["ended"]); diff != "" {
		t.Errorf("ended (-want +got):\n%s", diff)
	}
	actHas(t, "note", env["note"], "watched only this conversation")
	ls := f.evSubList(w)
	for _, id := range []string{onlyHeir, both} {
		if ls[id]["endReason"] != "transferred" {
			t.Errorf("old subscription %s after the transfer: %v, want ended transferred", id, ls[id])
		}
	}
	d, err := f.r.OwnerSession(f.ctx, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Watched == nil || *d.Watched {
		t.Errorf("the heir's watched after the transfer: %v, want false", d.Watched)
	}
}
