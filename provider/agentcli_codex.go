package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// codexDialect drives Codex (codex exec --json).
//
// First turn: codex exec --json …; the thread id comes in the thread.started
// event and later turns run codex exec resume --json … THREAD_ID PROMPT,
// with every -c override again. relay_tool: -c mcp_servers.relay.url with
// bearer_token_env_var="RELAY_TOKEN" (the token stays in the environment)
// and default_tools_approval_mode="approve" (else "requires approval").
// Mode plan: sandbox_mode="read-only" (the -c form of --sandbox read-only,
// which codex exec resume does not take).
type codexDialect struct{}

func (codexDialect) defaultCommand() []string { return []string{"codex"} }

func (codexDialect) prepare(p *CLI, t Turn, model string, _ *turnFiles) ([]string, []string, error) {
	args := []string{"exec"}
	if t.AgentSession != "" {
		args = append(args, "resume")
	}
	args = append(args, "--json", "--skip-git-repo-check")
	if model != "" {
		args = append(args, "--model="+model)
	}
	if t.Effort != "" {
		args = append(args, "-c", "model_reasoning_effort="+tomlString(t.Effort))
	}
	if t.Mode == "plan" {
		args = append(args, "-c", `sandbox_mode="read-only"`)
	}
	if mcpOn(t) {
		args = append(args,
			"-c", "mcp_servers.relay.url="+tomlString(t.MCPURL),
			"-c", `mcp_servers.relay.bearer_token_env_var="RELAY_TOKEN"`,
			"-c", `mcp_servers.relay.default_tools_approval_mode="approve"`,
			"-c", fmt.Sprintf("mcp_servers.relay.tool_timeout_sec=%d", execMCPTimeoutMs/1000),
		)
	}
	args = append(args, p.c.Args...)
	args = append(args, "--")
	if t.AgentSession != "" {
		args = append(args, t.AgentSession)
	}
	args = append(args, t.Prompt)
	return args, nil, nil
}

func (codexDialect) event(ev map[string]any, s *stream) {
	if handle := codexEvents[jstr(ev, "type")]; handle != nil {
		handle(ev, s)
	}
}

// codexEvents read codex exec's --json events, by type.
var codexEvents = map[string]func(ev map[string]any, s *stream){
	"thread.started": func(ev map[string]any, s *stream) { s.agentSession(jstr(ev, "thread_id")) },
	"item.started":   codexItem,
	"item.updated":   codexItem,
	"item.completed": codexItem,
	"turn.completed": codexTurnCompleted,
	"turn.failed":    codexTurnFailed,
	// Also sent for a retried stream error: it counts only when no
	// turn.completed follows.
	"error": func(ev map[string]any, s *stream) { s.softError(jstr(ev, "message")) },
}

// codexItem: an item's start, update or end: a relay MCP tool call, the
// agent's message (once complete), an error.
func codexItem(ev map[string]any, s *stream) {
	item := jmap(ev, "item")
	completed := jstr(ev, "type") == "item.completed"
	switch jstr(item, "type") {
	case "mcp_tool_call":
		if srv := jstr(item, "server"); srv == "" || srv == "relay" {
			s.toolCall(jstr(item, "id"), jstr(item, "tool"), item["arguments"])
			if completed {
				s.toolDone(jstr(item, "id"))
			}
		}
	case "agent_message":
		if completed {
			s.newSegment()
			s.appendText(jstr(item, "text"))
		}
	case "error":
		s.softError(jstr(item, "message"))
	}
}

// codexTurnCompleted: the turn's end and its tokens.
func codexTurnCompleted(ev map[string]any, s *stream) {
	u := jmap(ev, "usage")
	in, out := codexTurnUsage(s, int64(jnum(u, "input_tokens")), int64(jnum(u, "output_tokens")))
	s.addUsage(in, out, 0)
	s.result(s.segmentText())
}

// codexTurnFailed: the turn's end with its error.
func codexTurnFailed(ev map[string]any, s *stream) {
	s.failOrLimit(jstr(ev, "error", "message"))
	s.result("")
}

// codexTurnUsage turns the thread's running totals that codex exec reports
// in turn.completed (a resumed thread goes on counting) into this turn's
// tokens: the totals less those of the thread's previous turn, kept in
// StateDir/codex/THREAD.usage.
func codexTurnUsage(s *stream, in, out int64) (int64, int64) {
	s.mu.Lock()
	thread := s.agentSess
	s.mu.Unlock()
	if thread == "" || s.stateDir == "" {
		return in, out
	}
	path := filepath.Join(s.stateDir, "codex", safeName(thread)+".usage")
	var prevIn, prevOut int64
	if b, err := os.ReadFile(path); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			prevIn, _ = strconv.ParseInt(f[0], 10, 64)
			prevOut, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
		_ = os.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", in, out)), 0o600)
	}
	if in < prevIn || out < prevOut { // not running totals after all
		return in, out
	}
	return in - prevIn, out - prevOut
}

// resumeFailed: "thread/resume failed: no rollout found for thread id …" (measured, 0.169.0).
func (codexDialect) resumeFailed(msg string) bool {
	return strings.Contains(msg, "no rollout found") || strings.Contains(msg, "thread/resume failed")
}
