package relaytest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// Issue 21 item 11 (R7.13, the seed's "Welche Modelle angenommen werden"):
// create_session on a provider whose ids are spelled with dots (Copilot)
// with another provider's spelling of an id answers with the code of the one
// other provider that has the id — CLAUDE_PROVIDER_REQUIRED — not with the
// Copilot provider's MODEL_UNAVAILABLE; nothing is created, and send and
// update_session keep MODEL_UNAVAILABLE with the closest match.
func TestSeedCopilotSpellingOnCreateNamesTheOtherProvider(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		cop := config.ScriptedProvider()
		cop.ID, cop.Name, cop.Models, cop.DefaultModel = "copilot", "Copilot", []string{"claude-opus-5.5", "gpt-5.4"}, "gpt-5.4"
		cl := config.ScriptedProvider()
		cl.ID, cl.Name, cl.Models, cl.DefaultModel = "claude", "Claude", []string{"claude-opus-5-5"}, "claude-opus-5-5"
		c.Providers = append(c.Providers, cop, cl)
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	b := r.NewSession(map[string]any{"title": "on copilot", "provider": "copilot"})
	m := r.Connect(a.Token, nil)
	total := sessionTotal(t, m, "all")

	env := m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "copilot", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "remoteCode", env["remoteCode"], "CLAUDE_PROVIDER_REQUIRED")
	wantHas(t, "error", env["error"], "Unknown model 'claude-opus-5-5' for Copilot", "did you mean 'claude-opus-5.5'?",
		`Provider "claude" offers 'claude-opus-5-5': pass provider "claude".`, "No session was created.")
	wantEq(t, "suggestions", env["suggestions"], []any{"claude-opus-5.5"})
	wantEq(t, "sessions", sessionTotal(t, m, "all"), total)

	// Not create_session: the closest match, the session stays on Copilot.
	env = m.MustFail(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "x", "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "send remoteCode", env["remoteCode"], "COPILOT_MODEL_UNAVAILABLE")
	env = m.MustFail(map[string]any{"action": "update_session", "relay": "this", "session": b.ID, "model": "claude-opus-5-5"}, codeUnknownModel)
	wantEq(t, "update remoteCode", env["remoteCode"], "COPILOT_MODEL_UNAVAILABLE")
	wantEq(t, "provider kept", r.Get(b.ID)["provider"], "copilot")
}

