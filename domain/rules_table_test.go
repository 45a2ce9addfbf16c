package domain

// Rule suites moved down from relaytest: the same calls and the same
// expectations, against the domain fixture (no HTTP, no MCP, no worker).

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// outcome is what a rule test compares of one relay_tool envelope.
type outcome struct {
	OK   bool
	Code string
	Has  bool // the error names what was (not) done
}

func outcomeOf(env map[string]any, has string) outcome {
	msg, _ := env["error"].(string)
	code, _ := env["code"].(string)
	return outcome{OK: env["ok"] == true, Code: code, Has: has == "" || strings.Contains(msg, has)}
}

// R4.2: with agent sessions off every action but list_relays is DISABLED
// (ask into the own conversation, list_questions and withdraw excepted);
// earlier checks still answer first; turning agent sessions on opens them.
func TestRulesAgentSessionsOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{})
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})

	env := f.call(a, map[string]any{"action": "list_relays"})
	if diff := cmp.Diff(map[string]any{"ok": true, "relays": []any{}, "self": map[string]any{"name": "desk"},
		"limits":  map[string]any{"maxActiveSessions": float64(4), "maxWaitSeconds": float64(600)},
		"summary": "list_relays: 0 relays, 0 unlocked"}, env); diff != "" {
		t.Errorf("list_relays (-want +got):\n%s", diff)
	}
	calls := []map[string]any{
		{"action": "relay_info"},
		{"action": "usage"},
		{"action": "list_sessions"},
		{"action": "read_session", "session": b},
		{"action": "read_session", "session": "0123456789abcdef0123456789abcdef"},
		{"action": "read_task_output", "session": b, "task_id": "abcdef123456"},
		{"action": "send", "session": b, "text": "hi", "wait_seconds": 0},
		{"action": "create_session", "text": "hi"},
		{"action": "update_session", "session": b, "title": "x"},
		{"action": "wait", "session": b, "message_id": "0123456789abcdef"},
		{"action": "answer_question", "session": b, "question_id": "q_0123456789abcdef", "answer": "x"},
		{"action": "stop", "session": b},
		{"action": "archive", "session": b},
		{"action": "subscribe", "sessions": []string{"all"}},
		{"action": "unsubscribe", "subscription_id": "all"},
		{"action": "list_subscriptions"},
		{"action": "transfer_subscriptions", "from": b},
		{"action": "schedule", "text": "later", "every_minutes": 5},
		{"action": "list_schedules"},
		{"action": "unschedule", "schedule_id": "sch_0123456789"},
		{"action": "ask", "question": "ok?", "session": b},
	}
	for _, c := range calls {
		for _, rel := range []string{"this", "desk"} {
			args := map[string]any{"relay": rel}
			for k, v := range c {
				args[k] = v
			}
			nothing := "Nothing was done."
			if c["action"] == "update_session" {
				nothing = "Nothing was changed."
			}
			want := outcome{Code: CodeDisabled, Has: true}
			if diff := cmp.Diff(want, outcomeOf(f.call(a, args), nothing)); diff != "" {
				t.Errorf("%v on %s (-want +got):\n%s", c["action"], rel, diff)
			}
		}
	}
	// Exempt (R10.4): an ask into the own conversation, list_questions, withdraw.
	env = f.call(a, map[string]any{"action": "ask", "question": "ok?"})
	askID, _ := env["question_id"].(string)
	if !strings.HasPrefix(askID, "ask_") {
		t.Fatalf("ask: %v", env)
	}
	env = f.call(a, map[string]any{"action": "list_questions", "relay": "this"})
	qs, _ := env["questions"].([]any)
	if len(qs) != 1 || qs[0].(map[string]any)["id"] != askID {
		t.Errorf("list_questions %v, want %s", env["questions"], askID)
	}
	for _, tt := range []struct {
		args map[string]any
		want outcome
	}{
		{map[string]any{"action": "withdraw", "question_id": askID}, outcome{OK: true, Has: true}},
		{map[string]any{"action": "usage", "relay": "build-box"}, outcome{Code: CodeUnknownRelay, Has: true}},
		{map[string]any{"action": "usage"}, outcome{Code: CodeInvalidInput, Has: true}},
		// R3.4a: argument shapes are checked before the relay.
		{map[string]any{"action": "read_session", "relay": "this", "session": b, "last": "abc"}, outcome{Code: CodeInvalidInput, Has: true}},
		{map[string]any{"action": "send", "relay": "build-box", "session": b, "text": 5}, outcome{Code: CodeInvalidInput, Has: true}},
		{map[string]any{"action": "answer_question", "relay": "this", "session": b, "question_id": "ask_0123456789", "answer": "x"},
			outcome{Code: CodeForbidden, Has: true}},
	} {
		if diff := cmp.Diff(tt.want, outcomeOf(f.call(a, tt.args), "")); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tt.args, diff)
		}
	}
	if n := f.messages(b); n != 0 {
		t.Errorf("target has %d messages", n)
	}
	// The owner turns agent sessions on, and off again.
	for _, on := range []bool{true, false} {
		if _, err := f.r.PatchSettings(f.ctx, SettingsPatch{AgentSessions: &on}); err != nil {
			t.Fatalf("patch settings: %v", err)
		}
		want := outcome{OK: on, Has: true}
		if !on {
			want.Code = CodeDisabled
		}
		if diff := cmp.Diff(want, outcomeOf(f.call(a, map[string]any{"action": "usage", "relay": "this"}), "")); diff != "" {
			t.Errorf("usage with agent sessions %v (-want +got):\n%s", on, diff)
		}
	}
}

