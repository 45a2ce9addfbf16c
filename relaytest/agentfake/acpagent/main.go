// Command acpagent is a fake Agent Client Protocol agent for the acp
// provider's tests, built on the ACP SDK's agent side. It speaks ACP on its
// stdio and follows a script in the prompt: a prompt whose last line is
// {"acp": [STEP, …]} runs its steps, any other prompt is answered
// "ANSWER: LAST LINE (prompt N)", N counting the prompts of the ACP
// session (so a resumed conversation shows). Sessions are kept in
// $FAKE_ACP_STATE (one file each), so session/load works in a new process.
// Every request the agent gets is appended to $FAKE_ACP_STATE/log.jsonl.
//
// Steps: {"say": TEXT}, {"tool": ARGS} (relay_tool over the MCP server of
// session/new), {"permission": {"title", "kind"}}, {"terminal": {"command",
// "args", "cwd"}}, {"read": PATH}, {"write": {"path", "content"}},
// {"sleep_ms": N} (silent), {"exit": CODE}, {"garbage": TEXT},
// {"stop": REASON}, {"usage": [IN, OUT]}, {"error": MSG}, {"hang": true}
// (until cancelled).
//
// For the relay's security tests: {"read_lines": {"path", "line", "limit"}}
// (fs/read_text_file with line and limit), {"reads": {"path", "count"}}
// (count reads at once, their results summed up in one line),
// {"sh": CMD} (the agent itself runs sh -c CMD, e.g. to swap its folder for
// a link), and the permission step's "meta" (the tool call's _meta),
// "content" (a text content), "raw_input" and "gemini_mcp" (Gemini CLI's
// options for an MCP tool).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type session struct {
	ID      string          `json:"id"`
	Cwd     string          `json:"cwd"`
	Prompts []string        `json:"prompts"`
	MCP     []acp.McpServer `json:"-"`
}

type agent struct {
	conn  *acp.AgentSideConnection
	state string
	out   *lockedWriter

	mu       sync.Mutex
	sessions map[string]*session
	n        int
	client   acp.ClientCapabilities
}

type lockedWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Write(b)
}

func (a *agent) logReq(method string, params any) {
	b, _ := json.Marshal(map[string]any{"method": method, "params": params, "pid": os.Getpid()})
	f, err := os.OpenFile(filepath.Join(a.state, "log.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close() // a test log: a lost line shows as a failed expectation
}

func (a *agent) save(s *session) {
	b, _ := json.Marshal(s)
	_ = os.WriteFile(filepath.Join(a.state, "session-"+s.ID+".json"), b, 0o644)
}

func (a *agent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.logReq("initialize", p)
	a.mu.Lock()
	a.client = p.ClientCapabilities
	a.mu.Unlock()
	load := os.Getenv("FAKE_ACP_NO_LOAD") == ""
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersionNumber, AuthMethods: []acp.AuthMethod{},
		AgentCapabilities: acp.AgentCapabilities{LoadSession: load, McpCapabilities: acp.McpCapabilities{Http: true}}}, nil
}

func (a *agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *agent) NewSession(_ context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	a.logReq("session/new", p)
	a.mu.Lock()
	a.n++
	s := &session{ID: fmt.Sprintf("fake-%d-%d", os.Getpid(), a.n), Cwd: p.Cwd, MCP: p.McpServers}
	a.sessions[s.ID] = s
	a.mu.Unlock()
	a.save(s)
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.ID)}, nil
}

func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	a.logReq("session/load", p)
	b, err := os.ReadFile(filepath.Join(a.state, "session-"+string(p.SessionId)+".json"))
	if err != nil {
		return acp.LoadSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": "no such session " + string(p.SessionId)})
	}
	s := &session{}
	_ = json.Unmarshal(b, s)
	s.MCP = p.McpServers
	a.mu.Lock()
	a.sessions[s.ID] = s
	a.mu.Unlock()
	// The history is replayed as updates, as ACP says.
	for _, pr := range s.Prompts {
		_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateUserMessageText(pr)})
		_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText("REPLAYED " + pr)})
	}
	return acp.LoadSessionResponse{}, nil
}

func (a *agent) Cancel(_ context.Context, p acp.CancelNotification) error {
	a.logReq("session/cancel", p)
	return nil
}

func (a *agent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, nil
}