// Issue 21 item 10 (R7.10, the seed's update_session): settings.group
// carries role; auto_compact_window and thinking_* apply to Claude sessions
// (an exec provider marked claude here), and only other sessions get the
// note that says so; a provider that declares its own window semantics (the
// seed's DeepSeek) gets that note with what it does; "auto" and 0 are
// windows; every refusal ends "Nothing was changed.".
func TestSeedUpdateSessionClaudeSettings(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "claude-api", Name: "Claude API", Type: config.TypeExec, Command: []string{"/bin/echo"},
				Models: []string{"m1"}, Claude: true},
			config.Provider{ID: "deepseek", Name: "DeepSeek", Type: config.TypeExec, Command: []string{"/bin/echo"},
				Models: []string{"m1"}, CompactWindowZero: 400000, AlwaysThinks: true})
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	first, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, "allow")
	mustEnvOK(t, first)
	sessions := map[string]string{"scripted": str(first["session"])}
	for _, p := range []string{"claude-api", "deepseek"} {
		env := m.MustOK(map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": p, "wait_seconds": 15})
		sessions[p] = str(env["session"])
	}
	upd := func(prov string, extra map[string]any) map[string]any {
		args := map[string]any{"action": "update_session", "relay": "this", "session": sessions[prov]}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	all := map[string]any{"thinking_enabled": "on", "thinking_display": "summarized", "auto_compact_window": 200000}

	// A Claude session: the settings apply, no note.
	env := m.MustOK(upd("claude-api", all))
	wantNoKey(t, "Claude session", env, "note")
	wantEq(t, "changed", env["changed"], []any{"auto_compact_window", "thinking_enabled", "thinking_display"})
	// Another provider: the note says they apply to Claude sessions only.
	env = m.MustOK(upd("scripted", all))
	wantEq(t, "scripted note", env["note"], "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions "+
		"(Claude API sessions included) and change nothing for the Scripted provider (scripted); stored for later turns.")
	env = m.MustOK(upd("scripted", map[string]any{"thinking_display": "full"}))
	wantEq(t, "one setting", env["note"], "thinking_display applies only to Claude sessions (Claude API sessions included) "+
		"and changes nothing for the Scripted provider (scripted); stored for later turns.")
	// The DeepSeek note: the window works there and 0 means 400,000 tokens; it always thinks.
	env = m.MustOK(upd("deepseek", all))
	wantEq(t, "deepseek note", env["note"], "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions "+
		"(Claude API sessions included); on the DeepSeek provider (exec) thinking_enabled changes nothing, as a DeepSeek session always thinks; "+
		"auto_compact_window does take effect, and 0 means 400,000 tokens; thinking_display changes nothing; stored for later turns.")

	// settings.group carries role: a session the lead started is a member of its group ...
	settings := obj(t, env["settings"], "settings")
	group := obj(t, settings["group"], "settings.group")
	wantEq(t, "role in the starter's group", group["role"], "member")
	// ... and the first session of a group that update_session creates heads it.
	env = m.MustOK(upd("claude-api", map[string]any{"group": "Release 2.4"}))
	group = obj(t, obj(t, env["settings"], "settings")["group"], "settings.group")
	wantEq(t, "group", group, map[string]any{"id": obj(t, env["groupCreated"], "groupCreated")["id"], "name": "Release 2.4", "role": "head"})
	env = m.MustOK(upd("deepseek", map[string]any{"group": "Release 2.4"}))
	wantEq(t, "joined role", obj(t, obj(t, env["settings"], "settings")["group"], "settings.group")["role"], "member")

	// "auto" and 0 are windows: the provider's own, shown as "auto".
	env = m.MustOK(upd("claude-api", map[string]any{"auto_compact_window": "auto"}))
	wantEq(t, "auto changed", env["changed"], []any{"auto_compact_window"})
	wantEq(t, "auto", obj(t, env["settings"], "settings")["auto_compact_window"], "auto")
	m.MustOK(upd("claude-api", map[string]any{"auto_compact_window": 500000}))
	env = m.MustOK(upd("claude-api", map[string]any{"auto_compact_window": 0}))
	wantEq(t, "0 changed", env["changed"], []any{"auto_compact_window"})
	wantEq(t, "0 is auto", obj(t, env["settings"], "settings")["auto_compact_window"], "auto")
	wantNoKey(t, "0 is not rounded", env, "note")
	env = m.MustOK(upd("claude-api", map[string]any{"auto_compact_window": "AUTO"}))
	wantEq(t, "auto again changes nothing", env["changed"], []any{})

	// Every refusal says "Nothing was changed.", the shared checks' too.
	for _, bad := range []map[string]any{
		upd("claude-api", map[string]any{"auto_compact_window": "huge"}),
		upd("claude-api", map[string]any{"auto_compact_window": -5}),
		upd("claude-api", map[string]any{"session": 12345, "title": "x"}),
		upd("claude-api", map[string]any{"relay": "nowhere", "title": "x"}),
		upd("claude-api", map[string]any{"session": "0123456789abcdef0123", "title": "x"}),
		{"action": "update_session", "session": sessions["claude-api"], "title": "x"},
	} {
		ok := false
		env, isErr := m.Call(bad)
		if isErr && env["ok"] == false {
			ok = true
		}
		if !ok {
			t.Errorf("%v was accepted: %v", bad, env)
			continue
		}
		if !strings.HasSuffix(str(env["error"]), "Nothing was changed.") {
			t.Errorf("%v: error %q does not end %q", bad, env["error"], "Nothing was changed.")
		}
	}
	wantEq(t, "title kept", r.Get(sessions["claude-api"])["title"], obj(t, env["settings"], "settings")["title"])
}

// activityTexts are the texts of a session's 🛰️/activity lines, oldest first.
func activityTexts(r *Relay, sid string) []string {
	var out []string
	for _, m := range r.Messages(sid, "activity") {
		out = append(out, str(m["text"]))
	}
	return out
}

// Issue 21 item 9 (R17.3, R19.3; the seed's "Der Tool-Aufruf in der
// Antwort"): every relay_tool call a session makes during its turn gets one
// 🛰️ line — the relay writes it, whatever the provider: scripted (each call
// of a turn, a refused one too), exec (over /mcp), openai, an external
// session's calls; none for a call outside a turn. (The agent CLIs and ACP
// agents: TestAgentCLIs*, TestACP* check their one line.)
func TestSeedRelayWritesTheActivityLineOfEveryCall(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed for the exec callback: %v", err)
	}
	dir := t.TempDir()
	cb := filepath.Join(dir, "callback.sh")
	if err := os.WriteFile(cb, []byte(execCallbackScript), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := &llmFake{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "cb", Name: "Callback", Type: config.TypeExec, Command: []string{"/bin/sh", cb}, Models: []string{"cb-1"}},
			config.Provider{ID: "local", Name: "Local", Type: config.TypeOpenAI, BaseURL: srv.URL + "/v1", Models: []string{"llama-test"}})
	}})
	target := r.NewSession(map[string]any{"title": "target"})

	// Scripted: three calls in one turn, one of them refused, in order.
	a := r.NewSession(map[string]any{"title": "scripted"})
	mid := r.Message(a.ID, Script(
		map[string]any{"tool": map[string]any{"action": "list_sessions", "relay": "this"}},
		map[string]any{"tool": map[string]any{"action": "read_session", "relay": "this", "session": target.ID}},
		map[string]any{"tool": map[string]any{"action": "nope", "relay": "box", "session": "abcdef0123456789"}},
	))
	if tr := r.WaitTurn(mid, 30*time.Second, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("scripted turn ended %s: %s", tr.Status, tr.Error)
	}
	wantEq(t, "scripted lines", activityTexts(r, a.ID), []string{"🛰️ list_sessions → desk",
		"🛰️ read_session → desk session " + target.ID[:8], "🛰️ nope → box session abcdef01"})

	// Outside a turn: no line.
	m := r.Connect(a.Token, nil)
	m.MustOK(map[string]any{"action": "list_sessions", "relay": "this"})
	wantEq(t, "after a call outside a turn", len(activityTexts(r, a.ID)), 3)

	// exec: the command calls relay_tool over /mcp with the session's token.
	e := r.NewSession(map[string]any{"provider": "cb", "title": "exec"})
	if tr := r.WaitTurn(r.Message(e.ID, "list them"), 30*time.Second, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("exec turn ended %s: %s", tr.Status, tr.Error)
	}
	wantEq(t, "exec lines", activityTexts(r, e.ID), []string{"🛰️ list_sessions → desk"})

	// openai: the model's tool call.
	o := r.NewSession(map[string]any{"provider": "local", "title": "llm"})
	if tr := r.WaitTurn(r.Message(o.ID, "Which sessions are there?"), 30*time.Second, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("openai turn ended %s: %s", tr.Status, tr.Error)
	}
	wantEq(t, "openai lines", activityTexts(r, o.ID), []string{"🛰️ list_sessions → desk"})

	// An external session: its agent has no turns the relay runs; each call is its activity.
	x := r.NewSession(map[string]any{"provider": "external", "title": "my terminal agent"})
	xm := r.Connect(x.Token, nil)
	xm.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": target.ID})
	wantEq(t, "external lines", activityTexts(r, x.ID), []string{"🛰️ read_session → desk session " + target.ID[:8]})
}

