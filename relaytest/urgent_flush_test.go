package relaytest

import (
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// R8.12 (issue 13, untested before): an urgent event (an error) flushes the
// watcher's open coalescing window at once — it comes in one message with
// the events the window gathered, not after the window.
func TestUrgentEventFlushesCoalescingWindow(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) { c.Timing.Coalesce = time.Minute }})
	w := r.NewSession(map[string]any{"title": "watcher"})
	a := r.NewSession(map[string]any{"title": "alpha"})
	b := r.NewSession(map[string]any{"title": "beta"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID, b.ID}, "events": []string{"turn_end", "error"}}, true)

	ev2Done(t, r, a.ID, "gathered")
	time.Sleep(time.Second) // the turn_end waits in the open window (one minute)
	if n := len(r.EventTexts(w.ID)); n != 0 {
		t.Fatalf("%d event messages before the window closed, want 0", n)
	}
	start := time.Now()
	r.WaitTurn(r.Message(b.ID, Script(map[string]any{"error": "boom"})), ev2Wait, "error")
	msg := ev2WaitMsg(t, r, w.ID, `error "boom"`)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the error came after %s: it waited for the window", d)
	}
	for _, line := range []string{ev2Line(a, `turn_end (done) "echo: gathered"`), ev2Line(b, `error "boom"`)} {
		if !strings.Contains(msg, line) {
			t.Errorf("the flushed message lacks %q:\n%s", line, msg)
		}
	}
	if n := len(r.EventTexts(w.ID)); n != 1 {
		t.Errorf("%d event messages, want the one flushed by the error", n)
	}
}
