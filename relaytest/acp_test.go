package relaytest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// The acp provider (R22) against a fake ACP agent of our own
// (agentfake/acpagent, built on the ACP SDK's agent side), started by the
// relay as a real process speaking JSON-RPC on its stdio.

// fakeACPAgent builds the fake agent once per test binary.
func fakeACPAgent(t *testing.T) string {
	t.Helper()
	return buildBinary(t, "github.com/oar/relay/relaytest/agentfake/acpagent")
}

// acpFake is the fake agent's provider config and its request log.
type acpFake struct {
	state string
	prov  config.Provider
}

func newACPFake(t *testing.T, env map[string]string) *acpFake {
	bin := fakeACPAgent(t)
	state := t.TempDir()
	e := map[string]string{"FAKE_ACP_STATE": state}
	for k, v := range env {
		e[k] = v
	}
	return &acpFake{state: state, prov: config.Provider{ID: "fakeacp", Name: "Fake ACP", Type: config.TypeACP,
		Command: []string{bin}, Models: []string{"fake-1"}, DefaultModel: "fake-1", Env: e}}
}

type acpLogEntry struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
	PID    int            `json:"pid"`
}

// log is what the fake agent was asked, in order.
func (f *acpFake) log(t *testing.T) []acpLogEntry {
	t.Helper()
	fh, err := os.Open(filepath.Join(f.state, "log.jsonl"))
	if err != nil {
		return nil
	}
	defer func() { _ = fh.Close() }() // read only
	var out []acpLogEntry
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e acpLogEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

func (f *acpFake) count(t *testing.T, method string) int {
	n := 0
	for _, e := range f.log(t) {
		if e.Method == method {
			n++
		}
	}
	return n
}

// acpScript is a prompt the fake agent runs as steps.
func acpScript(steps ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{"acp": steps})
	return string(b)
}

func startACP(t *testing.T, f *acpFake, more func(*config.Config)) (*Relay, Options) {
	opts := Options{Config: func(cfg *config.Config) {
		cfg.Providers = append(cfg.Providers, f.prov)
		if more != nil {
			more(cfg)
		}
	}}
	return Start(t, opts), opts
}

func doneTurn(t *testing.T, r *Relay, mid string) string {
	t.Helper()
	turn := r.WaitTurn(mid, 60*time.Second, "done", "error", "stopped")
	if turn.Status != "done" {
		t.Fatalf("turn ended %s: %s (reply %q)", turn.Status, turn.Error, turn.Reply)
	}
	return turn.Reply
}

