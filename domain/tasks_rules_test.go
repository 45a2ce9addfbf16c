package domain

// Tasks and the activity line (R7.6, R17.3, R19.3; issues 13 and 21),
// moved down from relaytest: the seed's task types, read_task_output's
// notes, the 🛰️ line of each relay_tool call a session makes in its turn.

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/internal/testwait"
)

// tskID is the id of sid's task described desc.
func (f *fixture) tskID(sid, desc string) string {
	f.t.Helper()
	tasks, err := f.st.Tasks(f.ctx, sid)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.Description == desc {
			return tk.ID
		}
	}
	f.t.Fatalf("no task %q of %s: %v", desc, sid, tasks)
	return ""
}

// tskPoll checks cond every few milliseconds until it holds (what the
// agent does in its own goroutines: a held task's output handed over, a
// key's expiry in the store); reaching the 30 s deadline fails.
func (f *fixture) tskPoll(what string, cond func() bool) {
	f.t.Helper()
	// Every 5 ms: the agent's goroutine works meanwhile; no clock moves.
	testwait.Eventually(f.t, 30*time.Second, 5*time.Millisecond, cond, "%s: not within 30 s", what)
}

// Issue 13: task types are the names of the seed's example — `local_bash`
// for a shell command, `local_agent` for a sub-agent — in read_session,
// list_sessions and read_task_output.
func TestRulesTaskTypesAsInTheSeed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "reader"})
	b := f.session(NewSession{Title: "worker"})
	f.prompt(b, script(
		map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"x"}, "line_ms": 600000, "background": true}},
		map[string]any{"subagent": map[string]any{"description": "explore repo", "ms": 600000}},
		map[string]any{"reply": "started"}))
	f.run()
	t.Cleanup(func() { _, _ = f.r.OwnerStop(f.ctx, b) })

	typesOf := func(tasks any) map[string]any {
		out := map[string]any{}
		l, _ := tasks.([]any)
		for _, x := range l {
			tk, _ := x.(map[string]any)
			out[fmt.Sprint(tk["description"])] = tk["type"]
		}
		return out
	}
	want := map[string]any{"npm test": "local_bash", "explore repo": "local_agent"}
	rs := f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": b, "last": 1})
	if diff := cmp.Diff(want, typesOf(rs["tasks"])); diff != "" {
		t.Errorf("read_session types (-want +got):\n%s", diff)
	}
	ls := f.ok(a, map[string]any{"action": "list_sessions", "relay": "this"})
	if diff := cmp.Diff(want, typesOf(actByID(ls["sessions"], b)["tasks"])); diff != "" {
		t.Errorf("list_sessions types (-want +got):\n%s", diff)
	}
	env := f.ok(a, map[string]any{"action": "read_task_output", "relay": "this", "session": b, "task_id": f.tskID(b, "npm test")})
	tk, _ := env["task"].(map[string]any)
	if diff := cmp.Diff("local_bash", tk["type"]); diff != "" {
		t.Errorf("read_task_output type (-want +got):\n%s", diff)
	}
}

