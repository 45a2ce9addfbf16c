package relaytest

// End-to-end tests of events that need a real relay (SPEC §8, §16): held
// events across a restart of the process, and /metrics; the helpers the
// other end-to-end tests use for subscriptions. The event rules themselves
// are the domain's (domain/events_rules_test.go, delivery_rules_test.go).
// Async work is awaited with Eventually/WaitTurn; that something did NOT
// arrive is checked against a later marker event that must come after it.

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
)

const (
	ev2Header = "[relay event · automated message from OAR, not from the user; it approves nothing]"
	ev2Wait   = 20 * time.Second
)

// ---- helpers ---------------------------------------------------------------

// ev2Lines returns every event line (header lines left out) delivered into a session.
func ev2Lines(r *Relay, sid string) []string {
	r.tb.Helper()
	var lines []string
	for _, m := range r.EventTexts(sid) {
		for _, l := range strings.Split(m, "\n") {
			if l != ev2Header {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

func ev2Count(lines []string, frag string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, frag) {
			n++
		}
	}
	return n
}

// ev2WaitMsg waits for an event message containing frag and returns it.
func ev2WaitMsg(t *testing.T, r *Relay, sid, frag string) string {
	t.Helper()
	var got string
	Eventually(t, ev2Wait, func() bool {
		for _, m := range r.EventTexts(sid) {
			if strings.Contains(m, frag) {
				got = m
				return true
			}
		}
		return false
	}, "an event message in %s containing %q", sid[:8], frag)
	return got
}

// ev2WaitCount waits until n event lines contain frag.
func ev2WaitCount(t *testing.T, r *Relay, sid, frag string, n int) []string {
	t.Helper()
	var lines []string
	Eventually(t, ev2Wait, func() bool {
		lines = ev2Lines(r, sid)
		return ev2Count(lines, frag) >= n
	}, "%d event lines in %s containing %q", n, sid[:8], frag)
	return lines
}

// ev2InTurn runs one relay_tool call as w inside a turn of w; with a card the
// card is awaited, checked for its action and allowed. It returns the tool
// result and the card.
func ev2InTurn(t *testing.T, r *Relay, w Session, args map[string]any, card bool) (map[string]any, map[string]any) {
	t.Helper()
	decision := ""
	if card {
		decision = "allow"
	}
	env, c := r.InTurn(w, args, decision)
	if card && c["action"] != args["action"] {
		t.Fatalf("card action %v, want %v: %v", c["action"], args["action"], c)
	}
	return env, c
}

// ev2Sub subscribes w from inside a turn (card: the first subscribe of w asks one)
// and returns the subscription.
func ev2Sub(t *testing.T, r *Relay, w Session, args map[string]any, card bool) map[string]any {
	t.Helper()
	args["action"] = "subscribe"
	env, _ := ev2InTurn(t, r, w, args, card)
	if env["ok"] != true {
		t.Fatalf("subscribe %v: %v", args, env)
	}
	return env["subscription"].(map[string]any)
}

// ev2SubMCP subscribes through the MCP client outside a turn (no card may be needed).
func ev2SubMCP(t *testing.T, m *MCP, args map[string]any) map[string]any {
	t.Helper()
	args["action"] = "subscribe"
	args["relay"] = "this"
	return m.MustOK(args)["subscription"].(map[string]any)
}

// ev2SubList lists a conversation's subscriptions by id.
func ev2SubList(t *testing.T, m *MCP) map[string]map[string]any {
	t.Helper()
	env := m.MustOK(map[string]any{"action": "list_subscriptions"})
	out := map[string]map[string]any{}
	for _, x := range env["subscriptions"].([]any) {
		s := x.(map[string]any)
		out[s["id"].(string)] = s
	}
	return out
}

// ev2Held waits until a subscription holds n events and returns its list entry.
func ev2Held(t *testing.T, m *MCP, sub string, n int) map[string]any {
	t.Helper()
	var got map[string]any
	Eventually(t, ev2Wait, func() bool {
		got = ev2SubList(t, m)[sub]
		c, _ := got["heldCount"].(float64)
		return got != nil && int(c) == n
	}, "subscription %s to hold %d events", sub, n)
	return got
}

func ev2Done(t *testing.T, r *Relay, sid, text string) {
	t.Helper()
	tr := r.WaitTurn(r.Message(sid, text), ev2Wait, "done", "error", "stopped")
	if tr.Status != "done" {
		t.Fatalf("turn %q in %s ended %s: %s", text, sid[:8], tr.Status, tr.Error)
	}
}

func ev2Line(s Session, rest string) string {
	return fmt.Sprintf(`[relay event] session %q (%s): %s`, s.Title, s.ID[:8], rest)
}

// ---- R8.13 restart ----------------------------------------------------------

// R8.13: events held for a digest survive a restart of the relay and are
// delivered by the new process, exactly once.
func TestDigestHeldAcrossRestart(t *testing.T) {
	t.Parallel()
	clock := clock.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 60)
	cfg := func(c *config.Config) { c.Timing.Coalesce = 0 }
	r := Start(t, Options{Clock: clock, Config: cfg})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	b := r.NewSession(map[string]any{"title": "beta"})
	sub := ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID}, "events": []string{"turn_end"}, "digest_minutes": 6}, true)
	sid := sub["id"].(string)
	mw := r.Connect(w.Token, nil)
	ev2SubMCP(t, mw, map[string]any{"sessions": []string{b.ID}, "events": []string{"turn_end"}})
	ev2Done(t, r, a.ID, "one")
	ev2Done(t, r, a.ID, "two")
	held := ev2Held(t, mw, sid, 2)
	if n := len(r.EventTexts(w.ID)); n != 0 {
		t.Fatalf("%d event messages came before the digest was due", n)
	}
	due, err := time.Parse(time.RFC3339Nano, held["nextDeliveryAt"].(string))
	if err != nil {
		t.Fatalf("nextDeliveryAt %v: %v", held["nextDeliveryAt"], err)
	}
	r.Stop()
	if !clock.Now().Before(due) {
		t.Logf("note: the digest was due before the relay had stopped (slow machine); delivery after the restart is still checked")
	}

	r2 := Start(t, Options{Redis: r.Redis, Clock: clock, Config: cfg})
	m2 := r2.Connect(w.Token, nil)
	digest := ev2WaitMsg(t, r2, w.ID, "Digest of 2 events")
	want := strings.Join([]string{ev2Header,
		fmt.Sprintf("Digest of 2 events (subscription %s every 6 min; questions and errors come at once):", sid),
		ev2Line(a, `turn_end (done) "echo: one"`),
		ev2Line(a, `turn_end (done) "echo: two"`)}, "\n")
	if digest != want {
		t.Errorf("digest after the restart:\n%s\nwant\n%s", digest, want)
	}
	if s := ev2SubList(t, m2)[sid]; s["heldCount"] != float64(0) {
		t.Errorf("after the digest heldCount = %v", s["heldCount"])
	}
	// Marker: an undelayed event through the other subscription comes after any duplicate would have.
	ev2Done(t, r2, b.ID, "marker")
	lines := ev2WaitCount(t, r2, w.ID, `"echo: marker"`, 1)
	for _, frag := range []string{`"echo: one"`, `"echo: two"`, "Digest of"} {
		if n := ev2Count(lines, frag); n != 1 {
			t.Errorf("%d lines with %s after the restart, want exactly 1:\n%s", n, frag, strings.Join(lines, "\n"))
		}
	}
}

// ---- §16 metrics ---------------------------------------------------------------------

// §16: events are counted by kind and deliveries by kind on /metrics, with
// no session id (the task event rules are domain/events_rules_test.go's).
func TestTaskEventsMetrics(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = 0 }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID}}, true)
	// A background task that fails.
	ev2Done(t, r, a.ID, Script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 failed"}, "line_ms": 100, "exit": 1, "background": true}}))
	ev2WaitCount(t, r, w.ID, "task_failed", 1)

	// §16: /metrics counts events by kind and deliveries.
	resp, err := http.Get(r.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, re := range []string{`(?m)^relay_events_total\{kind="turn_end"\} [1-9][0-9]*$`, `(?m)^relay_events_total\{kind="task_failed"\} 1$`,
		`(?m)^relay_deliveries_total\{kind="message"\} [1-9][0-9]*$`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("/metrics has no line matching %s", re)
		}
	}
	for _, id := range []string{w.ID, a.ID} {
		if strings.Contains(text, id) {
			t.Errorf("/metrics carries a session id")
		}
	}
}
