package domain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// SPEC §18 hardening rules, moved down from relaytest/hardening_test.go
// (issue 24 step 3): the folder check, the size limits and the closed asks'
// expiry, and max_turn_seconds.

// TestRulesFolderSymlinkEscape (R18.3): folders are compared after
// resolving symbolic links, at creation and at every turn start.
func TestRulesFolderSymlinkEscape(t *testing.T) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	allowed := f.r.opts.Folders[0] // the fixture's one folder
	outside := t.TempDir()
	for _, d := range []string{filepath.Join(allowed, "work"), filepath.Join(allowed, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "esc")); err != nil {
		t.Fatal(err)
	}

	if _, err := f.r.OwnerCreateSession(f.ctx, NewSession{Cwd: filepath.Join(allowed, "esc")}); err == nil ||
		AsError(err).Code != "REMOTE_RELAY_INVALID_INPUT" || !strings.Contains(AsError(err).Msg, "resolves to "+outside) {
		t.Fatalf("owner create in a symlink out: %v", err)
	}
	orch := f.session(NewSession{Title: "orchestrator", Cwd: allowed})
	f.actFail(orch, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "cwd": filepath.Join(allowed, "esc")}, "REMOTE_RELAY_INVALID_INPUT")
	f.actFail(orch, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "cwd": allowed + "/sub/../sub"}, "REMOTE_RELAY_INVALID_INPUT")
	f.actFail(orch, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "cwd": "allowed/sub"}, "REMOTE_RELAY_INVALID_INPUT")

	// A folder that was fine at creation and is swapped for a symlink later:
	// the next turn ends as an error and nothing runs.
	work := filepath.Join(allowed, "work")
	s := f.session(NewSession{Title: "moved", Cwd: work})
	before := f.prompt(s, "before")
	f.run()
	if tr := f.r2Turn(before); tr.Status != store.TurnDone {
		t.Fatalf("first turn: %s %s", tr.Status, tr.Error)
	}
	if err := os.Remove(work); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, work); err != nil {
		t.Fatal(err)
	}
	after := f.prompt(s, "after")
	f.run()
	tr := f.r2Turn(after)
	if tr.Status != store.TurnError || !strings.Contains(tr.Error, "resolves to "+outside) || tr.Reply != "" {
		t.Fatalf("turn in a folder that now resolves outside: %s reply %q error %q", tr.Status, tr.Reply, tr.Error)
	}
}

// TestRulesSizeLimitsAndAskExpiry (R18.5): size limits, nothing stored
// above them; closed asks expire after 7 days.
func TestRulesSizeLimitsAndAskExpiry(t *testing.T) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	s := f.session(NewSession{Title: "asker"})
	other := f.session(NewSession{Title: "other"})
	long := func(n int) string { return strings.Repeat("é", n) } // characters, not bytes
	bad := []map[string]any{
		{"action": "ask", "question": long(4001)},
		{"action": "ask", "question": "q", "detail": long(16001)},
		{"action": "ask", "question": "q", "recommendation": long(1001)},
		{"action": "ask", "question": "q", "options": []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}},
		{"action": "ask", "question": "q", "options": []string{"fine", long(201)}},
		{"action": "schedule", "text": "x", "title": long(201), "every_minutes": 5},
		{"action": "schedule", "text": long(32001), "every_minutes": 5},
		{"action": "subscribe", "sessions": []string{other}, "match": long(501)},
	}
	for _, args := range bad {
		env := f.actFail(s, args, "REMOTE_RELAY_INVALID_INPUT")
		if !strings.Contains(fmt.Sprint(env["error"]), "at most") {
			t.Errorf("%v: error %q does not name the limit", args["action"], env["error"])
		}
	}
	if qs := f.ok(s, map[string]any{"action": "list_questions"})["questions"].([]any); len(qs) != 0 {
		t.Fatalf("refused asks were stored: %v", qs)
	}
	if ss := f.ok(s, map[string]any{"action": "list_schedules"})["schedules"].([]any); len(ss) != 0 {
		t.Fatalf("refused schedules were stored: %v", ss)
	}
	// At the limits exactly: accepted.
	f.ok(s, map[string]any{"action": "ask", "question": long(4000), "detail": long(16000), "recommendation": long(1000),
		"options": []string{long(200), "2", "3", "4", "5", "6", "7", "8", "9", "10"}})
	f.ok(s, map[string]any{"action": "schedule", "text": long(32000), "title": long(200), "every_minutes": 60})

	// A closed ask is deleted 7 days after it closed.
	id := f.ok(s, map[string]any{"action": "ask", "question": "keep?"})["question_id"].(string)
	if _, err := f.r.AnswerAsk(f.ctx, id, InboxAnswer{Answer: "no"}); err != nil {
		t.Fatalf("answer ask: %v", err)
	}
	rdb, base := f.st.Redis(), store.KeyBase(f.st.Prefix())
	ttl, err := rdb.PTTL(f.ctx, base+"ask:"+id).Result()
	if err != nil || ttl < 6*24*time.Hour || ttl > 7*24*time.Hour {
		t.Fatalf("closed ask TTL %v (%v), want 7 days", ttl, err)
	}
	open := f.ok(s, map[string]any{"action": "ask", "question": "open one"})["question_id"].(string)
	if ttl, _ := rdb.PTTL(f.ctx, base+"ask:"+open).Result(); ttl != -1 {
		t.Fatalf("an open ask has a TTL: %v", ttl)
	}
}

