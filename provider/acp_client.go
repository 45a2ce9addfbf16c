package provider

// The client side of ACP: what the agent asks of the relay. The file
// system and the terminals are in acp_fs.go and acp_term.go; here are the
// dispatch with its panic guard (R18.27) and the permission questions
// (R22.3) with the recognition of relay_tool's own calls (R18.28).

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// acpClient is what the ACP connection calls: each of the agent's requests
// and notifications runs in a goroutine of the SDK, where a panic would end
// the relay. Each method recovers one (R18.27): the request is answered
// with an error, the turn ends as an error naming the cause, the agent
// process is stopped, the relay goes on. It implements no optional method
// (extension methods, elicitation, MCP over ACP): the SDK answers those
// "method not found" itself.
type acpClient struct{ pr *acpProc }

var _ acp.Client = acpClient{}

// recovered turns a panic of a handler into the request's error and the
// process's failure.
func (pr *acpProc) recovered(method string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	pr.p.log.Error("acp: a handler of the agent's request panicked", "provider", pr.p.c.ID, "session", pr.sid,
		"method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	pr.fail(fmt.Sprintf("The relay failed on the agent's %s request (%v); the agent (acp) was stopped.", method, v))
	if err != nil {
		*err = acp.NewInternalError(map[string]any{"error": fmt.Sprintf("the relay failed on this request: %v", v)})
	}
}

// fail marks the process failed: its turn ends, it is stopped.
func (pr *acpProc) fail(msg string) {
	pr.failOnce.Do(func() {
		pr.failMsg.Store(&msg)
		close(pr.failed)
	})
}

func (c acpClient) SessionUpdate(ctx context.Context, n acp.SessionNotification) (err error) {
	defer c.pr.recovered(acp.ClientMethodSessionUpdate, &err)
	return c.pr.SessionUpdate(ctx, n)
}

func (c acpClient) RequestPermission(ctx context.Context, req acp.RequestPermissionRequest) (res acp.RequestPermissionResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodSessionRequestPermission, &err)
	return c.pr.RequestPermission(ctx, req)
}

func (c acpClient) ReadTextFile(ctx context.Context, req acp.ReadTextFileRequest) (res acp.ReadTextFileResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodFsReadTextFile, &err)
	return c.pr.ReadTextFile(ctx, req)
}

func (c acpClient) WriteTextFile(ctx context.Context, req acp.WriteTextFileRequest) (res acp.WriteTextFileResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodFsWriteTextFile, &err)
	return c.pr.WriteTextFile(ctx, req)
}

func (c acpClient) CreateTerminal(ctx context.Context, req acp.CreateTerminalRequest) (res acp.CreateTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalCreate, &err)
	return c.pr.CreateTerminal(ctx, req)
}

func (c acpClient) TerminalOutput(ctx context.Context, req acp.TerminalOutputRequest) (res acp.TerminalOutputResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalOutput, &err)
	return c.pr.TerminalOutput(ctx, req)
}

func (c acpClient) WaitForTerminalExit(ctx context.Context, req acp.WaitForTerminalExitRequest) (res acp.WaitForTerminalExitResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalWaitForExit, &err)
	return c.pr.WaitForTerminalExit(ctx, req)
}

func (c acpClient) KillTerminal(ctx context.Context, req acp.KillTerminalRequest) (res acp.KillTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalKill, &err)
	return c.pr.KillTerminal(ctx, req)
}

func (c acpClient) ReleaseTerminal(ctx context.Context, req acp.ReleaseTerminalRequest) (res acp.ReleaseTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalRelease, &err)
	return c.pr.ReleaseTerminal(ctx, req)
}

// RequestPermission is a question card of the session (R22.3).
func (pr *acpProc) RequestPermission(ctx context.Context, req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	pr.touch()
	opts := permOptions(req.Options)
	at := pr.turn()
	if at == nil || len(opts) == 0 {
		return opts.cancelled(), nil
	}
	title, kind, name := at.permissionTool(ctx, req)
	// relay_tool's own calls: the relay checks them itself (cards, modes),
	// told from the request's structured fields, never its text (R18.28).
	if relayToolCall(req, kind, name) {
		r, _ := opts.pick(acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways)
		return r, nil
	}
	if at.t.Mode == "plan" && writeKind(kind) {
		r, _ := opts.pick(acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways)
		return r, nil
	}
	return pr.askPermission(ctx, at, title, opts), nil
}

