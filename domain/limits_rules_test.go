package domain

import (
	"fmt"
	"testing"

	"github.com/oar/relay/config"
)

// TestRulesCountLimitsAreAtomic (R18.6), moved down from
// relaytest/hardening_test.go (issue 24 step 3): count limits hold under
// concurrent calls from two processes of the relay — here two Relays on
// one store, each with its own worker id and caches, as two processes are.
func TestRulesCountLimitsAreAtomic(t *testing.T) {
	lim := func(l *config.Limits) { l.AgentPromptsBeforeCard = 5 }
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: lim})
	actAuto(f)
	r2 := f.r3Process(fixtureOptions{settings: agentSessionsOn, limits: lim})
	procs := []*Relay{f.r, r2}
	s := f.session(NewSession{Title: "busy agent"})

	t.Run("schedules", func(t *testing.T) {
		codes := r3Parallel(t, f.ctx, procs, s, 60, func(i int) map[string]any {
			return map[string]any{"action": "schedule", "text": fmt.Sprint("tick ", i), "every_minutes": 60}
		})
		if codes["ok"] != 20 || codes["REMOTE_RELAY_SCHEDULE_LIMIT"] != 40 {
			t.Fatalf("60 parallel schedules: %v, want 20 ok and 40 SCHEDULE_LIMIT", codes)
		}
		if n := len(f.ok(s, map[string]any{"action": "list_schedules"})["schedules"].([]any)); n != 20 {
			t.Fatalf("%d schedules stored, want 20", n)
		}
	})
	t.Run("asks", func(t *testing.T) {
		codes := r3Parallel(t, f.ctx, procs, s, 60, func(i int) map[string]any {
			return map[string]any{"action": "ask", "question": fmt.Sprint("question ", i)}
		})
		if codes["ok"] != 20 || codes["REMOTE_RELAY_QUESTION_LIMIT"] != 40 {
			t.Fatalf("60 parallel asks: %v, want 20 ok and 40 QUESTION_LIMIT", codes)
		}
	})
	t.Run("subscriptions", func(t *testing.T) {
		w := f.session(NewSession{Title: "watcher"})
		target := f.session(NewSession{Title: "watched"})
		// The first subscribe needs a card (inside a turn); the rest race.
		res, _ := f.actInTurn(w, map[string]any{"action": "subscribe", "sessions": []string{target}}, "allow")
		if res["ok"] != true {
			t.Fatalf("first subscribe: %v", res)
		}
		codes := r3Parallel(t, f.ctx, procs, w, 40, func(i int) map[string]any {
			return map[string]any{"action": "subscribe", "relay": "this", "sessions": []string{target}, "match": fmt.Sprint("m", i)}
		})
		if codes["ok"] != 19 || codes["REMOTE_RELAY_LIMIT"] != 21 {
			t.Fatalf("40 parallel subscribes after one: %v, want 19 ok and 21 LIMIT", codes)
		}
	})
	t.Run("loop protection", func(t *testing.T) {
		target := f.session(NewSession{Title: "echo"})
		sender := f.session(NewSession{Title: "sender"})
		// Outside a turn a loop card cannot be asked: every prompt past the
		// count is NO_ACTIVE_TURN, and exactly 5 go through.
		codes := r3Parallel(t, f.ctx, procs, sender, 20, func(i int) map[string]any {
			return map[string]any{"action": "send", "relay": "this", "session": target, "text": fmt.Sprint("p", i), "wait_seconds": 1}
		})
		if codes["ok"] != 5 || codes["REMOTE_RELAY_NO_ACTIVE_TURN"] != 15 {
			t.Fatalf("20 parallel sends with 5 before a card: %v", codes)
		}
		// A refused prompt left nothing: 5 prompts reached the target.
		f.actUntil("prompts in the target", func() bool { return len(f.history(target, "agent")) == 5 })
		// Every call returned; once the target ran all it was given (idle: no
		// turn running or queued), a sixth prompt would be there.
		f.actUntil("the target to be idle", func() bool {
			d, err := f.r.OwnerSession(f.ctx, target, 0)
			if err != nil {
				t.Fatalf("session %s: %v", target, err)
			}
			return d.State == "idle"
		})
		if n := len(f.history(target, "agent")); n != 5 {
			t.Fatalf("%d prompts reached the target, want 5", n)
		}
	})
}