// TestRulesMaxTurnSecondsFromTurnStart (R18.13): max_turn_seconds counts
// from the turn's own start with the setting as it is now; a raised
// setting never ends (or restarts) a running turn. The limit is wall time:
// the test waits as long as the rule does.
func TestRulesMaxTurnSecondsFromTurnStart(t *testing.T) {
	met := newActMetrics()
	f := newFixture(t, fixtureOptions{metrics: met, work: true})
	actAuto(f)
	s := f.session(NewSession{Title: "long worker"})
	patch := func(secs int) {
		if _, err := f.r.PatchSettings(f.ctx, SettingsPatch{MaxTurnSeconds: &secs}); err != nil {
			t.Fatalf("patch max_turn_seconds %d: %v", secs, err)
		}
	}

	patch(2)
	id := f.prompt(s, script(map[string]any{"sleep_ms": 4000}, map[string]any{"reply": "finished"}))
	met.turnStarted(f, 1) // its agent runs
	at := f.work.Now()    // the turn's start: the clock of work has not moved
	patch(60)             // raised while it runs: it may finish
	f.due(at.Add(60 * time.Second))
	f.pass(4 * time.Second) // the agent's sleep ends, past the old limit
	tr := f.actTurn(id)
	if tr.Status != store.TurnDone || tr.Reply != "finished" {
		t.Fatalf("turn after the limit was raised: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}

	id = f.prompt(s, script(map[string]any{"sleep_ms": 60000}, map[string]any{"reply": "too late"}))
	met.turnStarted(f, 2)
	at = f.work.Now()
	f.due(at.Add(60 * time.Second)) // its limit, set at its start
	f.work.Advance(1500 * time.Millisecond)
	patch(1) // lowered while it runs: counted from the turn's start, it is over
	tr = f.actTurn(id)
	if tr.Status != store.TurnError || !strings.Contains(tr.Error, "max_turn_seconds (1 s)") {
		t.Fatalf("turn after the limit was lowered: %s %q", tr.Status, tr.Error)
	}
	if n := len(f.history(s, "user")); n != 2 {
		t.Fatalf("%d prompts in the session, want 2 (none run twice)", n)
	}
	// No queue timeout can cut a turn: the drain task outlives the longest setting.
	if jobs.DrainTimeout <= 86400*time.Second {
		t.Fatalf("drain task timeout %v is not above the longest max_turn_seconds", jobs.DrainTimeout)
	}
}

// TestRulesExecModelNeverAFlag: an exec provider whose command takes
// {model} as a whole argument refuses a model that would become an option
// (INVALID_INPUT, nothing queued).
func TestRulesExecModelNeverAFlag(t *testing.T) {
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		{ID: "open", Name: "Open", Type: config.TypeExec, Command: []string{"/bin/echo", "--model", "{model}", "{prompt}"}},
		{ID: "safe", Name: "Safe", Type: config.TypeExec, Command: []string{"/bin/echo", "--", "{model}", "{prompt}"}}}})
	if _, err := f.r.OwnerCreateSession(f.ctx, NewSession{Provider: "open", Model: "--dangerously-skip-permissions"}); err == nil ||
		AsError(err).Code != "REMOTE_RELAY_INVALID_INPUT" {
		t.Fatalf("owner create with a flag model: %v", err)
	}
	orch := f.session(NewSession{Title: "orchestrator"})
	target := f.session(NewSession{Provider: "open", Model: "m1", Title: "target"})
	f.actFail(orch, map[string]any{"action": "send", "relay": "this", "session": target, "text": "hi", "model": "-x"}, "REMOTE_RELAY_INVALID_INPUT")
	f.actFail(orch, map[string]any{"action": "update_session", "relay": "this", "session": target, "model": "--yolo"}, "REMOTE_RELAY_INVALID_INPUT")
	if n := len(f.history(target, "agent")); n != 0 {
		t.Fatalf("a refused send queued %d prompts", n)
	}
	// A prompt that starts with "-" ends the turn as an error; nothing runs.
	id := f.prompt(target, "--dangerously-skip-permissions")
	f.run()
	if tr := f.r2Turn(id); tr.Status != store.TurnError || !strings.Contains(tr.Error, "{prompt}") {
		t.Fatalf("flag prompt: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
	safe := f.session(NewSession{Provider: "safe", Model: "--fine-after-dashes", Title: "safe"})
	id = f.prompt(safe, "-also-fine")
	f.run()
	if tr := f.r2Turn(id); tr.Status != store.TurnDone || tr.Reply != "-- --fine-after-dashes -also-fine" {
		t.Fatalf("after --: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
}
