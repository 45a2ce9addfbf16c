package domain

// update_session's notes and the Claude settings (R7.10, issues 13 and 21),
// moved down from relaytest: which settings do nothing for a session's
// provider, the rounded window, settings.group's role, "auto" and 0.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
)

// updSessions creates, as the lead a, one session per provider given
// (create_session, so a started them and update_session needs no card):
// the scripted one in a turn whose first create_session card is allowed.
func (f *fixture) updSessions(a string, provs ...string) map[string]string {
	f.t.Helper()
	first, _ := f.actInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, "allow")
	actWant(f.t, "first create_session", first, "")
	sessions := map[string]string{"scripted": first["session"].(string)}
	for _, p := range provs {
		env := f.ok(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": p, "wait_seconds": 15})
		sessions[p] = env["session"].(string)
	}
	return sessions
}

// R7.10 (issue 13): update_session's note names every setting given that does
// nothing for the session's provider — for every provider, not only scripted.
func TestRulesUpdateSessionNotesIgnoredSettings(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		{ID: "fx", Name: "Effort exec", Type: config.TypeExec, Command: []string{"/bin/echo", "{effort}"},
			Models: []string{"m1"}, Efforts: []string{"low", "high"}},
		{ID: "plain", Name: "Plain exec", Type: config.TypeExec, Command: []string{"/bin/echo"},
			Models: []string{"m1"}, Efforts: []string{"low", "high"}}}})
	actAuto(f)
	a := f.session(NewSession{Title: "lead"})
	sessions := f.updSessions(a, "fx", "plain")
	upd := func(prov string, extra map[string]any) map[string]any {
		return f.ok(a, actWith(map[string]any{"action": "update_session", "relay": "this", "session": sessions[prov]}, extra))
	}
	all := map[string]any{"effort": "high", "thinking_enabled": "on", "thinking_display": "summarized", "auto_compact_window": 200000}

	env := upd("scripted", all)
	if diff := cmp.Diff("effort does nothing for the Scripted provider (scripted); stored for later turns. "+
		"thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions (Claude API sessions included) and change nothing for the Scripted provider (scripted); stored for later turns.", env["note"]); diff != "" {
		t.Errorf("scripted note (-want +got):\n%s", diff)
	}
	env = upd("fx", all)
	actHas(t, "exec with {effort} note", env["note"], "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions (Claude API sessions included) and change nothing for the Effort exec provider (exec)")
	if n, _ := env["note"].(string); strings.Contains(n, "effort does") {
		t.Errorf("effort reaches fx's command, yet the note names it: %v", env["note"])
	}
	env = upd("plain", map[string]any{"effort": "low"})
	if diff := cmp.Diff("effort does nothing for the Plain exec provider (exec); stored for later turns.", env["note"]); diff != "" {
		t.Errorf("exec without {effort} note (-want +got):\n%s", diff)
	}
	env = upd("fx", map[string]any{"effort": "low"})
	actNoKey(t, "a setting the provider uses", env, "note")
	// The rounded auto_compact_window note, in full (issue 13).
	env = upd("fx", map[string]any{"auto_compact_window": 120000})
	if diff := cmp.Diff([]any{"auto_compact_window 120000 was rounded to 100000, the nearest allowed value. " +
		"auto_compact_window applies only to Claude sessions (Claude API sessions included) and changes nothing for the Effort exec provider (exec); stored for later turns.",
		float64(100000)}, []any{env["note"], actSettings(env)["auto_compact_window"]}); diff != "" {
		t.Errorf("rounded window: note, window (-want +got):\n%s", diff)
	}
}