// R22.1, R22.2, R22.6: the kept ACP session: initialize with the client's
// capabilities, session/new with relay_tool over HTTP, one session/prompt a
// turn in the same process, the streamed partial reply in inFlight, a stop
// as session/cancel, and session/load in a new process after a restart.
func TestACPConversation(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, opts := startACP(t, f, nil)
	target := r.NewSession(map[string]any{"title": "target"})
	a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	watcher := r.Connect(target.Token, nil)

	if got := doneTurn(t, r, r.Message(a.ID, "hello there")); got != "ANSWER: hello there (prompt 1)" {
		t.Fatalf("turn 1 reply %q", got)
	}
	log := f.log(t)
	if len(log) < 3 || log[0].Method != "initialize" || log[1].Method != "session/new" {
		t.Fatalf("first requests %v", log)
	}
	caps, _ := json.Marshal(log[0].Params["clientCapabilities"])
	if !strings.Contains(string(caps), `"readTextFile":true`) || !strings.Contains(string(caps), `"writeTextFile":true`) || !strings.Contains(string(caps), `"terminal":true`) {
		t.Fatalf("initialize declares %s, want fs read/write and terminal", caps)
	}
	if cwd := log[1].Params["cwd"]; cwd != r.Config.DefaultCwd {
		t.Fatalf("session/new cwd %v, want %s", cwd, r.Config.DefaultCwd)
	}
	servers, _ := json.Marshal(log[1].Params["mcpServers"])
	if !strings.Contains(string(servers), `"type":"http"`) || !strings.Contains(string(servers), `"name":"relay"`) ||
		!strings.Contains(string(servers), `"name":"Authorization","value":"Bearer `) {
		t.Fatalf("session/new mcpServers %s, want relay_tool over HTTP with an Authorization header", servers)
	}
	sess, err := r.App.Store().GetSession(context.Background(), a.ID)
	if err != nil || !strings.HasPrefix(sess.AgentSession, "fake-") || sess.AgentProvider != "fakeacp" {
		t.Fatalf("ACP session id not stored: %+v %v", sess, err)
	}
	acpID := sess.AgentSession

	// Turn 2 runs in the same process and ACP session, and calls relay_tool
	// (with this turn's token behind the process's fixed MCP config).
	reply := doneTurn(t, r, r.Message(a.ID, acpScript(map[string]any{"tool": map[string]any{"action": "read_session", "relay": "this", "session": target.ID}})))
	if !strings.HasPrefix(reply, "TOOL: {") && strings.Contains(reply, `"ok":true`) {
		t.Fatalf("turn 2 reply %q, want an ok relay_tool result", reply)
	}
	if n := f.count(t, "initialize"); n != 1 {
		t.Fatalf("%d initialize requests after two turns, want 1 (the process is kept)", n)
	}
	if n := f.count(t, "session/new"); n != 1 {
		t.Fatalf("%d session/new requests after two turns, want 1", n)
	}
	acts := r.Messages(a.ID, "activity")
	want := "🛰️ read_session → desk session " + target.ID[:8]
	if len(acts) != 1 || acts[0]["text"] != want {
		t.Fatalf("activity lines %v, want one %q", acts, want)
	}

	// Turn 3 streams: the first chunk shows in inFlight while the agent is
	// silent; a stop is session/cancel and the turn ends stopped.
	mid := r.Message(a.ID, acpScript(map[string]any{"say": "first part."}, map[string]any{"hang": true}))
	Eventually(t, 30*time.Second, func() bool {
		env := watcher.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": a.ID, "last": 1})
		return strings.Contains(str(env["inFlight"]), "first part.")
	}, "the streamed chunk in inFlight")
	if st := r.Owner("POST", "/api/v1/sessions/"+a.ID+"/stop", nil, nil); st != http.StatusOK {
		t.Fatalf("stop: status %d", st)
	}
	turn := r.WaitTurn(mid, 15*time.Second, "done", "error", "stopped")
	if turn.Status != "stopped" {
		t.Fatalf("turn 3 ended %s (%s), want stopped", turn.Status, turn.Error)
	}
	if n := f.count(t, "session/cancel"); n != 1 {
		t.Fatalf("%d session/cancel notifications, want 1", n)
	}

	// After a relay restart a new process loads the stored ACP session: the
	// agent's count of prompts goes on, and the replayed history is not
	// part of the reply.
	r.Stop()
	opts.Redis = r.Redis
	r = Start(t, opts)
	reply = doneTurn(t, r, r.Message(a.ID, "after restart"))
	if reply != "ANSWER: after restart (prompt 4)" {
		t.Fatalf("turn after restart reply %q, want the loaded conversation's 4th prompt", reply)
	}
	loads := 0
	for _, e := range f.log(t) {
		if e.Method == "session/load" {
			loads++
			if e.Params["sessionId"] != acpID {
				t.Fatalf("session/load of %v, want %s", e.Params["sessionId"], acpID)
			}
		}
	}
	if loads != 1 || f.count(t, "session/new") != 1 {
		t.Fatalf("%d session/load and %d session/new, want 1 and 1", loads, f.count(t, "session/new"))
	}
}

// pendingQuestion waits for a question card of sid and returns it.
func pendingQuestion(t *testing.T, m *MCP, sid string) map[string]any {
	t.Helper()
	var q map[string]any
	Eventually(t, 30*time.Second, func() bool {
		qs := list(t, readSession(m, sid, 1)["pendingQuestions"], "pendingQuestions")
		if len(qs) == 1 {
			q = obj(t, qs[0], "question")
			return true
		}
		return false
	}, "a question in %s", sid)
	return q
}

