package domain

// The event rules on the simulated clock (SPEC §8): subscriptions, the
// coalescing window, digests, quiet hours, the wake limit and the idle and
// stall events, delivered by the fanout, flush, release, summary, heartbeat
// and stallscan jobs when the clock reaches them.

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testwait"
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

// R8.1, R8.14a: heartbeat_minutes 1 gives a heartbeat line each minute, also
// for a subscription that names no events (setting heartbeat_minutes asks
// for them); R8.9: none inside quiet hours.
func TestRulesEvHeartbeat(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{start: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), timing: evNoCoalesce})
	wd := f.session(NewSession{Title: "default-watcher"})
	wq := f.session(NewSession{Title: "quiet-watcher"})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	both := []string{a, b}
	subD := f.evSub(wd, map[string]any{"sessions": both, "heartbeat_minutes": 1}, true)
	f.evSub(wq, map[string]any{"sessions": both, "events": []string{"heartbeat"}, "heartbeat_minutes": 1,
		"quiet_hours": map[string]any{"from": "11:00", "to": "14:00", "tz": "UTC"}}, true)
	sub := f.evSub(w, map[string]any{"sessions": both, "events": []string{"heartbeat"}, "heartbeat_minutes": 1}, true)
	if sub["heartbeatMinutes"] != float64(1) {
		t.Errorf("heartbeatMinutes = %v", sub["heartbeatMinutes"])
	}
	want := "[relay event] heartbeat: 2 watched sessions, 0 running, 2 idle (subscription " + sub["id"].(string) + ")"
	f.advance(time.Minute - time.Second)
	if got := f.evLines(w); len(got) != 0 {
		t.Errorf("lines before the first minute: %q", got)
	}
	f.advance(time.Second)
	if diff := cmp.Diff([]string{want}, f.evLines(w)); diff != "" {
		t.Errorf("after a minute (-want +got):\n%s", diff)
	}
	f.advance(time.Minute)
	if diff := cmp.Diff([]string{want, want}, f.evLines(w)); diff != "" {
		t.Errorf("after two minutes (-want +got):\n%s", diff)
	}
	if got := f.evLines(wq); len(got) != 0 {
		t.Errorf("heartbeats came inside quiet hours:\n%s", strings.Join(got, "\n"))
	}
	wantD := "[relay event] heartbeat: 2 watched sessions, 0 running, 2 idle (subscription " + subD["id"].(string) + ")"
	if got := f.evLines(wd); evCount(got, wantD) == 0 {
		t.Errorf("a subscription with heartbeat_minutes 1 and no events got no heartbeat while another got 2 (R8.1: heartbeat every heartbeat_minutes); its lines: %q", got)
	}
}

// R8.6: a once subscription with a digest ends at its first event, shows it
// held in list_subscriptions until the digest delivers it, and takes nothing
// more. R8.5: match filters case-insensitively. R8.12: two subscriptions
// taking the same event deliver it once, the undelayed one at once.
func TestRulesEvOnceDigestMatchAndDuplicates(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	once := f.evSub(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}, "once": true, "digest_minutes": 3}, true)
	oid := once["id"].(string)
	if once["once"] != true || once["digestMinutes"] != float64(3) {
		t.Errorf("subscription: %v", once)
	}
	matched := f.evSubDirect(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}, "match": `ECHO: mark\w+`})
	if matched["match"] != `ECHO: mark\w+` {
		t.Errorf("match = %v", matched["match"])
	}
	digestB := f.evSubDirect(w, map[string]any{"sessions": []string{b}, "events": []string{"turn_end"}, "digest_minutes": 3})
	f.evSubDirect(w, map[string]any{"sessions": []string{b}, "events": []string{"turn_end"}})

	f.evDone(a, "first")
	held := f.evSubList(w)[oid]
	if held["endReason"] != "fired" || held["heldCount"] != float64(1) || held["nextDeliveryAt"] == nil {
		t.Errorf("the fired once subscription while its event is held: %v", held)
	}
	f.evDone(a, "second")
	f.evDone(a, "other")
	f.evDone(a, "marker")
	if n := evCount(f.evLines(w), `"echo: marker"`); n != 1 {
		t.Errorf("%d marker lines at once, want 1", n)
	}
	// R8.12: the plain subscription delivers at once; the digest one adds nothing later.
	f.evDone(b, "dup")
	if n := evCount(f.evLines(w), `"echo: dup"`); n != 1 {
		t.Errorf("%d dup lines at once, want 1", n)
	}
	f.advance(3 * time.Minute)
	var first string
	for _, m := range f.evTexts(w) {
		if strings.Contains(m, `"echo: first"`) {
			first = m
		}
	}
	if diff := cmp.Diff(evHeader+"\n"+evLine("alpha", a, `turn_end (done) "echo: first"`), first); diff != "" {
		t.Errorf("a digest of one event must read like the event alone (-want +got):\n%s", diff)
	}
	after := f.evSubList(w)[oid]
	if after["endReason"] != "fired" {
		t.Errorf("once subscription: %v", after)
	}
	if _, ok := after["heldCount"]; ok {
		t.Errorf("an ended subscription with nothing held shows heldCount: %v", after)
	}
	if got := f.evSubList(w)[digestB["id"].(string)]; got["heldCount"] != float64(0) {
		t.Errorf("the digest subscription holds %v events after its digest (which found the event delivered)", got["heldCount"])
	}
	f.evDone(b, "later")
	lines := f.evLines(w)
	got := map[string]int{}
	for _, frag := range []string{`"echo: first"`, `"echo: second"`, `"echo: other"`, `"echo: marker"`, `"echo: dup"`, `"echo: later"`} {
		got[frag] = evCount(lines, frag)
	}
	want := map[string]int{`"echo: first"`: 1, `"echo: second"`: 0, `"echo: other"`: 0, `"echo: marker"`: 1, `"echo: dup"`: 1, `"echo: later"`: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines per event (-want +got):\n%s\n%s", diff, strings.Join(lines, "\n"))
	}
}