// R5.3, R7.13: the rules that check input answer before an approval card is
// asked: an ask-mode caller's invalid writes are refused outright.
func TestRulesValidationBeforeCard(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "asker", Mode: "ask"})
	b := f.session(NewSession{Title: "target"})
	tests := []struct {
		name string
		args map[string]any
		code string
		has  string
	}{
		{"send unknown model", map[string]any{"action": "send", "relay": "this", "session": b, "text": "x", "model": "scripted-2"},
			CodeUnknownModel, "Nothing was sent."},
		{"create unknown model", map[string]any{"action": "create_session", "relay": "this", "text": "x", "model": "scripted-2"},
			CodeUnknownModel, "No session was created."},
		{"update unknown model", map[string]any{"action": "update_session", "relay": "this", "session": b, "model": "scripted-2"},
			CodeUnknownModel, "Nothing was changed."},
		{"create unknown group", map[string]any{"action": "create_session", "relay": "this", "text": "x", "group": "Relase"},
			CodeUnknownGroup, "No session was created."},
		{"create forbidden folder", map[string]any{"action": "create_session", "relay": "this", "text": "x", "cwd": "/definitely/not/allowed"},
			CodeInvalidInput, "No session was created."},
		{"send unknown effort", map[string]any{"action": "send", "relay": "this", "session": b, "text": "x", "effort": "extreme"},
			CodeInvalidInput, "Nothing was sent."},
		{"update unknown argument", map[string]any{"action": "update_session", "relay": "this", "session": b, "text": "x"},
			CodeInvalidInput, "Nothing was changed."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := f.call(a, tt.args)
			if diff := cmp.Diff(outcome{Code: tt.code, Has: true}, outcomeOf(env, tt.has)); diff != "" {
				t.Errorf("(-want +got):\n%s\nenvelope %v", diff, env)
			}
			if tt.code == CodeUnknownModel {
				if diff := cmp.Diff([]any{"scripted-1"}, env["suggestions"]); diff != "" {
					t.Errorf("suggestions (-want +got):\n%s", diff)
				}
			}
		})
	}
	cards, err := f.st.PendingCards(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 0 {
		t.Errorf("%d cards asked: validation must come first", len(cards))
	}
	if n := f.messages(b); n != 0 {
		t.Errorf("target got %d messages", n)
	}
	// Inside a turn of a conversation whose first create_session would ask: no card at all.
	c := f.session(NewSession{Title: "creator"})
	tid := f.prompt(c, script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "x", "model": "nope-9"}}))
	if n := f.run(); n == 0 {
		t.Fatalf("no drain was enqueued for the prompt")
	}
	res := f.toolResults(tid)
	if len(res) != 1 {
		t.Fatalf("%d tool results, want 1", len(res))
	}
	if diff := cmp.Diff(outcome{Code: CodeUnknownModel, Has: true}, outcomeOf(res[0], "No session was created.")); diff != "" {
		t.Errorf("create_session in a turn (-want +got):\n%s", diff)
	}
	if cards, _ = f.st.PendingCards(f.ctx); len(cards) != 0 {
		t.Errorf("%d cards asked in the turn: validation must come first", len(cards))
	}
}