// R22.3: a permission request is a question card; another agent answers it
// with answer_question, the owner through the console's route; plan mode
// rejects writes without asking.
func TestACPPermission(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, _ := startACP(t, f, nil)
	a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	other := r.NewSession(map[string]any{"title": "other"})
	m := r.Connect(other.Token, nil)
	perm := acpScript(map[string]any{"permission": map[string]any{"title": "rm -rf build", "kind": "execute"}})

	mid := r.Message(a.ID, perm)
	q := pendingQuestion(t, m, a.ID)
	wantEq(t, "question", q, map[string]any{"id": q["id"], "kind": "ask_user", "question": "rm -rf build",
		"options": []any{"Allow for this session", "Allow", "Reject"}})
	m.MustOK(map[string]any{"action": "answer_question", "relay": "this", "session": a.ID, "question_id": q["id"], "choices": []string{"Allow"}})
	if got := doneTurn(t, r, mid); got != "PERMISSION: proceed_once" {
		t.Fatalf("reply %q after Allow", got)
	}
	acts := r.Messages(a.ID, "activity")
	if len(acts) != 1 || acts[0]["text"] != "🔧 rm -rf build: completed" {
		t.Fatalf("activity lines %v, want the tool call's title and status", acts)
	}

	// The owner answers in the console.
	mid = r.Message(a.ID, perm)
	q = pendingQuestion(t, m, a.ID)
	if st := r.Owner("POST", "/api/v1/sessions/"+a.ID+"/questions/"+str(q["id"]), map[string]any{"choices": []string{"Reject"}}, nil); st != http.StatusOK {
		t.Fatalf("owner answer: status %d", st)
	}
	if got := doneTurn(t, r, mid); got != "PERMISSION: cancel" {
		t.Fatalf("reply %q after the owner's Reject", got)
	}

	// Plan mode: a write is rejected by the relay itself; a read still asks.
	p := r.NewSession(map[string]any{"title": "planner", "provider": "fakeacp", "mode": "plan"})
	if got := doneTurn(t, r, r.Message(p.ID, perm)); got != "PERMISSION: cancel" {
		t.Fatalf("plan mode reply %q, want the reject option chosen", got)
	}
	if qs := list(t, readSession(m, p.ID, 1)["pendingQuestions"], "pendingQuestions"); len(qs) != 0 {
		t.Fatalf("plan mode raised questions %v", qs)
	}
	mid = r.Message(p.ID, acpScript(map[string]any{"permission": map[string]any{"title": "read notes.txt", "kind": "read"}}))
	q = pendingQuestion(t, m, p.ID)
	m.MustOK(map[string]any{"action": "answer_question", "relay": "this", "session": p.ID, "question_id": q["id"], "choices": []string{"Allow for this session"}})
	if got := doneTurn(t, r, mid); got != "PERMISSION: proceed_always" {
		t.Fatalf("plan mode read reply %q", got)
	}
}

// R22.4, R22.5: a terminal is a task of the session (read_task_output's
// tail with repeats folded, test counts, masking, exit code, events); its
// folder and the agent's files stay inside the session's folder.
func TestACPTerminalsAndFiles(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, _ := startACP(t, f, func(cfg *config.Config) { cfg.Timing.Coalesce = 0 })
	a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	w := r.NewSession(map[string]any{"title": "watcher"})
	ev2Sub(t, r, w, map[string]any{"sessions": []string{a.ID}, "events": []string{"task_started", "task_failed"}}, true)
	m := r.Connect(a.Token, nil)
	dir := r.Config.DefaultCwd

	cmd := `for i in 1 2 3; do echo same line; done; echo "api_key=sk-verysecretvalue123"; pwd; echo "3 passed, 1 failed"; exit 2`
	reply := doneTurn(t, r, r.Message(a.ID, acpScript(map[string]any{"terminal": map[string]any{"command": "sh", "args": []string{"-c", cmd}}})))
	if !strings.HasPrefix(reply, "TERMINAL exit 2: same line") || !strings.Contains(reply, dir) {
		t.Fatalf("terminal reply %q", reply)
	}
	tasks := list(t, readSession(m, a.ID, 1)["tasks"], "tasks")
	if len(tasks) != 1 {
		t.Fatalf("tasks %v, want the terminal", tasks)
	}
	task := obj(t, tasks[0], "task")
	out := m.MustOK(map[string]any{"action": "read_task_output", "relay": "this", "session": a.ID, "task_id": task["taskId"]})
	tail, _ := json.Marshal(out["tail"])
	if !strings.Contains(string(tail), "same line [×3]") || strings.Contains(string(tail), "verysecret") || !strings.Contains(string(tail), "3 passed, 1 failed") {
		t.Fatalf("read_task_output tail %s", tail)
	}
	tk := obj(t, out["task"], "task")
	if tk["status"] != "failed" || tk["exitCode"] != float64(2) || tk["type"] != "local_bash" {
		t.Fatalf("task %v, want failed with exit code 2", tk)
	}
	counts := obj(t, out["counts"], "counts")
	if counts["passed"] != float64(3) || counts["failed"] != float64(1) {
		t.Fatalf("counts %v", counts)
	}
	ev2WaitCount(t, r, w.ID, "task_started", 1)
	ev2WaitCount(t, r, w.ID, "task_failed", 1)

	// A terminal outside the session's folder is refused.
	reply = doneTurn(t, r, r.Message(a.ID, acpScript(map[string]any{"terminal": map[string]any{"command": "pwd", "cwd": "/"}})))
	if !strings.HasPrefix(reply, "TERMINAL ERROR") || !strings.Contains(reply, "outside the session's folder") {
		t.Fatalf("terminal outside the folder: %q", reply)
	}

	// Files: inside the folder, written and read back; outside, or through a
	// link that leads out, an ACP error.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	reply = doneTurn(t, r, r.Message(a.ID, acpScript(
		map[string]any{"write": map[string]any{"path": filepath.Join(dir, "sub", "notes.txt"), "content": "hello file"}},
		map[string]any{"say": "|"},
		map[string]any{"read": filepath.Join(dir, "sub", "notes.txt")},
		map[string]any{"say": "|"},
		map[string]any{"read": filepath.Join(outside, "secret.txt")},
		map[string]any{"say": "|"},
		map[string]any{"read": filepath.Join(dir, "link", "secret.txt")},
		map[string]any{"say": "|"},
		map[string]any{"write": map[string]any{"path": filepath.Join(dir, "link", "new.txt"), "content": "x"}},
	)))
	parts := strings.Split(reply, "|")
	if len(parts) != 5 || parts[0] != "WROTE" || parts[1] != "READ: hello file" {
		t.Fatalf("file steps %q", reply)
	}
	for _, p := range parts[2:] {
		if !strings.Contains(p, "ERROR") || !strings.Contains(p, "outside the session's folder") {
			t.Fatalf("file access outside the folder not refused: %q", reply)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatalf("a write through a link left the folder")
	}
}