func (a *agent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *agent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

func (a *agent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

type step struct {
	Say        *string         `json:"say"`
	Tool       json.RawMessage `json:"tool"`
	Permission *struct {
		Title     string         `json:"title"`
		Kind      string         `json:"kind"`
		Meta      map[string]any `json:"meta"`
		Content   string         `json:"content"`
		RawInput  any            `json:"raw_input"`
		GeminiMCP bool           `json:"gemini_mcp"`
	} `json:"permission"`
	Terminal *struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Cwd     string   `json:"cwd"`
		NoWait  bool     `json:"no_wait"`
	} `json:"terminal"`
	Read      *string `json:"read"`
	ReadLines *struct {
		Path  string `json:"path"`
		Line  *int   `json:"line"`
		Limit *int   `json:"limit"`
	} `json:"read_lines"`
	Reads *struct {
		Path  string `json:"path"`
		Count int    `json:"count"`
	} `json:"reads"`
	Sh    *string `json:"sh"`
	Write *struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"write"`
	SleepMS *int    `json:"sleep_ms"`
	Exit    *int    `json:"exit"`
	Garbage *string `json:"garbage"`
	Stop    *string `json:"stop"`
	Usage   []int   `json:"usage"`
	Error   *string `json:"error"`
	Hang    bool    `json:"hang"`
}

func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	a.logReq("session/prompt", p)
	a.mu.Lock()
	s := a.sessions[string(p.SessionId)]
	a.mu.Unlock()
	if s == nil {
		return acp.PromptResponse{}, acp.NewInvalidParams(map[string]any{"error": "unknown session"})
	}
	var text strings.Builder
	for _, b := range p.Prompt {
		if b.Text != nil {
			text.WriteString(b.Text.Text)
		}
	}
	prompt := text.String()
	s.Prompts = append(s.Prompts, prompt)
	a.save(s)
	lines := strings.Split(strings.TrimSpace(prompt), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	var script struct {
		ACP []step `json:"acp"`
	}
	say := func(t string) {
		_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText(t)})
	}
	if !strings.HasPrefix(last, "{") || json.Unmarshal([]byte(last), &script) != nil || script.ACP == nil {
		say(fmt.Sprintf("ANSWER: %s (prompt %d)", last, len(s.Prompts)))
		return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil //nolint:nilerr // a prompt that is no script is answered as text
	}
	res := acp.PromptResponse{StopReason: acp.StopReasonEndTurn}
	for i, st := range script.ACP {
		id := acp.ToolCallId(fmt.Sprintf("call-%d", i))
		switch {
		case st.Say != nil:
			say(*st.Say)
		case st.Tool != nil:
			var args map[string]any
			_ = json.Unmarshal(st.Tool, &args)
			_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId,
				Update: acp.StartToolCall(id, "relay_tool (relay MCP Server)", acp.WithStartKind(acp.ToolKindOther), acp.WithStartRawInput(args))})
			out, err := a.callTool(ctx, s, args)
			if err != nil {
				out = "TOOL ERROR: " + err.Error()
			}
			_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId,
				Update: acp.UpdateToolCall(id, acp.WithUpdateStatus(acp.ToolCallStatusCompleted))})
			say("TOOL: " + out)
		case st.Permission != nil:
			kind := acp.ToolKind(st.Permission.Kind)
			_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId,
				Update: acp.StartToolCall(id, st.Permission.Title, acp.WithStartKind(kind), acp.WithStartStatus(acp.ToolCallStatusPending))})
			tcu := acp.ToolCallUpdate{ToolCallId: id, Title: acp.Ptr(st.Permission.Title), Kind: &kind,
				Meta: st.Permission.Meta, RawInput: st.Permission.RawInput}
			if st.Permission.Content != "" {
				tcu.Content = []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(st.Permission.Content))}
			}
			opts := []acp.PermissionOption{
				{OptionId: "proceed_always", Name: "Allow for this session", Kind: acp.PermissionOptionKindAllowAlways},
				{OptionId: "proceed_once", Name: "Allow", Kind: acp.PermissionOptionKindAllowOnce},
				{OptionId: "cancel", Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce},
			}
			if st.Permission.GeminiMCP {
				opts = []acp.PermissionOption{
					{OptionId: "proceed_always_server", Name: "Allow all server tools for this session", Kind: acp.PermissionOptionKindAllowAlways},
					{OptionId: "proceed_always_tool", Name: "Allow tool for this session", Kind: acp.PermissionOptionKindAllowAlways},
					{OptionId: "proceed_once", Name: "Allow", Kind: acp.PermissionOptionKindAllowOnce},
					{OptionId: "cancel", Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce},
				}
			}
			r, err := a.conn.RequestPermission(ctx, acp.RequestPermissionRequest{SessionId: p.SessionId, ToolCall: tcu, Options: opts})
			switch {
			case err != nil:
				say("PERMISSION ERROR: " + err.Error())
			case r.Outcome.Selected != nil:
				say("PERMISSION: " + string(r.Outcome.Selected.OptionId))
			default:
				say("PERMISSION: cancelled")
			}
			if ctx.Err() != nil {
				return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil //nolint:nilerr // a cancelled turn ends as ACP's cancelled, not an error
			}
			status := acp.ToolCallStatusCompleted
			if r.Outcome.Selected == nil || r.Outcome.Selected.OptionId == "cancel" {
				status = acp.ToolCallStatusFailed
			}
			_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId,
				Update: acp.UpdateToolCall(id, acp.WithUpdateStatus(status))})
		case st.Terminal != nil:
			a.mu.Lock()
			can := a.client.Terminal
			a.mu.Unlock()
			if !can {
				say("NO TERMINAL CAPABILITY")
				continue
			}
			req := acp.CreateTerminalRequest{SessionId: p.SessionId, Command: st.Terminal.Command, Args: st.Terminal.Args}
			if st.Terminal.Cwd != "" {
				req.Cwd = acp.Ptr(st.Terminal.Cwd)
			}
			t, err := a.conn.CreateTerminal(ctx, req)
			if err != nil {
				say("TERMINAL ERROR: " + err.Error())
				continue
			}
			if st.Terminal.NoWait {
				say("TERMINAL STARTED " + t.TerminalId)
				continue
			}
			w, err := a.conn.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: p.SessionId, TerminalId: t.TerminalId})
			if err != nil {
				say("TERMINAL WAIT ERROR: " + err.Error())
				continue
			}
			o, err := a.conn.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: p.SessionId, TerminalId: t.TerminalId})
			if err != nil {
				say("TERMINAL OUTPUT ERROR: " + err.Error())
				continue
			}
			code := -1
			if w.ExitCode != nil {
				code = *w.ExitCode
			}
			_, _ = a.conn.ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: p.SessionId, TerminalId: t.TerminalId})
			say(fmt.Sprintf("TERMINAL exit %d: %s", code, strings.TrimSpace(o.Output)))
		case st.Read != nil:
			r, err := a.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: p.SessionId, Path: *st.Read})
			if err != nil {
				say("READ ERROR: " + err.Error())
			} else {
				say("READ: " + r.Content)
			}
		case st.ReadLines != nil:
			r, err := a.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: p.SessionId, Path: st.ReadLines.Path,
				Line: st.ReadLines.Line, Limit: st.ReadLines.Limit})
			if err != nil {
				say("READ ERROR: " + err.Error())
			} else {
				say("READ: " + r.Content)
			}
		case st.Reads != nil:
			var wg sync.WaitGroup
			var mu sync.Mutex
			ok, bytes, errs := 0, 0, map[string]int{}
			for range st.Reads.Count {
				wg.Go(func() {
					r, err := a.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: p.SessionId, Path: st.Reads.Path})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs[err.Error()]++
						return
					}
					ok++
					bytes += len(r.Content)
				})
			}
			wg.Wait()
			b, _ := json.Marshal(errs)
			say(fmt.Sprintf("READS: %d ok, %d bytes, errors %s", ok, bytes, b))
		case st.Sh != nil:
			out, err := exec.CommandContext(ctx, "/bin/sh", "-c", *st.Sh).CombinedOutput()
			if err != nil {
				say(fmt.Sprintf("SH ERROR: %v: %s", err, out))
			}
		case st.Write != nil:
			_, err := a.conn.WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: p.SessionId, Path: st.Write.Path, Content: st.Write.Content})
			if err != nil {
				say("WRITE ERROR: " + err.Error())
			} else {
				say("WROTE")
			}
		case st.SleepMS != nil:
			select {
			case <-time.After(time.Duration(*st.SleepMS) * time.Millisecond):
			case <-ctx.Done():
				return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
			}
		case st.Exit != nil:
			fmt.Fprintln(os.Stderr, "fake agent: exiting as told")
			os.Exit(*st.Exit)
		case st.Garbage != nil:
			_, _ = a.out.Write([]byte(*st.Garbage + "\n"))
		case st.Stop != nil:
			res.StopReason = acp.StopReason(*st.Stop)
		case st.Usage != nil:
			res.Usage = &acp.Usage{InputTokens: st.Usage[0], OutputTokens: st.Usage[1], TotalTokens: st.Usage[0] + st.Usage[1]}
		case st.Error != nil:
			return acp.PromptResponse{}, acp.NewInternalError(map[string]any{"error": *st.Error})
		case st.Hang:
			<-ctx.Done()
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		}
	}
	return res, nil
}

type headerTransport struct {
	h http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// callTool calls relay_tool on the session's MCP server (the HTTP form).
func (a *agent) callTool(ctx context.Context, s *session, args map[string]any) (string, error) {
	for _, m := range s.MCP {
		if m.Http == nil {
			continue
		}
		h := http.Header{}
		for _, kv := range m.Http.Headers {
			h.Set(kv.Name, kv.Value)
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "fake-acp", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: m.Http.Url, HTTPClient: &http.Client{Transport: headerTransport{h}}}, nil)
		if err != nil {
			return "", err
		}
		defer func() { _ = cs.Close() }()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
		if err != nil {
			return "", err
		}
		var out strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				out.WriteString(t.Text)
			}
		}
		return out.String(), nil
	}
	return "", errors.New("no HTTP MCP server was given")
}

func main() {
	state := os.Getenv("FAKE_ACP_STATE")
	if state == "" {
		fmt.Fprintln(os.Stderr, "FAKE_ACP_STATE is not set")
		os.Exit(2)
	}
	if os.Getenv("FAKE_ACP_CRASH_AT_START") != "" {
		fmt.Fprintln(os.Stderr, "fake agent: cannot start (as told)")
		os.Exit(3)
	}
	out := &lockedWriter{f: os.Stdout}
	a := &agent{state: state, out: out, sessions: map[string]*session{}}
	a.conn = acp.NewAgentSideConnection(a, out, os.Stdin)
	<-a.conn.Done()
}