// R8.7: sessions excluded from ["all"] are ignored, all_idle included; the
// own conversation is silently left out; R8.12: two subscriptions taking one
// event deliver it once; R7.4: list_sessions marks watched sessions.
func TestRulesEvSubscribeAllExclude(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	c := f.session(NewSession{Title: "gamma"})
	sub := f.evSub(w, map[string]any{"sessions": []string{"all"}, "exclude": []string{c}}, true)
	f.evSubDirect(w, map[string]any{"sessions": []string{a}, "events": []string{"turn_end"}})

	idle := "[relay event] all_idle: no turn or task is running in the 2 watched sessions (subscription " + sub["id"].(string) + ")"
	f.evDone(a, "one")
	if n := evCount(f.evLines(w), idle); n != 1 {
		t.Errorf("%d all_idle lines after alpha, want 1", n)
	}
	f.evDone(c, "excluded")
	f.evDone(b, "two")
	f.advance(time.Minute) // anything late would come now
	lines := f.evLines(w)
	if n := evCount(lines, idle); n != 2 {
		t.Errorf("%d all_idle lines after alpha and beta, want 2 (a transition of the watched sessions: the excluded gamma and the watcher's own turns do not re-arm it):\n%s",
			n, strings.Join(lines, "\n"))
	}
	if n := evCount(lines, `"echo: two"`); n != 1 {
		t.Errorf("%d lines of beta's turn, want 1:\n%s", n, strings.Join(lines, "\n"))
	}
	if n := evCount(lines, `"echo: one"`); n != 1 {
		t.Errorf("an event two subscriptions took came %d times, want once (R8.12):\n%s", n, strings.Join(lines, "\n"))
	}
	if n := evCount(lines, c[:8]) + evCount(lines, "excluded"); n != 0 {
		t.Errorf("an excluded session's events came:\n%s", strings.Join(lines, "\n"))
	}
	if n := evCount(lines, w[:8]); n != 0 {
		t.Errorf("the watcher's own turns were delivered to it:\n%s", strings.Join(lines, "\n"))
	}
	env := f.call(w, map[string]any{"action": "list_sessions", "relay": "this"})
	watched := map[string]any{}
	list, _ := env["sessions"].([]any)
	for _, x := range list {
		s := x.(map[string]any)
		watched[s["id"].(string)] = s["watched"]
	}
	if diff := cmp.Diff(map[string]any{a: true, b: true, c: nil, w: nil}, watched); diff != "" {
		t.Errorf("list_sessions watched: alpha and beta true, the excluded gamma and the watcher itself no field (-want +got):\n%s", diff)
	}
}

