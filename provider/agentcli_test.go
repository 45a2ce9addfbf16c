package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cliHost is a fake Host that also records activity lines and the stored
// CLI conversation id.
type cliHost struct {
	execHost
	mu2        sync.Mutex
	activities []string
	agentSess  []string
}

func (h *cliHost) Activity(line string) {
	h.mu2.Lock()
	h.activities = append(h.activities, line)
	h.mu2.Unlock()
}

func (h *cliHost) SetAgentSession(id string) {
	h.mu2.Lock()
	h.agentSess = append(h.agentSess, id)
	h.mu2.Unlock()
}

// fakeCLI is a claude-code provider whose "binary" is a /bin/sh script.
func fakeCLI(t *testing.T, typ, body string, mod func(c *CLIConfig)) *CLI {
	t.Helper()
	c := CLIConfig{ID: "fake", Name: "Fake", Type: typ, Command: []string{"/bin/sh", script(t, body)},
		StateDir: t.TempDir(), Models: []string{"m1"}, DefaultModel: "m1"}
	if mod != nil {
		mod(&c)
	}
	p, err := NewCLI(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(t *testing.T, p *CLI, turn Turn) (Result, *cliHost, error) {
	t.Helper()
	h := &cliHost{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.Run(ctx, turn, h)
	return res, h, err
}

const claudeStream = `
echo '{"type":"system","subtype":"init","session_id":"11111111-2222-4333-8444-555555555555"}'
echo '{"type":"stream_event","event":{"type":"message_start"}}'
echo '{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"Let me "}}}'
echo '{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"look."}}}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"tu1","name":"mcp__relay__relay_tool","input":{"action":"send","relay":"this","session":"abcdef0123456789"}}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"tu2","name":"mcp__relay__relay_tool","input":{"action":"list_sessions","relay":"box"}}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"tu3","name":"Bash","input":{"command":"ls"}}]}}'
echo 'not json at all'
echo '{"type":"stream_event","event":{"type":"message_start"}}'
echo '{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"Done."}}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"11111111-2222-4333-8444-555555555555","total_cost_usd":0.25,"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":3,"output_tokens":4}}'
`

// R17.3: the stream's events become partial text, activity lines, the
// reply, usage and the stored conversation id.
func TestCLIClaudeStream(t *testing.T) {
	p := fakeCLI(t, TypeClaudeCode, claudeStream, nil)
	turn := execTurn(t)
	turn.Relay = "desk"
	res, h, err := runCLI(t, p, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Done." || res.Model != "m-big" {
		t.Fatalf("result %+v", res)
	}
	if res.Usage != (Usage{InputTokens: 18, OutputTokens: 4, CostUSD: 0.25}) {
		t.Fatalf("usage %+v", res.Usage)
	}
	// The relay_tool calls' 🛰️ lines are the relay's (it sees each call): none from the provider.
	if len(h.activities) != 0 {
		t.Fatalf("activities %q, want none", h.activities)
	}
	if !slices.Equal(h.agentSess, []string{"11111111-2222-4333-8444-555555555555"}) {
		t.Fatalf("agent session %q", h.agentSess)
	}
	parts := h.got()
	if len(parts) == 0 || !strings.Contains(parts[len(parts)-1], "Let me look.") || !strings.Contains(parts[len(parts)-1], "not json at all") ||
		!strings.HasSuffix(parts[len(parts)-1], "Done.") {
		t.Fatalf("partials %q", parts)
	}
}

// R17.2, R17.4: Claude Code's flags: first turn --session-id, later --resume;
// the MCP config and the pre-allowed tool; plan mode; args before the prompt.
func TestCLIClaudeArgs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "argv")
	body := `for a in "$@"; do printf '%s\n' "$a"; done > "$OUT"
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok"}'`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) {
		c.Env = map[string]string{"OUT": out}
		c.Args = []string{"--max-turns", "5"}
	})
	read := func() []string { return argvLines(t, out) }
	turn := execTurn(t)
	turn.Prompt = "-rf everything"
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	argv := read()
	for _, w := range []string{"-p", "stream-json", "--verbose", "--strict-mcp-config", "--allowedTools=mcp__relay__relay_tool", "--model=m-big", "--effort=high"} {
		if !slices.Contains(argv, w) {
			t.Fatalf("argv %q lacks %q", argv, w)
		}
	}
	if i := slices.Index(argv, "--max-turns"); i < 0 || argv[len(argv)-2] != "--" || argv[len(argv)-1] != "-rf everything" || i > len(argv)-3 {
		t.Fatalf("args and prompt: %q", argv)
	}
	var sid string
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--session-id="); ok {
			sid = v
		}
		if strings.HasPrefix(a, "--resume") || strings.HasPrefix(a, "--permission-mode") {
			t.Fatalf("first turn: %q", argv)
		}
	}
	if len(sid) != 36 {
		t.Fatalf("no --session-id UUID in %q", argv)
	}
	turn.AgentSession, turn.Mode, turn.MCPURL = sid, "plan", ""
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	argv = read()
	if !slices.Contains(argv, "--resume="+sid) || !slices.Contains(argv, "--permission-mode=plan") || slices.Contains(argv, "--allowedTools=mcp__relay__relay_tool") {
		t.Fatalf("later turn, plan, agent sessions off: %q", argv)
	}
	for _, a := range argv {
		if strings.HasPrefix(a, "--session-id") {
			t.Fatalf("resumed turn names a new session: %q", argv)
		}
	}
}