// R22.7, R22.2: usage, stop reasons, an agent that exits, sends garbage or
// stays silent: the turn ends as an error with the reason, and the next turn
// starts a new process that loads the conversation.
func TestACPErrors(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, _ := startACP(t, f, func(cfg *config.Config) { cfg.Timing.AgentSilence = 2 * time.Second })
	a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	m := r.Connect(a.Token, nil)

	// Usage the agent reports counts.
	doneTurn(t, r, r.Message(a.ID, acpScript(map[string]any{"say": "counted"}, map[string]any{"usage": []int{100, 20}})))
	env := m.MustOK(map[string]any{"action": "usage", "relay": "this"})
	var counted map[string]any
	for _, p := range list(t, env["providers"], "providers") {
		if pm := p.(map[string]any); pm["id"] == "fakeacp" {
			counted = pm["counted"].(map[string]any)
		}
	}
	if counted == nil || counted["inputTokens"] != float64(100) || counted["outputTokens"] != float64(20) {
		t.Fatalf("usage %v", counted)
	}

	fail := func(script, want string) {
		t.Helper()
		turn := r.WaitTurn(r.Message(a.ID, script), 60*time.Second, "done", "error", "stopped")
		if turn.Status != "error" || !strings.Contains(turn.Error, want) {
			t.Fatalf("turn %s %q, want an error with %q", turn.Status, turn.Error, want)
		}
	}
	fail(acpScript(map[string]any{"stop": "refusal"}), "stop reason refusal")
	fail(acpScript(map[string]any{"stop": "max_tokens"}), "stop reason max_tokens")
	fail(acpScript(map[string]any{"error": "model overloaded"}), "The agent reported an error: Internal error")

	pids := func() map[int]bool {
		out := map[int]bool{}
		for _, e := range f.log(t) {
			out[e.PID] = true
		}
		return out
	}
	if n := len(pids()); n != 1 {
		t.Fatalf("%d agent processes so far, want 1", n)
	}
	fail(acpScript(map[string]any{"say": "bye"}, map[string]any{"exit": 7}), "The agent (acp) ended with exit status 7: fake agent: exiting as told")
	// The next turn: a new process, the conversation loaded (6 prompts so far).
	if got := doneTurn(t, r, r.Message(a.ID, "still there?")); got != "ANSWER: still there? (prompt 6)" {
		t.Fatalf("turn after the crash %q", got)
	}
	if n := len(pids()); n != 2 || f.count(t, "session/load") != 1 {
		t.Fatalf("%d processes and %d loads after a crash, want 2 and 1", n, f.count(t, "session/load"))
	}
	fail(acpScript(map[string]any{"garbage": "this is not json"}, map[string]any{"hang": true}), "not JSON-RPC and was stopped: this is not json")
	fail(acpScript(map[string]any{"sleep_ms": 20000}), "sent nothing for 2s and was stopped (timing.agent_silence)")
	if got := doneTurn(t, r, r.Message(a.ID, "and now?")); got != "ANSWER: and now? (prompt 9)" {
		t.Fatalf("turn after silence %q", got)
	}
}

// R22.1: an idle session's agent process is stopped after timing.acp_idle;
// the next turn starts a new one that loads the conversation.
func TestACPIdleStop(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, _ := startACP(t, f, func(cfg *config.Config) { cfg.Timing.ACPIdle = time.Second })
	a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	doneTurn(t, r, r.Message(a.ID, "one"))
	pid := f.log(t)[0].PID
	Eventually(t, 20*time.Second, func() bool { return syscall.Kill(pid, 0) != nil },
		"the idle agent process %d to be stopped", pid)
	if got := doneTurn(t, r, r.Message(a.ID, "two")); got != "ANSWER: two (prompt 2)" {
		t.Fatalf("turn after the idle stop %q", got)
	}
	if n := f.count(t, "session/load"); n != 1 || f.count(t, "initialize") != 2 {
		t.Fatalf("%d loads and %d initialize after the idle stop, want 1 and 2", n, f.count(t, "initialize"))
	}
}