// permissionTool is the title, kind and agent's name of the tool call a
// permission request is about. Claude Code's adapter gives the name and
// kind only in the tool_call update it sends before the request, codex-acp
// the MCP call's server and tool, both handled by the SDK in another
// goroutine: it waits a moment for it. The request may be the first the
// relay hears of the call (Gemini CLI sends no tool_call first; the
// arguments are its content). Then what the call's updates told (title,
// kind, name), in one look.
func (at *acpTurn) permissionTool(ctx context.Context, req acp.RequestPermissionRequest) (title string, kind acp.ToolKind, name string) {
	id := string(req.ToolCall.ToolCallId)
	name = metaToolName(req.ToolCall.Meta, req.Meta)
	if name == "" && (req.ToolCall.Kind == nil || mcpApproval(req)) {
		at.waitTool(ctx, id)
	}
	if req.ToolCall.Title != nil {
		title = *req.ToolCall.Title
	}
	if req.ToolCall.Kind != nil {
		kind = *req.ToolCall.Kind
	}
	at.tool(id, title, name, kind, toolArgs(req.ToolCall.RawInput, req.ToolCall.Content), "")
	at.mu.Lock()
	if tc := at.tools[id]; tc != nil {
		title, kind, name = tc.title, tc.kind, tc.name
	}
	at.mu.Unlock()
	return title, kind, name
}

// askPermission asks the owner (a question card, R22.3) and answers with
// the option the answer names. The agent's withdrawal of the request
// ends the question; a stopped turn cancels the request (ACP's rule for
// session/cancel).
func (pr *acpProc) askPermission(ctx context.Context, at *acpTurn, title string, opts permOptions) acp.RequestPermissionResponse {
	if title == "" {
		title = "The agent asks for permission"
	}
	qctx, cancel := context.WithCancel(at.ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done(): // the agent withdrew the request, or the connection closed
			cancel()
		case <-qctx.Done():
		}
	}()
	at.wait(1)
	ans, err := at.h.AskUser(qctx, title, opts.names())
	at.wait(-1)
	pr.touch()
	if err != nil {
		return opts.cancelled()
	}
	return opts.answer(ans)
}

// permOptions are the options a permission request offers.
type permOptions []acp.PermissionOption

func (opts permOptions) cancelled() acp.RequestPermissionResponse {
	return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}
}

func selected(o acp.PermissionOption) acp.RequestPermissionResponse {
	return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(o.OptionId)}
}

// pick selects the first option of the first of kinds offered; cancelled
// (false) when none is.
func (opts permOptions) pick(kinds ...acp.PermissionOptionKind) (acp.RequestPermissionResponse, bool) {
	for _, k := range kinds {
		for _, o := range opts {
			if o.Kind == k {
				return selected(o), true
			}
		}
	}
	return opts.cancelled(), false
}

func (opts permOptions) names() []string {
	names := make([]string, len(opts))
	for i, o := range opts {
		names[i] = o.Name
	}
	return names
}

// answer selects the option the owner's answer names: by its name, its
// id, its name in any case, in that order. A free answer that names no
// option: the agent gets a rejection.
func (opts permOptions) answer(ans string) acp.RequestPermissionResponse {
	ans = strings.TrimSpace(ans)
	for _, match := range []func(o acp.PermissionOption) bool{
		func(o acp.PermissionOption) bool { return o.Name == ans },
		func(o acp.PermissionOption) bool { return string(o.OptionId) == ans },
		func(o acp.PermissionOption) bool { return strings.EqualFold(o.Name, ans) },
	} {
		for _, o := range opts {
			if match(o) {
				return selected(o)
			}
		}
	}
	r, _ := opts.pick(acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways)
	return r
}

// relayTool* name relay_tool of the MCP server "relay" that session/new
// hands over (mcpServers), as the agents name the call.
const (
	relayToolName  = "relay_tool"
	relayMCPServer = "relay"
)

// relayToolCall reports whether a permission request is a call of the
// relay's own relay_tool, from its structured fields only (R18.28): the
// tool kind must be other (relay_tool is no edit, delete, move or execute:
// a write is never answered here) — or execute in a request the agent
// marks as an MCP tool's approval (codex-acp, R24.3) — and the tool and
// the MCP server the call goes to must be named by the agent, not by the
// model:
//   - name: the full name of the tool the agent calls, from _meta.toolName
//     (Qwen Code: "mcp__relay__relay_tool") or _meta.claudeCode.toolName
//     (Claude Code's adapter, in its tool_call update) of the request or of
//     the call's tool_call update, or the server and tool of codex-acp's
//     MCP call (agentToolName);
//   - Gemini CLI names neither in a field: its MCP confirmation is the one
//     offering the server-wide option ("proceed_always_server"), and its
//     title is then the tool's display name, which it makes of the tool's
//     and the server's names ("relay_tool (relay MCP Server)") — unless the
//     arguments hold a string "command", which it shows instead; so the
//     arguments (the request's content) must be known and hold none.
//
// Anything else — a title that merely mentions relay_tool, another kind,
// another server — is a card.
func relayToolCall(req acp.RequestPermissionRequest, kind acp.ToolKind, name string) bool {
	if kind != acp.ToolKindOther && (kind != acp.ToolKindExecute || !mcpApproval(req)) {
		return false
	}
	if name != "" {
		return name == "mcp__"+relayMCPServer+"__"+relayToolName || name == "mcp_"+relayMCPServer+"_"+relayToolName
	}
	return geminiRelayToolCall(req)
}

