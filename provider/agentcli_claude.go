package provider

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// claudeDialect drives Claude Code (claude -p, stream-json).
//
// First turn: --session-id UUID (the relay picks it); later turns: --resume
// UUID. The MCP config file (R11.2 shape) goes to --mcp-config with
// --strict-mcp-config, and relay_tool is pre-allowed with --allowedTools
// mcp__relay__relay_tool (without it -p mode refuses the call). Mode plan:
// --permission-mode plan.
type claudeDialect struct{}

func (claudeDialect) defaultCommand() []string { return []string{"claude"} }

func (claudeDialect) prepare(p *CLI, t Turn, model string, tf *turnFiles) ([]string, []string, error) {
	cfg, err := p.mcpConfigFile(t, tf) // a file naming no server when agent sessions are off
	if err != nil {
		return nil, nil, fmt.Errorf("MCP config: %w", err)
	}
	args := []string{"-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages",
		"--mcp-config=" + cfg, "--strict-mcp-config"}
	if mcpOn(t) {
		args = append(args, "--allowedTools=mcp__relay__relay_tool")
	}
	if t.AgentSession != "" {
		args = append(args, "--resume="+t.AgentSession)
	} else {
		args = append(args, "--session-id="+newUUID())
	}
	if model != "" {
		args = append(args, "--model="+model)
	}
	if t.Effort != "" {
		args = append(args, "--effort="+t.Effort)
	}
	if t.Mode == "plan" {
		args = append(args, "--permission-mode=plan")
	}
	args = append(args, p.c.Args...)
	args = append(args, "--", t.Prompt)
	return args, claudeSettingsEnv(t), nil
}

// claudeSettingsEnv passes update_session's Claude settings to Claude Code
// (R7.10): the auto-compact window in tokens, and thinking turned off (no
// thinking tokens); "on" and "" leave Claude Code's own default.
func claudeSettingsEnv(t Turn) []string {
	var env []string
	if t.AutoCompactWindow > 0 {
		env = append(env, "CLAUDE_CODE_AUTO_COMPACT_WINDOW="+strconv.Itoa(t.AutoCompactWindow))
	}
	if t.Thinking == "off" {
		env = append(env, "MAX_THINKING_TOKENS=0")
	}
	return env
}

func (claudeDialect) event(ev map[string]any, s *stream) {
	if handle := claudeEvents[jstr(ev, "type")]; handle != nil {
		handle(ev, s)
	}
}

// claudeEvents read Claude Code's stream-json events, by type.
var claudeEvents = map[string]func(ev map[string]any, s *stream){
	"system":           claudeSystem,
	"stream_event":     claudeStreamEvent,
	"assistant":        claudeAssistant,
	"user":             claudeUser,
	"rate_limit_event": claudeRateLimit,
	"result":           claudeResult,
}

// claudeSystem: the init event names the conversation and the model.
func claudeSystem(ev map[string]any, s *stream) {
	if jstr(ev, "subtype") == "init" {
		s.agentSession(jstr(ev, "session_id"))
		s.ranModel(jstr(ev, "model"))
	}
}

// claudeStreamEvent: a partial message's start and text deltas.
func claudeStreamEvent(ev map[string]any, s *stream) {
	e := jmap(ev, "event")
	switch jstr(e, "type") {
	case "message_start":
		s.newSegment()
	case "content_block_delta":
		if jstr(e, "delta", "type") == "text_delta" {
			s.deltas = true
			s.appendText(jstr(e, "delta", "text"))
		}
	}
}

// claudeAssistant: a whole assistant message, its text (unless it came as
// deltas) and its tool calls.
func claudeAssistant(ev map[string]any, s *stream) {
	content, _ := jmap(ev, "message")["content"].([]any)
	for _, c := range content {
		b, _ := c.(map[string]any)
		switch jstr(b, "type") {
		case "text":
			if !s.deltas {
				s.newSegment()
				s.appendText(jstr(b, "text"))
			}
		case "tool_use":
			s.toolCall(jstr(b, "id"), jstr(b, "name"), b["input"])
		}
	}
}

// claudeUser: the tool results the CLI hands the model.
func claudeUser(ev map[string]any, s *stream) {
	content, _ := jmap(ev, "message")["content"].([]any)
	for _, c := range content {
		if b, _ := c.(map[string]any); jstr(b, "type") == "tool_result" {
			s.toolDone(jstr(b, "tool_use_id"))
		}
	}
}

// claudeRateLimit: a rejected request ends the turn with the limit, its
// kind and when it resets.
func claudeRateLimit(ev map[string]any, s *stream) {
	info := jmap(ev, "rate_limit_info")
	if jstr(info, "status") != "rejected" {
		return
	}
	why := "Claude usage limit reached"
	if kind := jstr(info, "rateLimitType"); kind != "" {
		why += " (" + kind + ")"
	}
	if at := jnum(info, "resetsAt"); at > 0 {
		why += "; resets at " + time.Unix(int64(at), 0).UTC().Format(time.RFC3339)
	}
	s.limited(why)
}

// claudeResult: the final result, its usage and cost, and its error.
func claudeResult(ev map[string]any, s *stream) {
	s.agentSession(jstr(ev, "session_id"))
	u := jmap(ev, "usage")
	in := jnum(u, "input_tokens") + jnum(u, "cache_creation_input_tokens") + jnum(u, "cache_read_input_tokens")
	s.setUsage(int64(in), int64(jnum(u, "output_tokens")), jnum(ev, "total_cost_usd"))
	text := jstr(ev, "result")
	if isErr, _ := ev["is_error"].(bool); isErr || (jstr(ev, "subtype") != "" && jstr(ev, "subtype") != "success") {
		s.failOrLimit(claudeErrorText(ev, text))
	}
	s.result(text)
}

// claudeErrorText is a failed result's message: its text, else its
// errors, else its subtype.
func claudeErrorText(ev map[string]any, text string) string {
	msg := text
	if errs, _ := ev["errors"].([]any); msg == "" && len(errs) > 0 {
		parts := make([]string, 0, len(errs))
		for _, e := range errs {
			if es, ok := e.(string); ok {
				parts = append(parts, es)
			}
		}
		msg = strings.Join(parts, "; ")
	}
	if msg == "" {
		msg = jstr(ev, "subtype")
	}
	return msg
}

// resumeFailed: "No conversation found with session ID: …" (measured, 2.1.332).
func (claudeDialect) resumeFailed(msg string) bool {
	return strings.Contains(msg, "No conversation found")
}