// Issue 21 item 12 (R7.6, the seed's read_task_output): each of the note's
// cases — only the end exists, the output is gone, a sub-agent, and the
// agent's process was asked for the output (a task whose output stays in the
// agent until asked, the scripted agent's held task) and the call should be
// repeated in a few seconds, after which the output is there.
func TestRulesTaskReadTaskOutputNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	read := func(sid, tid string) map[string]any {
		return f.ok(a, map[string]any{"action": "read_task_output", "relay": "this", "session": sid, "task_id": tid})
	}

	// Only the end is kept.
	long := make([]string, 5003)
	for i := range long {
		long[i] = fmt.Sprintf("line %d", i+1)
	}
	b := f.session(NewSession{Title: "builder"})
	f.prompt(b, script(
		map[string]any{"task": map[string]any{"description": "long", "lines": long, "exit": 0}},
		map[string]any{"task": map[string]any{"description": "short", "lines": []string{"one", "two"}, "exit": 0}},
		map[string]any{"subagent": map[string]any{"description": "helper", "ms": 0}},
	))
	f.run()
	env := read(b, f.tskID(b, "long"))
	if diff := cmp.Diff([]any{"Only the end of the output is kept (the last 5000 of 5003 lines).", true}, []any{env["note"], env["truncated"]}); diff != "" {
		t.Errorf("only the end: note, truncated (-want +got):\n%s", diff)
	}
	// A sub-agent.
	helper := f.tskID(b, "helper")
	if diff := cmp.Diff("A sub-agent writes no output to read; its status is shown.", read(b, helper)["note"]); diff != "" {
		t.Errorf("sub-agent note (-want +got):\n%s", diff)
	}
	// Gone: the task ended within the hour but its output is no longer there.
	short := f.tskID(b, "short")
	actNoKey(t, "short", read(b, short), "note")
	if err := f.st.ExpireTaskOutput(f.ctx, short, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f.tskPoll("the gone note", func() bool { return read(b, short)["note"] == "The output of this task is gone." })

	// Held by the agent's process: the call asks it, says so, and a later call finds the output.
	held := make([]string, 600)
	for i := range held {
		held[i] = fmt.Sprintf("step %d", i+1)
	}
	c := f.session(NewSession{Title: "held"})
	f.prompt(c, script(map[string]any{"task": map[string]any{"description": "npm test", "lines": held, "line_ms": 100,
		"held": true, "background": true}}))
	f.run()
	tid := f.tskID(c, "npm test")
	env = read(c, tid)
	tk, _ := env["task"].(map[string]any)
	if diff := cmp.Diff("running", tk["status"]); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	actHas(t, "asked note", env["note"], "the agent's process was asked; call again in a few seconds")
	f.tskPoll("the held output after asking", func() bool {
		tail, _ := read(c, tid)["tail"].([]any)
		return len(tail) > 0 && tail[0] == "step 1"
	})
	// An ordinary running task's output is the relay's: no such note.
	d := f.session(NewSession{Title: "plain"})
	f.prompt(d, script(map[string]any{"task": map[string]any{"description": "plain", "lines": held, "line_ms": 100,
		"background": true}}))
	f.run()
	actNoKey(t, "plain running task", read(d, f.tskID(d, "plain")), "note")
	t.Cleanup(func() {
		_, _ = f.r.OwnerStop(f.ctx, c)
		_, _ = f.r.OwnerStop(f.ctx, d)
	})
}

// Issue 21 item 9 (R17.3, R19.3; the seed's "Der Tool-Aufruf in der
// Antwort"): every relay_tool call a session makes during its turn gets one
// 🛰️ line — the relay writes it: each call of a scripted turn, a refused
// one too, in order; an external session's calls (its agent has no turns
// the relay runs: each call is its activity); none for a call outside a
// turn. (exec over /mcp and openai: relaytest's
// TestSeedRelayWritesTheActivityLineOfEveryCall.)
func TestRulesTaskActivityLineOfEveryCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	target := f.session(NewSession{Title: "target"})

	// Scripted: three calls in one turn, one of them refused, in order.
	a := f.session(NewSession{Title: "scripted"})
	mid := f.prompt(a, script(
		map[string]any{"tool": map[string]any{"action": "list_sessions", "relay": "this"}},
		map[string]any{"tool": map[string]any{"action": "read_session", "relay": "this", "session": target}},
		map[string]any{"tool": map[string]any{"action": "nope", "relay": "box", "session": "abcdef0123456789"}},
	))
	f.run()
	if res := f.toolResults(mid); len(res) != 3 {
		t.Fatalf("%d tool results, want 3", len(res))
	}
	want := []string{"🛰️ list_sessions → desk", "🛰️ read_session → desk session " + target[:8], "🛰️ nope → box session abcdef01"}
	if diff := cmp.Diff(want, f.r2Texts(a, "activity")); diff != "" {
		t.Errorf("scripted lines (-want +got):\n%s", diff)
	}

	// Outside a turn: no line.
	f.ok(a, map[string]any{"action": "list_sessions", "relay": "this"})
	if diff := cmp.Diff(want, f.r2Texts(a, "activity")); diff != "" {
		t.Errorf("after a call outside a turn (-want +got):\n%s", diff)
	}

	// An external session: each call is its activity.
	x := f.session(NewSession{Provider: ProviderExternal, Title: "my terminal agent"})
	f.ok(x, map[string]any{"action": "read_session", "relay": "this", "session": target})
	if diff := cmp.Diff([]string{"🛰️ read_session → desk session " + target[:8]}, f.r2Texts(x, "activity")); diff != "" {
		t.Errorf("external lines (-want +got):\n%s", diff)
	}
}