// R17.2, R17.4: Codex's flags: exec --json first, exec resume … THREAD PROMPT later,
// the -c MCP overrides each time, read-only sandbox in plan mode.
func TestCLICodexArgsAndStream(t *testing.T) {
	out := filepath.Join(t.TempDir(), "argv")
	body := `for a in "$@"; do printf '%s\n' "$a"; done > "$OUT"
echo '{"type":"thread.started","thread_id":"th-1"}'
echo '{"type":"turn.started"}'
echo '{"type":"item.started","item":{"id":"i1","type":"mcp_tool_call","server":"relay","tool":"relay_tool","arguments":{"action":"read_session","session":"0123456789ab"},"status":"in_progress"}}'
echo '{"type":"item.completed","item":{"id":"i1","type":"mcp_tool_call","server":"relay","tool":"relay_tool","arguments":{"action":"read_session","session":"0123456789ab"},"status":"completed"}}'
echo '{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"All good."}}'
echo '{"type":"turn.completed","usage":{"input_tokens":30,"cached_input_tokens":10,"output_tokens":6}}'`
	p := fakeCLI(t, TypeCodex, body, func(c *CLIConfig) { c.Env = map[string]string{"OUT": out} })
	turn := execTurn(t)
	turn.Relay = "desk"
	res, h, err := runCLI(t, p, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "All good." || res.Usage.InputTokens != 30 || res.Usage.OutputTokens != 6 {
		t.Fatalf("result %+v", res)
	}
	if len(h.activities) != 0 || !slices.Equal(h.agentSess, []string{"th-1"}) {
		t.Fatalf("activities %q sessions %q", h.activities, h.agentSess)
	}
	joined := strings.Join(argvLines(t, out), " ")
	for _, w := range []string{"exec --json --skip-git-repo-check", `mcp_servers.relay.url="http://127.0.0.1:7777/mcp"`,
		`mcp_servers.relay.bearer_token_env_var="RELAY_TOKEN"`, `mcp_servers.relay.default_tools_approval_mode="approve"`,
		`model_reasoning_effort="high"`, "--model=m-big", "-- hello there"} {
		if !strings.Contains(joined, w) {
			t.Fatalf("argv %q lacks %q", joined, w)
		}
	}
	if strings.Contains(joined, "tok-abc") {
		t.Fatalf("the token is on the command line: %q", joined)
	}
	turn.AgentSession, turn.Mode = "th-1", "plan"
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	joined = strings.Join(argvLines(t, out), " ")
	if !strings.HasPrefix(joined, "exec resume --json") || !strings.HasSuffix(joined, "-- th-1 hello there") ||
		!strings.Contains(joined, `sandbox_mode="read-only"`) || !strings.Contains(joined, "mcp_servers.relay.url") {
		t.Fatalf("resume argv %q", joined)
	}
}

// R17.2, R17.4: Gemini CLI: a settings file in the session's GEMINI_CLI_HOME,
// --session-id first, --resume later, plan mode.
func TestCLIGeminiArgsAndStream(t *testing.T) {
	out := filepath.Join(t.TempDir(), "argv")
	body := `for a in "$@"; do printf '%s\n' "$a"; done > "$OUT"
printf 'GEMINI_CLI_HOME=%s\n' "$GEMINI_CLI_HOME" >> "$OUT"
echo '{"type":"init","session_id":"aaaaaaaa-2222-4333-8444-555555555555","model":"m1"}'
echo '{"type":"message","role":"user","content":"hello there"}'
echo '{"type":"message","role":"assistant","content":"Checking","delta":true}'
echo '{"type":"tool_use","tool_name":"mcp_relay_relay_tool","tool_id":"t1","parameters":{"action":"usage"}}'
echo '{"type":"tool_result","tool_id":"t1","status":"success"}'
echo '{"type":"message","role":"assistant","content":"Fine ","delta":true}'
echo '{"type":"message","role":"assistant","content":"indeed.","delta":true}'
echo '{"type":"result","status":"success","stats":{"input_tokens":12,"output_tokens":3}}'`
	var state string
	p := fakeCLI(t, TypeGeminiCLI, body, func(c *CLIConfig) { c.Env = map[string]string{"OUT": out}; state = c.StateDir })
	turn := execTurn(t)
	turn.Relay = "desk"
	res, h, err := runCLI(t, p, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Fine indeed." || res.Usage.InputTokens != 12 || res.Usage.OutputTokens != 3 {
		t.Fatalf("result %+v", res)
	}
	if len(h.activities) != 0 || !slices.Equal(h.agentSess, []string{"aaaaaaaa-2222-4333-8444-555555555555"}) {
		t.Fatalf("activities %q sessions %q", h.activities, h.agentSess)
	}
	b, _ := os.ReadFile(out)
	joined := string(b)
	home := GeminiHome(state, turn.SessionID)
	for _, w := range []string{"--output-format=stream-json", "--model=m-big", "--session-id=", "--prompt=hello there", "GEMINI_CLI_HOME=" + home} {
		if !strings.Contains(joined, w) {
			t.Fatalf("argv %q lacks %q", joined, w)
		}
	}
	set, err := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"httpUrl": "http://127.0.0.1:7777/mcp"`, `"Authorization": "Bearer ${RELAY_TOKEN}"`, `"trust": true`, `"selectedType": "gemini-api-key"`} {
		if !strings.Contains(string(set), w) {
			t.Fatalf("settings %s lack %s", set, w)
		}
	}
	if strings.Contains(string(set), "tok-abc") {
		t.Fatalf("the token is in the settings file")
	}
	turn.AgentSession, turn.Mode = "aaaaaaaa-2222-4333-8444-555555555555", "plan"
	if _, _, err := runCLI(t, p, turn); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(out)
	if !strings.Contains(string(b), "--resume=aaaaaaaa-2222-4333-8444-555555555555") || !strings.Contains(string(b), "--approval-mode=plan") {
		t.Fatalf("resume argv %s", b)
	}
}

// R17.5: a CLI that printed its result but does not exit is killed (its
// whole group) after the grace; the turn ends normally with that result.
func TestCLIKilledAfterResult(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	body := `sleep 300 &
echo $! > "$PIDFILE"
echo '{"type":"result","subtype":"success","is_error":false,"result":"the answer","usage":{"input_tokens":2,"output_tokens":1}}'
wait`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) {
		c.ResultGrace = 300 * time.Millisecond
		c.Env = map[string]string{"PIDFILE": pidFile}
	})
	start := time.Now()
	res, _, err := runCLI(t, p, execTurn(t))
	took := time.Since(start)
	if err != nil || res.Text != "the answer" || res.Usage.InputTokens != 2 {
		t.Fatalf("res %+v err %v", res, err)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("took %s, want the 300ms grace (plus the kill)", took)
	}
	waitGone(t, pidFile)
}

// R17.5: a CLI silent for agent_silence is killed; the turn error says so.
func TestCLISilenceWatchdog(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	body := `sleep 300 &
echo $! > "$PIDFILE"
echo '{"type":"system","subtype":"init","session_id":"x"}'
wait`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) {
		c.Silence = 400 * time.Millisecond
		c.Env = map[string]string{"PIDFILE": pidFile}
	})
	start := time.Now()
	_, _, err := runCLI(t, p, execTurn(t))
	te := wantTurnError(t, err)
	if !strings.Contains(te.Msg, "printed nothing for 400ms") || time.Since(start) > 5*time.Second {
		t.Fatalf("err %q after %s", te.Msg, time.Since(start))
	}
	waitGone(t, pidFile)
}

// A stop (ctx cancelled) kills the group and returns the cancellation.
func TestCLIStopKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	body := `sleep 300 &
echo $! > "$PIDFILE"
echo '{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"partial"}}}'
wait`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) { c.Env = map[string]string{"PIDFILE": pidFile} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &cliHost{}
	h.onPartial = func(string) { cancel() }
	res, err := p.Run(ctx, execTurn(t), h)
	if !errors.Is(err, context.Canceled) || res.Text != "partial" {
		t.Fatalf("res %+v err %v", res, err)
	}
	waitGone(t, pidFile)
}

// A usage limit ends the turn with its reason and sets Result.Paused (R17.3).
func TestCLIUsageLimit(t *testing.T) {
	body := `echo '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"five_hour","resetsAt":1900000000}}'
echo '{"type":"result","subtype":"success","is_error":true,"result":"Claude AI usage limit reached|1900000000"}'`
	p := fakeCLI(t, TypeClaudeCode, body, nil)
	res, _, err := runCLI(t, p, execTurn(t))
	te := wantTurnError(t, err)
	if !strings.Contains(te.Msg, "usage or rate limit") || !strings.Contains(res.Paused, "five_hour") {
		t.Fatalf("err %q paused %q", te.Msg, res.Paused)
	}
}

// An error result is a turn error with the CLI's words; a failed exit
// without a result carries the end of stderr.
func TestCLIErrors(t *testing.T) {
	p := fakeCLI(t, TypeClaudeCode, `echo '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"boom"}'`, nil)
	_, _, err := runCLI(t, p, execTurn(t))
	if te := wantTurnError(t, err); !strings.Contains(te.Msg, "boom") {
		t.Fatalf("err %q", te.Msg)
	}
	p = fakeCLI(t, TypeCodex, `echo 'bad flag' >&2; exit 2`, nil)
	_, _, err = runCLI(t, p, execTurn(t))
	if te := wantTurnError(t, err); !strings.Contains(te.Msg, "exit status 2: bad flag") {
		t.Fatalf("err %q", te.Msg)
	}
}

// R17.1: a binary that cannot be found: the provider is unavailable (not an error).
func TestCLIUnavailable(t *testing.T) {
	p, err := NewCLI(CLIConfig{ID: "cc", Type: TypeClaudeCode, Command: []string{"no-such-claude-binary-xyz"}})
	if err != nil {
		t.Fatal(err)
	}
	in := p.Info()
	if in.Status != StatusUnavailable || !strings.Contains(in.StatusReason, `"no-such-claude-binary-xyz" was not found on PATH`) {
		t.Fatalf("info %+v", in)
	}
	_, _, err = runCLI(t, p, execTurn(t))
	_ = wantTurnError(t, err)
	if _, err := NewCLI(CLIConfig{ID: "x", Type: "nope"}); err == nil {
		t.Fatal("unknown type accepted")
	}
	d, _ := NewCLI(CLIConfig{ID: "g", Type: TypeGeminiCLI})
	if d.c.Command[0] != "gemini" {
		t.Fatalf("default command %q", d.c.Command)
	}
}

func TestActivityLine(t *testing.T) {
	for _, c := range []struct {
		args any
		want string
	}{
		{map[string]any{"action": "send", "relay": "this", "session": "0123456789abcdef"}, "🛰️ send → desk session 01234567"},
		{map[string]any{"action": "relay_info", "relay": "box"}, "🛰️ relay_info → box"},
		{`{"action":"stop","session":"abc"}`, "🛰️ stop → desk session abc"},
		{nil, "🛰️ relay_tool → desk"},
	} {
		if got := ActivityLine("desk", c.args); got != c.want {
			t.Errorf("ActivityLine(%v) = %q, want %q", c.args, got, c.want)
		}
	}
}

func waitGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return processGone(pid) }, fmt.Sprintf("process %d of the CLI's group to end", pid))
}

// R17.2: a stored conversation that cannot be resumed (the CLI's own store
// was cleared) does not fail every later turn: the turn starts a fresh one
// and the prompt says so.
func TestCLIResumeFailsStartsFresh(t *testing.T) {
	out := filepath.Join(t.TempDir(), "argv")
	body := `for a in "$@"; do printf '%s\n' "$a"; done >> "$OUT"
case "$*" in *--resume=*)
  echo '{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"gone","usage":{"input_tokens":0,"output_tokens":0},"errors":["No conversation found with session ID: gone"]}'
  exit 1;;
esac
echo '{"type":"system","subtype":"init","session_id":"fresh"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"hi again","session_id":"fresh","usage":{"input_tokens":3,"output_tokens":2}}'`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) { c.Env = map[string]string{"OUT": out} })
	turn := execTurn(t)
	turn.AgentSession = "gone"
	res, h, err := runCLI(t, p, turn)
	if err != nil || res.Text != "hi again" {
		t.Fatalf("res %+v err %v", res, err)
	}
	if !slices.Equal(h.agentSess, []string{"fresh"}) {
		t.Fatalf("stored %q", h.agentSess)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "[relay: this session's earlier claude-code conversation could not be resumed (The agent reported an error: No conversation found with session ID: gone); this turn starts a new one]\n\nhello there") {
		t.Fatalf("second run's argv:\n%s", b)
	}
	// Any other failure is not retried (the conversation is kept).
	p = fakeCLI(t, TypeClaudeCode, `echo '{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["API Error: Connection error."]}'`, nil)
	_, h, err = runCLI(t, p, turn)
	if te := wantTurnError(t, err); !strings.Contains(te.Msg, "Connection error") || len(h.agentSess) != 0 {
		t.Fatalf("err %v stored %q", err, h.agentSess)
	}
	// A failure after the model was reached is not retried.
	p = fakeCLI(t, TypeClaudeCode, `echo '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500","usage":{"input_tokens":5,"output_tokens":0}}'`, nil)
	_, _, err = runCLI(t, p, turn)
	if te := wantTurnError(t, err); !strings.Contains(te.Msg, "API Error: 500") {
		t.Fatalf("err %v", err)
	}
}

// R17.5: while a relay_tool call of the agent runs (a card can take minutes)
// the CLI's silence is not a hang; after its result it is again.
func TestCLISilenceWhileRelayToolRuns(t *testing.T) {
	body := `echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"tu1","name":"mcp__relay__relay_tool","input":{"action":"send"}}]}}'