// Issue 21 item 10 (R7.10, the seed's update_session): settings.group
// carries role; auto_compact_window and thinking_* apply to Claude sessions
// (an exec provider marked claude here), and only other sessions get the
// note that says so; a provider that declares its own window semantics (the
// seed's DeepSeek) gets that note with what it does; "auto" and 0 are
// windows; every refusal ends "Nothing was changed.".
func TestRulesUpdateSessionClaudeSettings(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{
		{ID: "claude-api", Name: "Claude API", Type: config.TypeExec, Command: []string{"/bin/echo"}, Models: []string{"m1"}, Claude: true},
		{ID: "deepseek", Name: "DeepSeek", Type: config.TypeExec, Command: []string{"/bin/echo"}, Models: []string{"m1"},
			CompactWindowZero: 400000, AlwaysThinks: true}}})
	actAuto(f)
	a := f.session(NewSession{Title: "lead"})
	sessions := f.updSessions(a, "claude-api", "deepseek")
	upd := func(prov string, extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "update_session", "relay": "this", "session": sessions[prov]}, extra)
	}
	all := map[string]any{"thinking_enabled": "on", "thinking_display": "summarized", "auto_compact_window": 200000}

	// A Claude session: the settings apply, no note.
	env := f.ok(a, upd("claude-api", all))
	actNoKey(t, "Claude session", env, "note")
	if diff := cmp.Diff([]any{"auto_compact_window", "thinking_enabled", "thinking_display"}, env["changed"]); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
	// Another provider: the note says they apply to Claude sessions only.
	for _, tt := range []struct {
		prov string
		args map[string]any
		note string
	}{
		{"scripted", all, "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions " +
			"(Claude API sessions included) and change nothing for the Scripted provider (scripted); stored for later turns."},
		{"scripted", map[string]any{"thinking_display": "full"}, "thinking_display applies only to Claude sessions (Claude API sessions included) " +
			"and changes nothing for the Scripted provider (scripted); stored for later turns."},
		// The DeepSeek note: the window works there and 0 means 400,000 tokens; it always thinks.
		{"deepseek", all, "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions " +
			"(Claude API sessions included); on the DeepSeek provider (exec) thinking_enabled changes nothing, as a DeepSeek session always thinks; " +
			"auto_compact_window does take effect, and 0 means 400,000 tokens; thinking_display changes nothing; stored for later turns."},
	} {
		env = f.ok(a, upd(tt.prov, tt.args))
		if diff := cmp.Diff(tt.note, env["note"]); diff != "" {
			t.Errorf("%s %v note (-want +got):\n%s", tt.prov, tt.args, diff)
		}
	}
	groupOf := func(env map[string]any) map[string]any {
		g, _ := actSettings(env)["group"].(map[string]any)
		return g
	}
	// settings.group carries role: a session the lead started is a member of its group ...
	if diff := cmp.Diff("member", groupOf(env)["role"]); diff != "" {
		t.Errorf("role in the starter's group (-want +got):\n%s", diff)
	}
	// ... and the first session of a group that update_session creates heads it.
	env = f.ok(a, upd("claude-api", map[string]any{"group": "Release 2.4"}))
	gc, _ := env["groupCreated"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"id": gc["id"], "name": "Release 2.4", "role": "head"}, groupOf(env)); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	env = f.ok(a, upd("deepseek", map[string]any{"group": "Release 2.4"}))
	if diff := cmp.Diff("member", groupOf(env)["role"]); diff != "" {
		t.Errorf("joined role (-want +got):\n%s", diff)
	}

	// "auto" and 0 are windows: the provider's own, shown as "auto".
	env = f.ok(a, upd("claude-api", map[string]any{"auto_compact_window": "auto"}))
	if diff := cmp.Diff([]any{[]any{"auto_compact_window"}, "auto"}, []any{env["changed"], actSettings(env)["auto_compact_window"]}); diff != "" {
		t.Errorf("auto: changed, window (-want +got):\n%s", diff)
	}
	f.ok(a, upd("claude-api", map[string]any{"auto_compact_window": 500000}))
	env = f.ok(a, upd("claude-api", map[string]any{"auto_compact_window": 0}))
	if diff := cmp.Diff([]any{[]any{"auto_compact_window"}, "auto"}, []any{env["changed"], actSettings(env)["auto_compact_window"]}); diff != "" {
		t.Errorf("0: changed, window (-want +got):\n%s", diff)
	}
	actNoKey(t, "0 is not rounded", env, "note")
	env = f.ok(a, upd("claude-api", map[string]any{"auto_compact_window": "AUTO"}))
	if diff := cmp.Diff([]any{}, env["changed"]); diff != "" {
		t.Errorf("auto again changes nothing (-want +got):\n%s", diff)
	}

	// Every refusal says "Nothing was changed.", the shared checks' too.
	for _, bad := range []map[string]any{
		upd("claude-api", map[string]any{"auto_compact_window": "huge"}),
		upd("claude-api", map[string]any{"auto_compact_window": -5}),
		upd("claude-api", map[string]any{"session": 12345, "title": "x"}),
		upd("claude-api", map[string]any{"relay": "nowhere", "title": "x"}),
		upd("claude-api", map[string]any{"session": "0123456789abcdef0123", "title": "x"}),
		{"action": "update_session", "session": sessions["claude-api"], "title": "x"},
	} {
		raw, err := json.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		got, isErr := f.actRaw(a, string(raw))
		msg, _ := got["error"].(string)
		if diff := cmp.Diff([]any{true, false, true}, []any{isErr, got["ok"], strings.HasSuffix(msg, "Nothing was changed.")}); diff != "" {
			t.Errorf("%v: isError, ok, error ends %q (-want +got):\n%s\nenvelope %v", bad, "Nothing was changed.", diff, got)
		}
	}
	if diff := cmp.Diff(fmt.Sprint(actSettings(env)["title"]), f.actStored(sessions["claude-api"]).Title); diff != "" {
		t.Errorf("title kept (-want +got):\n%s", diff)
	}
}