// Issue 21 item 12 (R7.6, the seed's read_task_output): each of the note's
// cases — only the end exists, the output is gone, a sub-agent, and the
// agent's process was asked for the output (a task whose output stays in the
// agent until asked, the scripted agent's held task) and the call should be
// repeated in a few seconds, after which the output is there.
func TestSeedReadTaskOutputNotes(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "caller"})
	m := r.Connect(a.Token, nil)
	ctx := context.Background()
	taskOf := func(sid, desc string) string {
		t.Helper()
		var id string
		Eventually(t, 30*time.Second, func() bool {
			tasks, err := r.App.Store().Tasks(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range tasks {
				if tk.Description == desc {
					id = tk.ID
				}
			}
			return id != ""
		}, "task %q of %s", desc, sid)
		return id
	}
	read := func(sid, tid string) map[string]any {
		return m.MustOK(map[string]any{"action": "read_task_output", "relay": "this", "session": sid, "task_id": tid})
	}

	// Only the end is kept.
	long := make([]string, 5003)
	for i := range long {
		long[i] = fmt.Sprintf("line %d", i+1)
	}
	b := r.NewSession(map[string]any{"title": "builder"})
	r.WaitTurn(r.Message(b.ID, Script(
		map[string]any{"task": map[string]any{"description": "long", "lines": long, "exit": 0}},
		map[string]any{"task": map[string]any{"description": "short", "lines": []string{"one", "two"}, "exit": 0}},
		map[string]any{"subagent": map[string]any{"description": "helper", "ms": 0}},
	)), turnWait, "done")
	env := read(b.ID, taskOf(b.ID, "long"))
	wantEq(t, "only the end", env["note"], "Only the end of the output is kept (the last 5000 of 5003 lines).")
	wantEq(t, "truncated", env["truncated"], true)
	// A sub-agent.
	env = read(b.ID, taskOf(b.ID, "helper"))
	wantEq(t, "sub-agent", env["note"], "A sub-agent writes no output to read; its status is shown.")
	// Gone: the task ended within the hour but its output is no longer there.
	short := taskOf(b.ID, "short")
	wantNoKey(t, "short", read(b.ID, short), "note")
	if err := r.App.Store().ExpireTaskOutput(ctx, short, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 15*time.Second, func() bool { return read(b.ID, short)["note"] == "The output of this task is gone." }, "the gone note")

	// Held by the agent's process: the call asks it, says so, and a later call finds the output.
	held := make([]string, 600)
	for i := range held {
		held[i] = fmt.Sprintf("step %d", i+1)
	}
	c := r.NewSession(map[string]any{"title": "held"})
	r.WaitTurn(r.Message(c.ID, Script(map[string]any{"task": map[string]any{"description": "npm test", "lines": held, "line_ms": 100,
		"held": true, "background": true}})), turnWait, "done")
	tid := taskOf(c.ID, "npm test")
	env = read(c.ID, tid)
	wantEq(t, "status", obj(t, env["task"], "task")["status"], "running")
	wantHas(t, "asked note", env["note"], "the agent's process was asked; call again in a few seconds")
	Eventually(t, 30*time.Second, func() bool {
		tail := strList(t, read(c.ID, tid)["tail"], "tail")
		return len(tail) > 0 && tail[0] == "step 1"
	}, "the held output after asking")
	// An ordinary running task's output is the relay's: no such note.
	d := r.NewSession(map[string]any{"title": "plain"})
	r.WaitTurn(r.Message(d.ID, Script(map[string]any{"task": map[string]any{"description": "plain", "lines": held, "line_ms": 100,
		"background": true}})), turnWait, "done")
	wantNoKey(t, "plain running task", read(d.ID, taskOf(d.ID, "plain")), "note")
}

