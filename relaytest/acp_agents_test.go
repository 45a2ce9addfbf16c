package relaytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest/agentfake"
)

// The acp provider (R22) with real agents, offline: the agent CLI in its ACP
// mode, installed from npm (agentfake.Install), against a fake model API on
// 127.0.0.1.

// acpShellScript is the fake model's behaviour for the ACP end-to-end tests:
//   - a prompt with RUNSHELL: call the CLI's shell tool (shellTool) with
//     shellArgs;
//   - a prompt with CALLTOOL SID: call relay_tool read_session of SID;
//   - after a tool result: "FINAL: " and whether the result holds
//     "shell-says-hi" or an ok relay_tool answer;
//   - any other prompt: "ANSWER: " + the prompt's last line.
func acpShellScript(shellTool string, shellArgs map[string]any) agentfake.Script {
	return func(a agentfake.Ask) agentfake.Step {
		if a.AfterTool {
			switch {
			case strings.Contains(a.ToolResult, "shell-says-hi"):
				return agentfake.Step{Text: "FINAL: the shell said hi", InputTokens: 20, OutputTokens: 5}
			case strings.Contains(a.ToolResult, `"ok":true`) || strings.Contains(a.ToolResult, `\"ok\":true`):
				return agentfake.Step{Text: "FINAL: relay answered ok=true", InputTokens: 20, OutputTokens: 5}
			}
			return agentfake.Step{Text: "FINAL: no luck: " + excerptT(a.ToolResult, 300)}
		}
		if strings.Contains(a.Prompt, "RUNSHELL") {
			return agentfake.Step{Text: "Running it.", Tool: shellArgs, ToolName: shellTool}
		}
		if m := callToolRe.FindStringSubmatch(a.Prompt); m != nil && a.HasRelayTool {
			return agentfake.Step{Text: "Let me look.", Tool: map[string]any{"action": "read_session", "relay": "this", "session": m[1]}}
		}
		lines := strings.Split(strings.TrimSpace(a.Prompt), "\n")
		return agentfake.Step{Text: "ANSWER: " + strings.TrimSpace(lines[len(lines)-1])}
	}
}

// acpE2E is one end-to-end run's relay: a target session to read, the ACP
// session under test, and another session's MCP client that answers its
// questions.
type acpE2E struct {
	r      *Relay
	target Session
	a      Session
	m      *MCP
	fake   *agentfake.Server
}

// startACPE2E starts a relay with prov and the three sessions, and dumps the
// fake model's requests when the test fails.
func startACPE2E(t *testing.T, prov config.Provider, fake *agentfake.Server) *acpE2E {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fake model requests:\n%s", fake.Dump())
		}
	})
	r := Start(t, Options{Config: func(cfg *config.Config) { cfg.Providers = append(cfg.Providers, prov) }})
	e := &acpE2E{r: r, fake: fake}
	e.target = r.NewSession(map[string]any{"title": "target"})
	e.a = r.NewSession(map[string]any{"title": prov.ID, "provider": prov.ID})
	other := r.NewSession(map[string]any{"title": "other"})
	e.m = r.Connect(other.Token, nil)
	return e
}