// R4.3, §15: the subscription, schedule and question actions may leave
// relay out; unknown ids are NOT_FOUND; every action naming a relay that is
// not paired answers UNKNOWN_RELAY and names it.
func TestRulesLaterActionsBasics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})
	type listed struct {
		OK      bool
		Relay   any
		Summary bool
	}
	for _, action := range []string{"list_subscriptions", "list_schedules", "list_questions"} {
		for _, rel := range []any{nil, "this", "DESK"} {
			args := map[string]any{"action": action}
			if rel != nil {
				args["relay"] = rel
			}
			env := f.call(a, args)
			sum, _ := env["summary"].(string)
			got := listed{OK: env["ok"] == true, Relay: env["relay"], Summary: strings.Contains(sum, action+" → desk")}
			if diff := cmp.Diff(listed{OK: true, Relay: "desk", Summary: true}, got); diff != "" {
				t.Errorf("%s relay %v (-want +got):\n%s\nsummary %q", action, rel, diff, sum)
			}
		}
	}
	for _, c := range []map[string]any{
		{"action": "unsubscribe", "subscription_id": "sub_0123456789ab"},
		{"action": "unschedule", "schedule_id": "sch_0123456789ab"},
		{"action": "withdraw", "question_id": "ask_0123456789ab"},
	} {
		if diff := cmp.Diff(outcome{Code: CodeNotFound, Has: true}, outcomeOf(f.call(a, c), "Nothing was")); diff != "" {
			t.Errorf("%v (-want +got):\n%s", c["action"], diff)
		}
	}
	all := []map[string]any{
		{"action": "subscribe", "sessions": []string{b}},
		{"action": "unsubscribe", "subscription_id": "sub_0123456789"},
		{"action": "list_subscriptions"},
		{"action": "transfer_subscriptions", "from": b},
		{"action": "schedule", "text": "later", "every_minutes": 5},
		{"action": "list_schedules"},
		{"action": "unschedule", "schedule_id": "sch_0123456789"},
		{"action": "ask", "question": "ok?"},
		{"action": "list_questions"},
		{"action": "withdraw", "question_id": "ask_0123456789"},
		{"action": "relay_info"},
		{"action": "usage"},
		{"action": "list_sessions"},
		{"action": "read_session", "session": b},
		{"action": "read_task_output", "session": b, "task_id": "abcdef123456"},
		{"action": "send", "session": b, "text": "hi", "wait_seconds": 0},
		{"action": "create_session", "text": "hi"},
		{"action": "update_session", "session": b, "title": "x"},
		{"action": "wait", "session": b, "message_id": "0123456789abcdef"},
		{"action": "answer_question", "session": b, "question_id": "q_0123456789abcdef", "answer": "x"},
		{"action": "stop", "session": b},
		{"action": "archive", "session": b},
	}
	for _, c := range all {
		args := map[string]any{"relay": "build-box"}
		for k, v := range c {
			args[k] = v
		}
		if diff := cmp.Diff(outcome{Code: CodeUnknownRelay, Has: true}, outcomeOf(f.call(a, args), `"build-box"`)); diff != "" {
			t.Errorf("%v (-want +got):\n%s", c["action"], diff)
		}
	}
	if n := f.messages(b); n != 0 {
		t.Errorf("target has %d messages", n)
	}
}