sleep 1
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu1","content":"{}"}]}}'
exec sleep 30`
	p := fakeCLI(t, TypeClaudeCode, body, func(c *CLIConfig) { c.Silence = 400 * time.Millisecond })
	start := time.Now()
	_, _, err := runCLI(t, p, execTurn(t))
	te := wantTurnError(t, err)
	if d := time.Since(start); !strings.Contains(te.Msg, "printed nothing") || d < time.Second+400*time.Millisecond || d > 5*time.Second {
		t.Fatalf("err %q after %s, want the silence counted from the tool result (1 s + 400 ms)", te.Msg, d)
	}
}

// R18.4: partial text and the reply stay bounded, however much the CLI streams.
func TestCLIOutputBounded(t *testing.T) {
	chunk := strings.Repeat("x", 1023) + "é"
	delta := `{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"` + chunk + `"}}}`
	big := strings.Repeat("y", MaxReplyBytes+5000)
	body := `i=0; while [ $i -lt 1500 ]; do echo '` + delta + `'; i=$((i+1)); done
echo '{"type":"result","subtype":"success","is_error":false,"result":"` + big + `"}'`
	p := fakeCLI(t, TypeClaudeCode, body, nil)
	res, h, err := runCLI(t, p, execTurn(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range h.got() {
		if len(part) > MaxPartialBytes {
			t.Fatalf("a partial of %d bytes", len(part))
		}
	}
	if len(res.Text) > MaxReplyBytes+200 || !strings.HasPrefix(res.Text, "[relay: the agent printed") {
		t.Fatalf("reply of %d bytes starting %q", len(res.Text), res.Text[:60])
	}
}

// An error event the CLI recovers from (a retried stream) does not fail the
// turn; one that no result follows does, and a limit then pauses.
func TestCLISoftErrors(t *testing.T) {
	p := fakeCLI(t, TypeCodex, `echo '{"type":"thread.started","thread_id":"th"}'