// R8.4–R8.9, R3.4a: bad subscribe arguments are rejected before any card
// with the exact messages; the first subscribe asks a card naming its
// options, the second asks none; the limit of subscriptions per conversation.
func TestRulesEvSubscribeValidationCardAndLimit(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce, limits: func(l *config.Limits) { l.SubscriptionsPerConversation = 2 }})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	c := f.session(NewSession{Title: "gamma"})
	sub := func(args map[string]any) map[string]any {
		args["action"] = "subscribe"
		args["relay"] = "this"
		return args
	}
	one := []string{a}
	const times = `quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)`
	type badSub struct {
		args map[string]any
		code string
		msg  string // the error's start
	}
	bad := []badSub{
		{map[string]any{"sessions": one, "match": "(unclosed"}, CodeInvalidInput, ""},
		{map[string]any{"sessions": one, "exclude": []string{c}}, CodeInvalidInput,
			`exclude goes with sessions ["all"] only; a list of sessions names what it watches.`},
		{map[string]any{"sessions": []string{w}}, CodeSelf, ""},
		{map[string]any{"sessions": []string{a, w}}, CodeSelf, ""},
		{map[string]any{"sessions": []string{"0000000000000000eeeeeeeeeeeeeeee"}}, CodeNotFound, ""},
		{map[string]any{"sessions": one, "events": []string{"turn_ended"}}, CodeInvalidInput, ""},
		{map[string]any{"sessions": one, "quiet_hours": map[string]any{"from": "23:00", "to": "23:00", "tz": "UTC"}}, CodeInvalidInput,
			"quiet_hours from and to must differ"},
		{map[string]any{"sessions": one, "quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Berlin"}}, CodeInvalidInput,
			`quiet_hours tz "Berlin" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")`},
		{map[string]any{"sessions": one, "quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Mars/Olympus_Mons"}}, CodeInvalidInput,
			`quiet_hours tz "Mars/Olympus_Mons" is not an IANA time zone`},
	}
	for _, k := range []string{"digest_minutes", "heartbeat_minutes", "stalled_minutes"} {
		for _, v := range []int{0, 1441, -1} {
			bad = append(bad, badSub{map[string]any{"sessions": one, k: v}, CodeInvalidInput, ""})
		}
	}
	for _, q := range []map[string]any{
		{"from": "24:00", "to": "06:00", "tz": "Europe/Berlin"},
		{"from": "23:60", "to": "06:00", "tz": "Europe/Berlin"},
		{"from": "7:00", "to": "08:00", "tz": "Europe/Berlin"},
		{"from": "23:00", "to": "", "tz": "Europe/Berlin"},
		{"from": "23:00", "to": "6pm", "tz": "UTC"},
	} {
		bad = append(bad, badSub{map[string]any{"sessions": one, "quiet_hours": q}, CodeInvalidInput, times})
	}
	type refusal struct {
		Code    string
		Starts  bool // the error starts with the message
		Nothing bool // an invalid input says that nothing was made
	}
	for _, tt := range bad {
		env := f.call(w, sub(tt.args))
		msg, _ := env["error"].(string)
		code, _ := env["code"].(string)
		got := refusal{Code: code, Starts: strings.HasPrefix(msg, tt.msg),
			Nothing: code != CodeInvalidInput || strings.Contains(msg, "No subscription was made.")}
		if diff := cmp.Diff(refusal{Code: tt.code, Starts: true, Nothing: true}, got); diff != "" {
			t.Errorf("subscribe %v (-want +got):\n%s\nerror %q", tt.args, diff, msg)
		}
	}
	if cards, err := f.st.PendingCards(f.ctx); err != nil || len(cards) != 0 {
		t.Fatalf("a rejected subscribe left cards: %v %v", cards, err)
	}
	// A first subscribe outside a turn needs the card and cannot ask it.
	if diff := cmp.Diff(outcome{Code: CodeNoActiveTurn, Has: true}, outcomeOf(f.call(w, sub(map[string]any{"sessions": one})), "")); diff != "" {
		t.Errorf("a first subscribe outside a turn (-want +got):\n%s", diff)
	}

	// R5.2.2, R5.4: the first subscribe's card names its options.
	s1, card := f.evInTurn(w, sub(map[string]any{"sessions": []string{"all"}, "exclude": []string{c}, "digest_minutes": 30,
		"quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}}), "allow")
	if s1["ok"] != true {
		t.Fatalf("subscribe: %v", s1)
	}
	if lines := strings.Join(card.Lines, "\n"); !strings.Contains(lines, "digest every 30 min, quiet 23:00–06:00 Europe/Berlin, except 1 it leaves out") {
		t.Errorf("card lines do not name the options:\n%s", lines)
	}
	if card.Relay != "desk" {
		t.Errorf("card relay = %v", card.Relay)
	}
	got := s1["subscription"].(map[string]any)
	if id, _ := got["id"].(string); !strings.HasPrefix(id, "sub_") {
		t.Errorf("subscription id %q", id)
	}
	want := map[string]any{"sessions": "all", "digestMinutes": float64(30), "exclude": []any{c}, "stalledMinutes": float64(15), "once": false,
		// R8.2: the default events.
		"events":     []any{"question_asked", "error", "turn_end", "subagent_finished", "task_failed", "stalled", "all_idle"},
		"quietHours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}}
	sel := map[string]any{}
	for k := range want {
		sel[k] = got[k]
	}
	if diff := cmp.Diff(want, sel); diff != "" {
		t.Errorf("subscription (-want +got):\n%s", diff)
	}
	// The second subscribe asks no card (it works outside a turn); empty quiet_hours counts as none.
	env := f.call(w, sub(map[string]any{"sessions": one, "quiet_hours": map[string]any{"from": "", "to": "", "tz": ""}}))
	if env["ok"] != true {
		t.Fatalf("second subscribe: %v", env)
	}
	s2 := env["subscription"].(map[string]any)
	if _, ok := s2["quietHours"]; ok {
		t.Errorf("all-empty quiet_hours was kept: %v", s2)
	}
	if want := "subscribe → desk: 1 session (" + s2["id"].(string) + ")"; env["summary"] != want {
		t.Errorf("summary %q, want %q", env["summary"], want)
	}
	if l := f.evSubList(w)[s2["id"].(string)]; l["quietHours"] != nil || l["heldCount"] != float64(0) || l["nextDeliveryAt"] != nil {
		t.Errorf("list entry: %v", l)
	}
	// R8.4: the limit (2 here).
	if diff := cmp.Diff(outcome{Code: CodeLimit, Has: true}, outcomeOf(f.call(w, sub(map[string]any{"sessions": one})), "No subscription was made.")); diff != "" {
		t.Errorf("the third subscribe (-want +got):\n%s", diff)
	}
	if n := len(f.evSubList(w)); n != 2 {
		t.Errorf("%d subscriptions after the refused one, want 2", n)
	}
}

// R8.9, R8.11: inside quiet hours turn_end events are held and come as one
// message when the window ends (golden file); error and question_asked come
// at once; list_subscriptions shows heldCount and nextDeliveryAt meanwhile.
func TestRulesEvQuietHoursHeldAndReleased(t *testing.T) {
	t.Parallel()
	// 22:59:00 Europe/Berlin (CEST); the window is 23:00–23:06.
	f := newEvFixture(t, evOptions{start: time.Date(2026, 6, 10, 20, 59, 0, 0, time.UTC), timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	sub := f.evSub(w, map[string]any{"sessions": []string{a, b}, "events": []string{"turn_end", "error", "question_asked"},
		"quiet_hours": map[string]any{"from": "23:00", "to": "23:06", "tz": "Europe/Berlin"}}, true)
	sid := sub["id"].(string)
	if diff := cmp.Diff(map[string]any{"from": "23:00", "to": "23:06", "tz": "Europe/Berlin"}, sub["quietHours"]); diff != "" {
		t.Fatalf("subscription quietHours (-want +got):\n%s", diff)
	}
	winEnd := time.Date(2026, 6, 10, 21, 6, 0, 0, time.UTC)
	f.advance(time.Minute) // 23:00 Berlin
	held := func(n int) map[string]any {
		t.Helper()
		s := f.evSubList(w)[sid]
		if s["heldCount"] != float64(n) {
			t.Fatalf("subscription %s holds %v events, want %d: %v", sid, s["heldCount"], n, s)
		}
		return s
	}
	msgWith := func(frag string) string {
		for _, m := range f.evTexts(w) {
			if strings.Contains(m, frag) {
				return m
			}
		}
		return ""
	}

	// Inside the window.
	f.evDone(a, "one")
	held(1)
	tid := f.prompt(b, script(map[string]any{"error": "boom"}))
	f.run()
	f.evTurnStatus(tid, store.TurnError)
	errMsg := msgWith(`error "boom"`)
	if errMsg == "" {
		t.Fatalf("the error did not come at once: %q", f.evTexts(w))
	}
	held(2) // its turn_end (error) is held
	qtid := f.prompt(a, script(map[string]any{"question": map[string]any{"text": "Proceed?", "options": []string{"yes", "no"}}}))
	done := f.goRun()
	f.evRunWhile(func() bool { return msgWith("question_asked") != "" }, "the question_asked message")
	qMsg := msgWith("question_asked")
	qid := regexp.MustCompile(`q_[0-9a-f]+`).FindString(qMsg)
	if _, err := f.r.AnswerQuestion(f.ctx, a, qid, []string{"yes"}, ""); err != nil {
		t.Fatalf("answer question %s: %v", qid, err)
	}
	<-done
	f.run()
	f.evTurnStatus(qtid, store.TurnDone)
	if s := held(3); s["nextDeliveryAt"] != "2026-06-10T21:06:00.000Z" {
		t.Errorf("nextDeliveryAt = %v, want the window's end 2026-06-10T21:06:00.000Z", s["nextDeliveryAt"])
	}
	// Only the two urgent messages, until the window ends.
	f.advance(winEnd.Sub(f.clk.Now()) - time.Second)
	if msgs := f.evTexts(w); len(msgs) != 2 {
		t.Fatalf("inside the window %d event messages arrived, want 2 (error, question):\n%s", len(msgs), strings.Join(msgs, "\n---\n"))
	}
	f.advance(time.Second)
	msgs := f.evTexts(w)
	if len(msgs) != 3 {
		t.Fatalf("%d event messages when the window ended, want 3:\n%s", len(msgs), strings.Join(msgs, "\n---\n"))
	}
	names := map[string]string{a[:8]: "ALPHA", b[:8]: "BETA", qid: "q_QID"}
	evGolden(t, "ev_quiet_hours", evNormalize(strings.Join([]string{errMsg, qMsg, msgs[2]}, "\n---\n")+"\n", names))
	after := f.evSubList(w)[sid]
	if after["heldCount"] != float64(0) || after["nextDeliveryAt"] != nil {
		t.Errorf("after the release heldCount = %v, nextDeliveryAt = %v; want 0 and null", after["heldCount"], after["nextDeliveryAt"])
	}
}

// R8.22 unsubscribe by id and "all"; R8.23 list_subscriptions with ended
// ones; R8.19 archiving the watched session; R8.24 transfer_subscriptions
// always asks a card; §12 the owner's session view (watching, watched) and
// the owner's Unsubscribe.
func TestRulesEvSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	v := f.session(NewSession{Title: "heir"})
	a := f.session(NewSession{Title: "alpha"})
	b := f.session(NewSession{Title: "beta"})
	c := f.session(NewSession{Title: "gamma"})
	s1 := f.evSub(w, map[string]any{"sessions": []string{a}}, true)["id"].(string)
	s2 := f.evSubDirect(w, map[string]any{"sessions": []string{b}})["id"].(string)
	s3 := f.evSubDirect(w, map[string]any{"sessions": []string{a, c}, "events": []string{"turn_end"}})["id"].(string)
	type watch struct {
		Watching int
		Watched  any
	}
	watchOf := func(sid string) watch {
		t.Helper()
		d, err := f.r.OwnerSession(f.ctx, sid, 50)
		if err != nil {
			t.Fatalf("owner session %s: %v", sid, err)
		}
		var got watch
		got.Watching = len(d.Watching)
		if d.Watched != nil {
			got.Watched = *d.Watched
		}
		return got
	}
	codeOf := func(err error) string {
		var e *Error
		if errors.As(err, &e) {
			return e.Code
		}
		return fmt.Sprint(err)
	}

	list := f.evSubList(w)
	if len(list) != 3 {
		t.Fatalf("list_subscriptions: %d, want 3: %v", len(list), list)
	}
	for _, k := range []string{"id", "scope", "sessions", "events", "once", "match", "stalledMinutes", "heartbeatMinutes", "digestMinutes",
		"quietHours", "exclude", "heldCount", "nextDeliveryAt"} {
		if _, ok := list[s3][k]; !ok {
			t.Errorf("list_subscriptions entry lacks %q: %v", k, list[s3])
		}
	}
	if ss, _ := list[s3]["sessions"].([]any); len(ss) != 2 || ss[0].(map[string]any)["title"] != "alpha" || ss[1].(map[string]any)["id"] != c {
		t.Errorf("sessions = %v", list[s3]["sessions"])
	}
	// The owner's view.
	if diff := cmp.Diff(watch{Watching: 3, Watched: false}, watchOf(w)); diff != "" {
		t.Errorf("the watcher (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(watch{Watching: 0, Watched: true}, watchOf(a)); diff != "" {
		t.Errorf("alpha (-want +got):\n%s", diff)
	}

	// Unsubscribe by id; an unknown id; one no longer active.
	env := f.call(w, map[string]any{"action": "unsubscribe", "subscription_id": s1})
	if diff := cmp.Diff([]any{s1}, env["unsubscribed"]); diff != "" {
		t.Errorf("unsubscribe (-want +got):\n%s\n%v", diff, env)
	}
	for _, id := range []string{"sub_0000000000", s1} {
		if diff := cmp.Diff(outcome{Code: CodeNotFound, Has: true}, outcomeOf(f.call(w, map[string]any{"action": "unsubscribe", "subscription_id": id}), "")); diff != "" {
			t.Errorf("unsubscribe %s (-want +got):\n%s", id, diff)
		}
	}
	// Archiving the only watched session of s2 ends it.
	if _, err := f.r.OwnerArchive(f.ctx, b); err != nil {
		t.Fatalf("archive beta: %v", err)
	}
	// The owner's Unsubscribe.
	if del, err := f.r.Unsubscribe(f.ctx, s3); err != nil || del.EndReason != "unsubscribed" {
		t.Errorf("the owner's unsubscribe of %s: %+v %v", s3, del, err)
	}
	if _, err := f.r.Unsubscribe(f.ctx, "sub_0000000000"); codeOf(err) != CodeNotFound {
		t.Errorf("the owner's unsubscribe of an unknown subscription: %v, want %s", err, CodeNotFound)
	}
	list = f.evSubList(w)
	got := map[string]any{}
	for _, id := range []string{s1, s2, s3} {
		got[id] = list[id]["endReason"]
	}
	if diff := cmp.Diff(map[string]any{s1: "unsubscribed", s2: "archived", s3: "unsubscribed"}, got); diff != "" {
		t.Errorf("end reasons (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(watch{Watching: 0, Watched: false}, watchOf(a)); diff != "" {
		t.Errorf("alpha after its subscriptions ended (-want +got):\n%s", diff)
	}
	// unsubscribe "all".
	s4 := f.evSubDirect(w, map[string]any{"sessions": []string{a}})["id"].(string)
	s5 := f.evSubDirect(w, map[string]any{"sessions": []string{"all"}})["id"].(string)
	env = f.call(w, map[string]any{"action": "unsubscribe", "subscription_id": "all"})
	var ended []string
	for _, x := range env["unsubscribed"].([]any) {
		ended = append(ended, x.(string))
	}
	sort.Strings(ended)
	want := []string{s4, s5}
	sort.Strings(want)
	if diff := cmp.Diff(want, ended); diff != "" {
		t.Errorf("unsubscribe \"all\" (-want +got):\n%s", diff)
	}
	for _, s := range f.evSubList(w) {
		if s["endReason"] == nil {
			t.Errorf("an active subscription after unsubscribe all: %v", s)
		}
	}

	// Transfer: always a card; the old one ends "transferred".
	s6 := f.evSubDirect(w, map[string]any{"sessions": []string{c}, "events": []string{"turn_end"}})["id"].(string)
	tenv, card := f.evInTurn(v, map[string]any{"action": "transfer_subscriptions", "from": w}, "allow")
	if tenv["ok"] != true {
		t.Fatalf("transfer: %v", tenv)
	}
	moved, _ := tenv["subscriptions"].([]any)
	if len(moved) != 1 || !strings.Contains(strings.Join(card.Lines, "\n"), "Move 1 subscription") {
		t.Fatalf("transfer: %v; card %v", tenv, card.Lines)
	}
	nid := moved[0].(map[string]any)["id"].(string)
	if nid == s6 {
		t.Errorf("the moved subscription kept its id")
	}
	if ls := f.evSubList(w); ls[s6]["endReason"] != "transferred" {
		t.Errorf("old subscription after transfer: %v", ls[s6])
	}
	vl := f.evSubList(v)
	if vl[nid] == nil || vl[nid]["endReason"] != nil || fmt.Sprint(vl[nid]["events"]) != "[turn_end]" {
		t.Errorf("heir's subscriptions: %v", vl)
	}
	// list_subscriptions of another conversation.
	other := f.call(v, map[string]any{"action": "list_subscriptions", "watcher": w})
	if n := len(other["subscriptions"].([]any)); n != 6 {
		t.Errorf("list_subscriptions watcher=%s: %d entries, want 6 ended ones", w[:8], n)
	}
	// The event now reaches the heir, not the old watcher.
	f.evDone(c, "after transfer")
	if n := evCount(f.evLines(v), `"echo: after transfer"`); n != 1 {
		t.Errorf("the heir got %d lines of the event, want 1", n)
	}
	if n := evCount(f.evLines(w), "after transfer"); n != 0 {
		t.Errorf("the old watcher still got the event after the transfer")
	}
	// A second transfer asks a card again (R5.2.5: always).
	tenv, _ = f.evInTurn(v, map[string]any{"action": "transfer_subscriptions", "from": w}, "allow")
	if moved, _ := tenv["subscriptions"].([]any); tenv["ok"] != true || len(moved) != 0 {
		t.Errorf("second transfer: %v", tenv)
	}
}

// evSessionTotal is list_sessions' total of a scope, as caller.
func (f *fixture) evSessionTotal(caller, scope string) any {
	f.t.Helper()
	env := f.call(caller, map[string]any{"action": "list_sessions", "relay": "this", "scope": scope, "limit": 200})
	if env["ok"] != true {
		f.t.Fatalf("list_sessions: %v", env)
	}
	return env["total"]
}

// R7.9 (issue 13): a group dissolved while create_session's card waits —
// between the look-up and the start — creates nothing:
// REMOTE_RELAY_UNKNOWN_GROUP, "No session was created."
func TestRulesEvGroupDissolvedBeforeStart(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{})
	g, err := f.r.CreateGroup(f.ctx, "Release 2.4")
	if err != nil {
		t.Fatal(err)
	}
	f.session(NewSession{Title: "member", Group: g.ID})
	a := f.session(NewSession{Title: "lead"})
	total := f.evSessionTotal(a, "all")

	res, _ := f.evInTurnAtCard(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "group": "Release 2.4", "wait_seconds": 0},
		"allow", func(card *store.Card) {
			if l := strings.Join(card.Lines, "\n"); !strings.Contains(l, "Group: Release 2.4 ("+g.ID+")") {
				t.Errorf("card lines lack the group:\n%s", l)
			}
			if _, err := f.r.DissolveGroup(f.ctx, g.ID); err != nil {
				t.Fatalf("dissolve: %v", err)
			}
		})
	if diff := cmp.Diff(outcome{Code: CodeUnknownGroup, Has: true}, outcomeOf(res, "was dissolved before the session could start")); diff != "" {
		t.Errorf("create_session into a dissolved group (-want +got):\n%s\n%v", diff, res)
	}
	if diff := cmp.Diff(outcome{Code: CodeUnknownGroup, Has: true}, outcomeOf(res, "No session was created.")); diff != "" {
		t.Errorf("create_session into a dissolved group (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(total, f.evSessionTotal(a, "all")); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
}

// R7.9 (issue 13): when the relay cannot put a new session into its group,
// create_session still answers with the session, group null, groupWarning
// and a note to tell the owner. The failure is made by a group member key of
// the wrong type, written while the card waits. (relaytest's version waited
// for the reply, status done; here the call does not wait — a wait takes
// real time — and the new session's turn is checked to end done.)
func TestRulesEvGroupWarning(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{})
	g, err := f.r.CreateGroup(f.ctx, "Release 2.4")
	if err != nil {
		t.Fatal(err)
	}
	a := f.session(NewSession{Title: "lead"})
	res, _ := f.evInTurnAtCard(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "group": g.ID, "wait_seconds": 0},
		"allow", func(*store.Card) {
			// The look-up is done; now joining the group fails.
			if err := f.st.Redis().Set(f.ctx, store.KeyBase(f.st.Prefix())+"gm:"+g.ID, "not a set", 0).Err(); err != nil {
				t.Fatal(err)
			}
		})
	type created struct {
		OK                          bool
		Group, GroupWarning, Status any
		Note, Summary               bool
	}
	note, _ := res["note"].(string)
	sum, _ := res["summary"].(string)
	got := created{OK: res["ok"] == true, Group: res["group"], GroupWarning: res["groupWarning"], Status: res["status"],
		Note:    strings.Contains(note, "did not land in a group; tell the owner"),
		Summary: strings.Contains(sum, "(no group: the relay could not put the session into its group)")}
	want := created{OK: true, GroupWarning: "the relay could not put the session into its group", Status: "queued", Note: true, Summary: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create_session (-want +got):\n%s\n%v", diff, res)
	}
	sid, _ := res["session"].(string)
	mid, _ := res["message_id"].(string)
	f.run()
	f.evTurnStatus(mid, store.TurnDone)
	if d, err := f.r.OwnerSession(f.ctx, sid, 1); err != nil || d.Group != nil {
		t.Errorf("the new session shows a group: %+v %v", d, err)
	}
}

// R7.5 (issue 13): the members of a session's group in read_session carry
// state with the R7.4 values: running_turn for a running turn and for one
// only queued, background_only while only a background task runs, else idle.
func TestRulesEvGroupMemberStates(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{})
	if _, err := f.r.CreateGroup(f.ctx, "Crew"); err != nil {
		t.Fatal(err)
	}
	head := f.session(NewSession{Title: "crew head", Group: "Crew"})
	busy := f.session(NewSession{Title: "crew busy", Group: "Crew"})
	queued := f.session(NewSession{Title: "crew queued", Group: "Crew"})
	bg := f.session(NewSession{Title: "crew bg", Group: "Crew"})
	idle := f.session(NewSession{Title: "crew idle", Group: "Crew"})
	reader := f.session(NewSession{Title: "reader"})

	// bg: its turn ended, a background task still runs.
	f.evDone(bg, script(map[string]any{"task": map[string]any{"description": "slow build", "lines": []string{"never yet"},
		"line_ms": 60000, "exit": 0, "background": true}}, map[string]any{"reply": "started"}))
	// busy: a turn running (it waits for its question's answer); queued: a
	// prompt whose drain is not taken while busy's runs.
	btid := f.prompt(busy, script(map[string]any{"question": map[string]any{"text": "Go on?", "options": []string{"yes", "no"}}}))
	done := f.goRun()
	defer func() {
		if _, err := f.r.OwnerStop(f.ctx, busy); err != nil {
			t.Errorf("stop busy: %v", err)
		}
		<-done
	}()
	var status store.TurnStatus
	// Every 5 ms: the turn starts in its goroutine; no clock moves.
	if !testwait.Poll(20*time.Second, 5*time.Millisecond, func() bool {
		tr, err := f.r.Turn(f.ctx, btid)
		if err != nil {
			t.Fatal(err)
		}
		status = tr.Status
		return status == store.TurnRunning
	}) {
		t.Fatalf("busy's turn is %s, not running", status)
	}
	f.prompt(queued, "waits")

	env := f.call(reader, map[string]any{"action": "read_session", "relay": "this", "session": head, "last": 1})
	g, _ := env["group"].(map[string]any)
	members, _ := g["members"].([]any)
	got := map[string]any{}
	for _, x := range members {
		mv := x.(map[string]any)
		got[mv["id"].(string)] = mv["state"]
	}
	want := map[string]any{busy: "running_turn", queued: "running_turn", bg: "background_only", idle: "idle"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("member states (-want +got):\n%s\n%v", diff, env)
	}
	// The same values as list_sessions (R7.4).
	env = f.call(reader, map[string]any{"action": "list_sessions", "relay": "this"})
	ls := map[string]any{}
	list, _ := env["sessions"].([]any)
	for _, x := range list {
		s := x.(map[string]any)
		if id := s["id"].(string); want[id] != nil {
			ls[id] = s["state"]
		}
	}
	if diff := cmp.Diff(got, ls); diff != "" {
		t.Errorf("list_sessions states (-read_session +list_sessions):\n%s", diff)
	}
}

// R8.1, R8.14a: a turn with no output for stalled_minutes (2) gives one
// stalled line, before its turn_end. (relaytest's turn slept; here it waits
// for its question's answer, with no output, while the clock moves.)
func TestRulesEvStalledTurn(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	a := f.session(NewSession{Title: "alpha"})
	sub := f.evSub(w, map[string]any{"sessions": []string{a}, "stalled_minutes": 2}, true)
	if sub["stalledMinutes"] != float64(2) {
		t.Errorf("stalledMinutes = %v", sub["stalledMinutes"])
	}
	tid := f.prompt(a, script(map[string]any{"question": map[string]any{"text": "Go on?", "options": []string{"yes", "no"}}},
		map[string]any{"reply": "woke up"}))
	done := f.goRun()
	var qid string
	f.evRunWhile(func() bool {
		qid = regexp.MustCompile(`q_[0-9a-f]+`).FindString(strings.Join(f.evLines(w), "\n"))
		return qid != ""
	}, "the question_asked line")
	f.evAdvanceScanning(2*time.Minute - 30*time.Second)
	if n := evCount(f.evLines(w), "stalled:"); n != 0 {
		t.Errorf("%d stalled lines after 90 s, want 0", n)
	}
	f.evAdvanceScanning(90 * time.Second)
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(evLine("alpha", a, "stalled: no output for ")) + `(\d+) min$`)
	var n int
	for _, l := range f.evLines(w) {
		if m := re.FindStringSubmatch(l); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
	}
	if n < 2 || n > 4 {
		t.Errorf("stalled line(s) %q: want `stalled: no output for N min` with N about 2", f.evLines(w))
	}
	if _, err := f.r.AnswerQuestion(f.ctx, a, qid, []string{"yes"}, ""); err != nil {
		t.Fatalf("answer question %s: %v", qid, err)
	}
	<-done
	f.run()
	f.evTurnStatus(tid, store.TurnDone)
	lines := f.evLines(w)
	if c := evCount(lines, "stalled:"); c != 1 {
		t.Errorf("%d stalled lines for one quiet stretch, want 1:\n%s", c, strings.Join(lines, "\n"))
	}
	si, ti := -1, -1
	for i, l := range lines {
		if strings.Contains(l, "stalled:") {
			si = i
		}
		if strings.Contains(l, `turn_end (done) "yeswoke up"`) { // the answer, then the reply
			ti = i
		}
	}
	if ti < 0 || si > ti {
		t.Errorf("the stalled line came after the turn ended (or the turn_end did not come):\n%s", strings.Join(lines, "\n"))
	}
}

// R8.1/R8.2/R8.14a: a failing background task wakes a default subscription
// with task_failed; a task that ended well does not, unless task_finished
// (and task_started) are named; subagent_finished. (The metrics of these
// events stay in relaytest: they are scraped over HTTP.)
func TestRulesEvTaskEvents(t *testing.T) {
	t.Parallel()
	f := newEvFixture(t, evOptions{timing: evNoCoalesce})
	w := f.session(NewSession{Title: "watcher"})
	w2 := f.session(NewSession{Title: "task-watcher"})
	a := f.session(NewSession{Title: "alpha"})
	f.evSub(w, map[string]any{"sessions": []string{a}}, true)
	f.evSub(w2, map[string]any{"sessions": []string{a}, "events": []string{"task_finished", "task_started"}}, true)
	taskRe := regexp.MustCompile(`task_(?:started|finished|failed) ([0-9a-f]{8}) `)
	waitCount := func(sid, frag string, n int) []string {
		t.Helper()
		var lines []string
		f.evRunWhile(func() bool { lines = f.evLines(sid); return evCount(lines, frag) >= n }, fmt.Sprintf("%d lines with %q", n, frag))
		return lines
	}

	// A background task that fails (the task runs on after its turn, in real time).
	f.evDone(a, script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 failed"}, "line_ms": 100, "exit": 1, "background": true}}))
	var line string
	for _, l := range waitCount(w, "task_failed", 1) {
		if strings.Contains(l, "task_failed") {
			line = l
		}
	}
	if m := taskRe.FindStringSubmatch(line); m == nil || line != evLine("alpha", a, `task_failed `+m[1]+` "npm test" (exit 1)`) {
		t.Errorf("task_failed line %q, want %q", line, evLine("alpha", a, `task_failed ID8 "npm test" (exit 1)`))
	}
	// A foreground task that ends well: its turn_end comes after it.
	f.evDone(a, script(map[string]any{"task": map[string]any{"description": "go build", "lines": []string{"ok"}, "exit": 0}}, map[string]any{"reply": "built"}))
	if n := evCount(f.evLines(w), `turn_end (done) "built"`); n != 1 {
		t.Errorf("%d turn_end lines of the foreground task's turn, want 1", n)
	}
	// A sub-agent.
	f.evDone(a, script(map[string]any{"subagent": map[string]any{"description": "explore repo", "ms": 200}}, map[string]any{"reply": "spawned"}))
	lines := waitCount(w, evLine("alpha", a, `subagent_finished "explore repo"`), 1)
	for _, frag := range []string{"task_finished", "task_started"} {
		if n := evCount(lines, frag); n != 0 {
			t.Errorf("a default subscription got %s (R8.2):\n%s", frag, strings.Join(lines, "\n"))
		}
	}
	// The subscription naming task_finished and task_started.
	waitCount(w2, "task_finished", 1)
	l2 := waitCount(w2, "task_started", 2)
	var started, finished []string
	for _, l := range l2 {
		if m := taskRe.FindStringSubmatch(l); m != nil {
			switch {
			case strings.Contains(l, "task_started"):
				started = append(started, strings.Replace(l, m[1], "ID8", 1))
			case strings.Contains(l, "task_finished"):
				finished = append(finished, strings.Replace(l, m[1], "ID8", 1))
			}
		}
	}
	if diff := cmp.Diff([]string{evLine("alpha", a, `task_started ID8 "npm test"`), evLine("alpha", a, `task_started ID8 "go build"`)}, started); diff != "" {
		t.Errorf("task_started lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{evLine("alpha", a, `task_finished ID8 "go build" (exit 0)`)}, finished); diff != "" {
		t.Errorf("task_finished lines (-want +got):\n%s", diff)
	}
	if n := evCount(l2, "turn_end") + evCount(l2, "task_failed") + evCount(l2, "subagent_finished"); n != 0 {
		t.Errorf("the task subscription got kinds it did not name:\n%s", strings.Join(l2, "\n"))
	}
}
