package domain

// The results of prompting actions and the limits of a turn and a card
// (R5.1, R7.11–R7.13, R18.13), moved down from relaytest: partial, wait,
// modelNote, a card no one answers, max_turn_seconds.

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/store"
)

// R7.11: a running result of send and wait carries partial: what the reply
// has so far, its last 2,000 characters; a queued result has none.
func TestRulesPromptRunningResultCarriesPartial(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, work: true})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "worker"})
	type running struct {
		Status  any
		Partial any
	}

	// send waits 2 s: the turn replies, then sleeps, and the wait's timer ends the call.
	var env map[string]any
	sent := f.meanwhile("send", func() {
		env = f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "wait_seconds": 2,
			"text": script(map[string]any{"reply": "half done"}, map[string]any{"sleep_ms": 600000})})
	})
	f.due(f.work.Now().Add(600 * time.Second)) // the agent sleeps after its reply: the partial is kept
	f.pass(2 * time.Second)
	sent()
	if diff := cmp.Diff(running{"running", "half done"}, running{env["status"], env["partial"]}); diff != "" {
		t.Errorf("send (-want +got):\n%s", diff)
	}
	mid, _ := env["message_id"].(string)
	// wait returns the same.
	env = f.ok(a, map[string]any{"action": "wait", "relay": "this", "session": b, "message_id": mid, "wait_seconds": 0})
	if diff := cmp.Diff(running{"running", "half done"}, running{env["status"], env["partial"]}); diff != "" {
		t.Errorf("wait (-want +got):\n%s", diff)
	}
	if _, err := f.r.OwnerStop(f.ctx, b); err != nil {
		t.Fatal(err)
	}
	f.actTurn(mid, store.TurnStopped)

	// The partial is cut to its last 2,000 characters.
	long := strings.Repeat("é", 2400) + "END"
	env = f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "wait_seconds": 0,
		"text": script(map[string]any{"reply": long}, map[string]any{"sleep_ms": 600000})})
	mid, _ = env["message_id"].(string)
	f.actUntil("the partial of "+mid, func() bool { return strings.HasSuffix(f.r2Turn(mid).Partial, "END") })
	env = f.ok(a, map[string]any{"action": "wait", "relay": "this", "session": b, "message_id": mid, "wait_seconds": 0})
	p, _ := env["partial"].(string)
	if diff := cmp.Diff([]any{"running", 2000, true}, []any{env["status"], utf8.RuneCountInString(p), strings.HasSuffix(p, "END")}); diff != "" {
		t.Errorf("a long partial: status, characters, ends END (-want +got):\n%s", diff)
	}
	// A queued result has no partial.
	c := f.session(NewSession{Title: "queued"})
	f.prompt(c, script(map[string]any{"sleep_ms": 600000}))
	env = f.ok(a, map[string]any{"action": "send", "relay": "this", "session": c, "wait_seconds": 0, "text": "later"})
	if _, ok := env["partial"]; ok || env["status"] != "queued" {
		t.Errorf("queued result: %v", env)
	}
	for _, s := range []string{b, c} {
		if _, err := f.r.OwnerArchive(f.ctx, s); err != nil {
			t.Errorf("archive %s: %v", s, err)
		}
	}
}

// R7.12: wait — by a prefix of the message id, the default and the capped
// wait, and its errors.
func TestRulesPromptWait(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{maxWaitCap: 20 * time.Second})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})
	c := f.session(NewSession{Title: "other"})
	wait := func(extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "wait", "relay": "this"}, extra)
	}

	env := f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b,
		"text": script(map[string]any{"sleep_ms": 300}, map[string]any{"reply": "slow"}), "wait_seconds": 0})
	mid, _ := env["message_id"].(string)
	if s := env["status"]; s != "queued" && s != "running" {
		t.Errorf("status with wait_seconds 0: %v", s)
	}
	env = f.ok(a, wait(map[string]any{"session": b, "message_id": mid[:8], "wait_seconds": 15}))
	want := map[string]any{"ok": true, "relay": "desk", "status": "done", "message_id": mid, "session": b, "openUrl": nil,
		"reply": map[string]any{"text": "slow", "model": "scripted-1"}, "summary": "wait → desk session " + b[:8] + ": done, reply 4 chars"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("wait (-want +got):\n%s", diff)
	}
	// Default wait and capped wait.
	if env = f.ok(a, wait(map[string]any{"session": b, "message_id": mid})); env["status"] != "done" {
		t.Errorf("default wait: %v", env)
	}
	env = f.ok(a, wait(map[string]any{"session": b, "message_id": mid, "wait_seconds": 99999}))
	actHas(t, "note", env["note"], "capped at 20")

	// A message of another session is not found on this one.
	cmid := f.prompt(c, "owner words")
	amid := f.prompt(a, "self")
	for _, tt := range []struct {
		args map[string]any
		code string
		has  []string
	}{
		{wait(map[string]any{"session": b, "message_id": cmid}), CodeNotFound, []string{"Nothing was done."}},
		{wait(map[string]any{"session": c, "message_id": mid}), CodeNotFound, nil},
		{wait(map[string]any{"session": b, "message_id": "0000000000000000"}), CodeNotFound, nil},
		{wait(map[string]any{"session": actNoSuchSession, "message_id": mid}), CodeNotFound, nil},
		{wait(map[string]any{"session": b}), CodeInvalidInput, []string{"message_id"}},
		{wait(map[string]any{"message_id": mid}), CodeInvalidInput, nil},
		{wait(map[string]any{"session": b, "message_id": mid, "wait_seconds": "x"}), CodeInvalidInput, nil},
		// Not on itself.
		{wait(map[string]any{"session": a, "message_id": amid}), CodeSelf, []string{"Nothing was done."}},
	} {
		actWant(t, fmt.Sprint(tt.args), f.call(a, tt.args), tt.code, tt.has...)
	}
}