echo '{"type":"error","message":"stream error: 429 Too Many Requests; retrying 1/5"}'
echo '{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"made it"}}'
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'`, nil)
	res, _, err := runCLI(t, p, execTurn(t))
	if err != nil || res.Text != "made it" || res.Paused != "" {
		t.Fatalf("res %+v err %v", res, err)
	}
	p = fakeCLI(t, TypeGeminiCLI, `echo '{"type":"init","session_id":"g"}'
echo '{"type":"error","severity":"error","message":"RESOURCE_EXHAUSTED: quota exceeded"}'
exit 1`, nil)
	res, _, err = runCLI(t, p, execTurn(t))
	if te := wantTurnError(t, err); !strings.Contains(te.Msg, "usage or rate limit") || res.Paused == "" {
		t.Fatalf("res %+v err %v", res, err)
	}
}

// With agent sessions off (no MCP URL) no CLI is handed the relay's MCP server.
func TestCLINoMCPWhenAgentSessionsOff(t *testing.T) {
	for _, typ := range CLITypes {
		out := filepath.Join(t.TempDir(), "argv")
		var state string
		p := fakeCLI(t, typ, `for a in "$@"; do printf '%s\n' "$a"; done > "$OUT"
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","status":"success"}'
echo '{"type":"turn.completed","usage":{}}'`, func(c *CLIConfig) { c.Env = map[string]string{"OUT": out}; state = c.StateDir })
		turn := execTurn(t)
		turn.MCPURL = ""
		if _, _, err := runCLI(t, p, turn); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "relay_tool") || strings.Contains(string(b), "mcp_servers") {
			t.Fatalf("%s argv names the relay's MCP server: %s", typ, b)
		}
		if typ == TypeGeminiCLI {
			set, _ := os.ReadFile(filepath.Join(GeminiHome(state, turn.SessionID), ".gemini", "settings.json"))
			if strings.Contains(string(set), "mcpServers") {
				t.Fatalf("gemini settings: %s", set)
			}
		}
	}
}

// argvLines reads the arguments a fake CLI wrote to path, one a line.
func argvLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}