// TestSeedClaudeSettingsReachTheTurn (issue 21 item 10, R7.10): a Claude
// session's auto_compact_window and thinking_* take effect on its next turn:
// an exec provider marked claude gets them as RELAY_AUTO_COMPACT_WINDOW,
// RELAY_THINKING and RELAY_THINKING_DISPLAY; a DeepSeek-style provider gets
// the window (its "auto" as 400,000 tokens) and no thinking; any other
// provider gets none of them.
func TestSeedClaudeSettingsReachTheTurn(t *testing.T) {
	show := []string{"/bin/sh", "-c", `echo "acw=$RELAY_AUTO_COMPACT_WINDOW think=$RELAY_THINKING disp=$RELAY_THINKING_DISPLAY"`}
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "claude-api", Name: "Claude API", Type: config.TypeExec, Command: show, Models: []string{"m1"}, Claude: true},
			config.Provider{ID: "deepseek", Name: "DeepSeek", Type: config.TypeExec, Command: show, Models: []string{"m1"},
				CompactWindowZero: 400000, AlwaysThinks: true},
			config.Provider{ID: "plain", Name: "Plain", Type: config.TypeExec, Command: show, Models: []string{"m1"}})
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	// The conversation's first create_session asks the owner once.
	first, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, "allow")
	mustEnvOK(t, first)
	for _, c := range []struct {
		prov, before, after string
	}{
		{"claude-api", "acw= think= disp=", "acw=200000 think=off disp=summarized"},
		{"deepseek", "acw=400000 think= disp=", "acw=200000 think= disp="},
		{"plain", "acw= think= disp=", "acw= think= disp="},
	} {
		// Started by this conversation, so update_session needs no card.
		env := m.MustOK(map[string]any{"action": "create_session", "relay": "this", "text": "one", "provider": c.prov, "wait_seconds": 15})
		if env["status"] != "done" || obj(t, env["reply"], "reply")["text"] != c.before {
			t.Errorf("%s before update_session: %v, want reply %q", c.prov, env, c.before)
		}
		sid := str(env["session"])
		m.MustOK(map[string]any{"action": "update_session", "relay": "this", "session": sid,
			"auto_compact_window": 200000, "thinking_enabled": "off", "thinking_display": "summarized"})
		if turn := r.WaitTurn(r.Message(sid, "two"), 30*time.Second, "done", "error"); turn.Reply != c.after {
			t.Errorf("%s after update_session: reply %q (%s), want %q", c.prov, turn.Reply, turn.Error, c.after)
		}
	}
}
