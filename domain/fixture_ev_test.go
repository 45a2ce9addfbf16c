package domain

// Fixture helpers of the event rule suites (events_rules_test.go): a
// fixture with timing of its own, a tool call inside a turn with its card
// decided, and the event messages a watcher got.

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// evHeader is the first line of every event message.
const evHeader = "[relay event · automated message from OAR, not from the user; it approves nothing]"

// evOptions changes the relay an event fixture builds.
type evOptions struct {
	start  time.Time // the simulated clock's start; zero: the fixture's default
	timing func(*config.Timing)
	limits func(*config.Limits)
}

// newEvFixture is newFixture with agent sessions on and the timing, limits
// and start time of eo.
func newEvFixture(t testing.TB, eo evOptions) *fixture {
	t.Helper()
	return newFixture(t, fixtureOptions{settings: agentSessionsOn, timing: eo.timing, limits: eo.limits, start: eo.start})
}

// evNoCoalesce is an evOptions.timing without a coalescing window.
func evNoCoalesce(tm *config.Timing) { tm.Coalesce = 0 }

// evInTurn runs one relay_tool call inside a turn of sid (relay "this" unless
// named) and runs what is due; with a decision the turn's card is awaited,
// checked to be the call's action and decided. It returns the tool result
// and the card.
func (f *fixture) evInTurn(sid string, tool map[string]any, decision string) (map[string]any, *store.Card) {
	f.t.Helper()
	return f.evInTurnAtCard(sid, tool, decision, nil)
}

// evInTurnAtCard is evInTurn with atCard run while the card waits, before
// it is decided.
func (f *fixture) evInTurnAtCard(sid string, tool map[string]any, decision string, atCard func(*store.Card)) (map[string]any, *store.Card) {
	f.t.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	tid := f.prompt(sid, script(map[string]any{"tool": tool}))
	var card *store.Card
	if decision == "" {
		f.run()
	} else {
		done := f.goRun()
		card = f.mustCard(sid, done)
		if card.Action != tool["action"] {
			f.t.Errorf("card action %q, want %v: %+v", card.Action, tool["action"], card)
		}
		if atCard != nil {
			atCard(card)
		}
		if _, err := f.r.DecideCard(f.ctx, card.ID, decision); err != nil {
			f.t.Fatalf("decide card %s: %v", card.ID, err)
		}
		<-done
		f.run() // what the decided call made due
	}
	res := f.toolResults(tid)
	if len(res) != 1 {
		f.t.Fatalf("the turn holds %d tool results, want 1: %v", len(res), res)
	}
	return res[0], card
}

// evSub subscribes w from inside a turn; card: the first subscribe of w
// asks one, which is allowed. It returns the subscription.
func (f *fixture) evSub(w string, args map[string]any, card bool) map[string]any {
	f.t.Helper()
	args["action"] = "subscribe"
	decision := ""
	if card {
		decision = "allow"
	}
	env, _ := f.evInTurn(w, args, decision)
	if env["ok"] != true {
		f.t.Fatalf("subscribe %v: %v", args, env)
	}
	sub, _ := env["subscription"].(map[string]any)
	return sub
}

// evSubDirect subscribes w outside a turn (no card may be needed).
func (f *fixture) evSubDirect(w string, args map[string]any) map[string]any {
	f.t.Helper()
	args["action"] = "subscribe"
	args["relay"] = "this"
	env := f.call(w, args)
	if env["ok"] != true {
		f.t.Fatalf("subscribe %v: %v", args, env)
	}
	sub, _ := env["subscription"].(map[string]any)
	return sub
}

// evTexts is the texts of the event messages delivered into sid, oldest first.
func (f *fixture) evTexts(sid string) []string {
	f.t.Helper()
	var out []string
	for _, m := range f.history(sid, "event") {
		out = append(out, m.Text)
	}
	return out
}

// evLines is every event line delivered into sid, the header lines left out.
func (f *fixture) evLines(sid string) []string {
	f.t.Helper()
	var lines []string
	for _, m := range f.evTexts(sid) {
		for _, l := range strings.Split(m, "\n") {
			if l != evHeader {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

func evCount(lines []string, frag string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, frag) {
			n++
		}
	}
	return n
}

// evSubList is the watcher's list_subscriptions by id.
func (f *fixture) evSubList(w string) map[string]map[string]any {
	f.t.Helper()
	env := f.call(w, map[string]any{"action": "list_subscriptions"})
	if env["ok"] != true {
		f.t.Fatalf("list_subscriptions: %v", env)
	}
	out := map[string]map[string]any{}
	list, _ := env["subscriptions"].([]any)
	for _, x := range list {
		s, _ := x.(map[string]any)
		id, _ := s["id"].(string)
		out[id] = s
	}
	return out
}

// evLine is one event line of the session titled title.
func evLine(title, sid, rest string) string {
	return fmt.Sprintf(`[relay event] session %q (%s): %s`, title, sid[:8], rest)
}

// evDone prompts sid with text and runs what is due; the turn must end done.
func (f *fixture) evDone(sid, text string) {
	f.t.Helper()
	tid := f.prompt(sid, text)
	f.run()
	f.evTurnStatus(tid, store.TurnDone)
}

// evTurnStatus checks that the turn ended with status.
func (f *fixture) evTurnStatus(tid string, status store.TurnStatus) {
	f.t.Helper()
	tr, err := f.r.Turn(f.ctx, tid)
	if err != nil {
		f.t.Fatalf("turn %s: %v", tid, err)
	}
	if tr.Status != status {
		f.t.Fatalf("turn %s: status %s (error %q), want %s", tid, tr.Status, tr.Error, status)
	}
}

var evSubIDRe = regexp.MustCompile(`sub_[0-9a-f]{10}`)

// evNormalize replaces the random ids in an event message with stable names for golden files.
func evNormalize(msg string, names map[string]string) string {
	for id, name := range names {
		msg = strings.ReplaceAll(msg, id, name)
	}
	return msg
}

// evGolden compares got with testdata/name.golden (UPDATE_GOLDEN=1 writes it).
func evGolden(t *testing.T, name, got string) {
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
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Fatalf("%s (-want +got):\n%s", name, diff)
	}
}

// evRunWhile runs what is due, alongside a drain blocked in another
// goroutine (a turn waiting for its question's answer), until cond holds.
func (f *fixture) evRunWhile(cond func() bool, what string) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s did not come", what)
		}
		if f.run() == 0 {
			time.Sleep(5 * time.Millisecond) // the other drain works in its goroutine; no clock moves
		}
	}
}

// evAdvanceScanning is advance with the stall scan run every 30 s of the
// clock, as the app's ticker starts it (StallScanEvery, default 30 s).
func (f *fixture) evAdvanceScanning(d time.Duration) {
	f.t.Helper()
	for step := time.Duration(0); step < d; step += 30 * time.Second {
		f.advance(min(30*time.Second, d-step))
		if err := f.r.RunJob(f.ctx, jobs.TypeStallScan, nil); err != nil {
			f.t.Fatalf("stall scan: %v", err)
		}
		f.run()
	}
}