// R7.13: when the provider reports that another model ran than the one the
// turn asked for, the turn's result (send, wait, create_session) says so in
// modelNote; a turn on the model asked for has none.
func TestRulesPromptModelNoteWhenAnotherModelRan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "worker"})
	other := script(map[string]any{"model": "scripted-2"}, map[string]any{"reply": "ran elsewhere"})
	send := func(extra map[string]any) map[string]any {
		return f.ok(a, actWith(map[string]any{"action": "send", "relay": "this", "session": b}, extra))
	}

	env := send(map[string]any{"text": "plain"})
	if env["status"] != "done" {
		t.Fatalf("send: %v", env)
	}
	actNoKey(t, "a turn on the model asked for", env, "modelNote")

	env = send(map[string]any{"text": other})
	reply, _ := env["reply"].(map[string]any)
	if diff := cmp.Diff([]any{"done", "scripted-2"}, []any{env["status"], reply["model"]}); diff != "" {
		t.Errorf("send: status, reply model (-want +got):\n%s", diff)
	}
	actHas(t, "send modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")

	env = send(map[string]any{"text": other, "wait_seconds": 0})
	env = f.ok(a, map[string]any{"action": "wait", "relay": "this", "session": b, "message_id": env["message_id"], "wait_seconds": 15})
	if env["status"] != "done" {
		t.Fatalf("wait: %v", env)
	}
	actHas(t, "wait modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")

	env, _ = f.actInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": other, "wait_seconds": 15}, "allow")
	if env["status"] != "done" {
		t.Fatalf("create_session: %v", env)
	}
	actHas(t, "create_session modelNote", env["modelNote"], "'scripted-2'", "'scripted-1'")
}

// R5.1: no answer within the longest wait → PERMISSION "the owner did not
// answer in time", the card withdrawn (it cannot be allowed any more) and
// nothing created.
func TestRulesPromptCardTimeoutWithdrawsCard(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn, work: true}, r2Options{maxWaitCap: time.Second})
	actAuto(f)
	a := f.session(NewSession{Title: "orchestrator"})
	tid := f.prompt(a, script(actTool(map[string]any{"action": "create_session", "relay": "this", "text": "hello"})))
	card := f.actCard(a)
	f.pass(time.Second) // the longest wait, nobody decides
	res := f.actResults(tid, 1)[0]
	actWant(t, "create_session", res, CodePermission, "the owner did not answer in time", "No session was created.")
	if left := f.actCards(a); len(left) != 0 {
		t.Errorf("card still pending after the timeout: %v", left)
	}
	if _, err := f.r.DecideCard(f.ctx, card.ID, "allow"); err == nil {
		t.Errorf("allowing a withdrawn card was taken")
	}
	if n := f.actTotal("all"); n != 1 {
		t.Errorf("%d sessions after a timed-out card, want 1", n)
	}
}

// R18.13: settings.max_turn_seconds ends a longer turn with an error that
// names it, after about that long; the session goes on.
func TestRulesPromptMaxTurnSeconds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{work: true})
	one := 1
	if _, err := f.r.PatchSettings(f.ctx, SettingsPatch{MaxTurnSeconds: &one}); err != nil {
		t.Fatalf("patch settings: %v", err)
	}
	s := f.session(NewSession{Title: "slow"})
	tid := f.prompt(s, script(map[string]any{"sleep_ms": 3000}, map[string]any{"reply": "too late"}))
	ran := f.meanwhile("the drain of the turn past its limit", func() {
		f.run() // the drain runs the turn until the limit ends it
	})
	f.pass(time.Second) // the turn's limit, set when it started: the agent still sleeps
	ran()
	tr := f.r2Turn(tid)
	if tr.Status != store.TurnError || !strings.Contains(tr.Error, "max_turn_seconds") {
		t.Fatalf("turn %s %q, want error naming max_turn_seconds", tr.Status, tr.Error)
	}
	// The session goes on: the next prompt runs.
	next := f.prompt(s, "again")
	f.run()
	if tr := f.r2Turn(next); tr.Status != store.TurnDone {
		t.Errorf("next turn %s %q", tr.Status, tr.Error)
	}
}