// geminiRelayToolCall reports whether a request that names no tool is
// Gemini CLI's confirmation of a relay_tool call: the MCP confirmation
// (offering "proceed_always_server") titled with relay_tool's display
// name, its arguments known and holding no "command".
func geminiRelayToolCall(req acp.RequestPermissionRequest) bool {
	mcpAsk := slices.ContainsFunc(req.Options, func(o acp.PermissionOption) bool { return o.OptionId == "proceed_always_server" })
	if !mcpAsk || req.ToolCall.Title == nil || *req.ToolCall.Title != relayToolName+" ("+relayMCPServer+" MCP Server)" {
		return false
	}
	keys, ok := geminiArgKeys(req.ToolCall.RawInput, req.ToolCall.Content)
	return ok && !slices.Contains(keys, "command")
}

// mcpApproval reports whether the agent marks the request as the approval
// of an MCP tool call (codex-acp's _meta.is_mcp_tool_approval; it gives
// every MCP call the kind execute).
func mcpApproval(req acp.RequestPermissionRequest) bool {
	v, _ := req.Meta["is_mcp_tool_approval"].(bool)
	return v
}

// agentToolName is the agent's name of a tool call: metaToolName, or for
// an MCP call codex-acp marks (_meta.is_mcp_tool_call) the server and tool
// its rawInput names beside the model's arguments, as
// mcp__SERVER__TOOL.
func agentToolName(meta map[string]any, raw any) string {
	if n := metaToolName(meta); n != "" {
		return n
	}
	if v, _ := meta["is_mcp_tool_call"].(bool); !v {
		return ""
	}
	m, _ := raw.(map[string]any)
	server, _ := m["server"].(string)
	tool, _ := m["tool"].(string)
	if server == "" || tool == "" {
		return ""
	}
	return "mcp__" + server + "__" + tool
}

// metaToolName is the agent's name of a tool call in _meta: toolName
// (Qwen Code) or claudeCode.toolName (Claude Code's adapter).
func metaToolName(metas ...map[string]any) string {
	for _, m := range metas {
		if s, ok := m["toolName"].(string); ok && s != "" {
			return s
		}
		if cc, ok := m["claudeCode"].(map[string]any); ok {
			if s, ok := cc["toolName"].(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// geminiArgKeys are the names of a Gemini CLI MCP call's arguments: its
// rawInput, or the request's text content, which is the arguments as JSON
// or, when they are long, "[Payload omitted due to length with parameters:
// a, b, c]" (at most five named; more end with ", ...": not known).
func geminiArgKeys(raw any, content []acp.ToolCallContent) ([]string, bool) {
	var m map[string]any
	if r, ok := raw.(map[string]any); ok && len(r) > 0 {
		m = r
	}
	if texts := contentTexts(content); m == nil && len(texts) == 1 {
		if keys, known, omitted := omittedArgKeys(texts[0]); omitted {
			return keys, known
		}
		if json.Unmarshal([]byte(texts[0]), &m) != nil {
			return nil, false
		}
	}
	if m == nil {
		return nil, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys, true
}

// omittedArgKeys reads Gemini CLI's "[Payload omitted due to length with
// parameters: a, b, c]": the names, known unless the list ends with
// ", ...". omitted is false for any other text.
func omittedArgKeys(t string) (keys []string, known, omitted bool) {
	const prefix = "[Payload omitted due to length with parameters: "
	if !strings.HasPrefix(t, prefix) || !strings.HasSuffix(t, "]") {
		return nil, false, false
	}
	list := strings.TrimSuffix(strings.TrimPrefix(t, prefix), "]")
	if strings.HasSuffix(list, ", ...") {
		return nil, false, true
	}
	return strings.Split(list, ", "), true, true
}

// contentTexts are the texts of a tool call's content, trimmed.
func contentTexts(content []acp.ToolCallContent) []string {
	var texts []string
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			texts = append(texts, strings.TrimSpace(c.Content.Content.Text.Text))
		}
	}
	return texts
}

// writeKind: tool kinds that change files or run commands; plan mode
// rejects them (R22.3).
func writeKind(k acp.ToolKind) bool {
	switch k {
	case acp.ToolKindEdit, acp.ToolKindDelete, acp.ToolKindMove, acp.ToolKindExecute:
		return true
	}
	return false
}