// turnOneRelayTool runs turn 1: relay_tool through the MCP server handed
// over in session/new, and the relay's own activity line for the call.
func (e *acpE2E) turnOneRelayTool(t *testing.T) {
	t.Helper()
	start := time.Now()
	turn := e.r.WaitTurn(e.r.Message(e.a.ID, "Please CALLTOOL "+e.target.ID+" and report."), 120*time.Second, "done", "error", "stopped")
	t.Logf("turn 1 (relay_tool): %s", time.Since(start).Round(time.Millisecond))
	if turn.Status != "done" || turn.Reply != "FINAL: relay answered ok=true" {
		t.Fatalf("turn 1 ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	acts := e.r.Messages(e.a.ID, "activity")
	want := "🛰️ read_session → desk session " + e.target.ID[:8]
	if len(acts) < 1 || acts[0]["text"] != want {
		t.Fatalf("activity lines %v, want %q first", acts, want)
	}
}

// checkResumed fails unless a model request made since the first before
// carries turn 1's prompt beside turn 2's: the conversation was resumed.
func (e *acpE2E) checkResumed(t *testing.T, before int) {
	t.Helper()
	for _, rq := range e.fake.Requests()[before:] {
		if strings.Contains(string(rq.Body), "RUNSHELL") && strings.Contains(string(rq.Body), "CALLTOOL "+e.target.ID) {
			return
		}
	}
	t.Fatalf("turn 2's model request does not carry turn 1's prompt")
}

// R22.2, R22.3, R22.6 with Gemini CLI --acp: relay_tool handed over in
// session/new (its own permission answered by the relay), a shell command's
// permission request is a question card that another session answers with
// answer_question, and the second turn resumes the conversation in the kept
// process. Gemini CLI runs its shell inside its own process (it does not use
// the client's terminals), so its command is no task here.
func TestACPGeminiCLI(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.GeminiCLI)
	fake := agentfake.Gemini(t, acpShellScript("run_shell_command",
		map[string]any{"command": "mkdir -p out && echo shell-says-hi > out/hi.txt && cat out/hi.txt", "description": "say hi"}))
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings, _ := json.Marshal(map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"general":   map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
	})
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), settings, 0o600); err != nil {
		t.Fatal(err)
	}
	prov := config.Provider{ID: "gemini-acp", Name: "Gemini CLI (ACP)", Type: config.TypeACP,
		Command: []string{bin, "--acp", "-m", "gemini-2.5-flash"}, Models: []string{"gemini-2.5-flash"},
		Env: map[string]string{
			"HOME":                       home,
			"GEMINI_CLI_HOME":            home,
			"GOOGLE_GEMINI_BASE_URL":     fake.URL,
			"GEMINI_API_KEY":             "dummy",
			"GEMINI_CLI_TRUST_WORKSPACE": "true",
		}}
	e := startACPE2E(t, prov, fake)
	r, a, m := e.r, e.a, e.m
	e.turnOneRelayTool(t)

	// Turn 2: the shell command asks permission: a question card that
	// another session answers; the command runs, and the conversation is
	// the same (the model's request carries turn 1's prompt).
	before := len(fake.Requests())
	mid := r.Message(a.ID, "RUNSHELL please")
	q := pendingQuestion(t, m, a.ID)
	if q["kind"] != "ask_user" || !strings.Contains(str(q["question"]), "mkdir -p out") {
		t.Fatalf("question %v, want the command as an ask_user card", q)
	}
	opts, _ := json.Marshal(q["options"])
	if !strings.Contains(string(opts), `"Allow"`) {
		t.Fatalf("question options %s, want Gemini's Allow", opts)
	}
	m.MustOK(map[string]any{"action": "answer_question", "relay": "this", "session": a.ID, "question_id": q["id"], "choices": []string{"Allow"}})
	turn := r.WaitTurn(mid, 120*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || turn.Reply != "FINAL: the shell said hi" {
		t.Fatalf("turn 2 ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	e.checkResumed(t, before)
	found := false
	for _, act := range r.Messages(a.ID, "activity") {
		if strings.HasPrefix(str(act["text"]), "🔧 ") && strings.Contains(str(act["text"]), "completed") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no activity line for the shell tool call: %v", r.Messages(a.ID, "activity"))
	}
}

// R22.3, R22.4 with Zed's claude-code-acp adapter over Claude Code: the
// relay offers terminals, so the adapter runs Claude Code's shell commands
// through terminal/create; the command's permission request is a question
// card that another session answers with answer_question, the command runs
// as a task of the session whose output read_task_output reads, and the
// second turn resumes the conversation.
func TestACPClaudeCodeAdapter(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.ClaudeCodeACP)
	fake := agentfake.Anthropic(t, acpShellScript("mcp__acp__Bash",
		map[string]any{"command": "mkdir -p out && echo shell-says-hi > out/hi.txt && cat out/hi.txt && echo '2 passed, 0 failed'",
			"timeout": 60000, "description": "say hi"}))
	home := t.TempDir()
	prov := config.Provider{ID: "claude-acp", Name: "Claude Code (ACP)", Type: config.TypeACP,
		Command: []string{bin}, Models: []string{"claude-sonnet-4-5"},
		Env: map[string]string{
			"HOME":               home,
			"ANTHROPIC_BASE_URL": fake.URL,
			"ANTHROPIC_API_KEY":  "dummy",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
			"ENABLE_TOOL_SEARCH":                       "false",
			// The adapter starts Claude Code with --dangerously-skip-permissions
			// (it asks the client itself), which Claude Code refuses as root
			// outside a sandbox: CI runs as root.
			"IS_SANDBOX": "1",
		}}
	e := startACPE2E(t, prov, fake)
	r, a, m := e.r, e.a, e.m
	e.turnOneRelayTool(t)

	before := len(fake.Requests())
	mid := r.Message(a.ID, "RUNSHELL please")
	q := pendingQuestion(t, m, a.ID)
	opts, _ := json.Marshal(q["options"])
	t.Logf("claude-code-acp permission card: %q options %s", q["question"], opts)
	var allow string
	for _, o := range q["options"].([]any) {
		if s := str(o); strings.HasPrefix(s, "Allow") && allow == "" {
			allow = s
		}
	}
	if q["kind"] != "ask_user" || allow == "" {
		t.Fatalf("question %v, want an ask_user card with an Allow option", q)
	}
	m.MustOK(map[string]any{"action": "answer_question", "relay": "this", "session": a.ID, "question_id": q["id"], "choices": []string{allow}})
	turn := r.WaitTurn(mid, 120*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || turn.Reply != "FINAL: the shell said hi" {
		t.Fatalf("turn 2 ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	tasks := list(t, readSession(m, a.ID, 1)["tasks"], "tasks")
	if len(tasks) != 1 {
		t.Fatalf("tasks %v, want the shell command's terminal", tasks)
	}
	tk := obj(t, tasks[0], "task")
	out := m.MustOK(map[string]any{"action": "read_task_output", "relay": "this", "session": a.ID, "task_id": tk["taskId"]})
	tail, _ := json.Marshal(out["tail"])
	if !strings.Contains(string(tail), "shell-says-hi") || obj(t, out["task"], "task")["status"] != "done" {
		t.Fatalf("read_task_output %v", out)
	}
	if c := obj(t, out["counts"], "counts"); c["passed"] != float64(2) {
		t.Fatalf("counts %v", c)
	}
	e.checkResumed(t, before)
}
