package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/oar/relay/domain"
)

// The protocol versions SPEC §2 names; the SDK client speaks each of them.
var mcpTestVersions = []string{"2025-06-18", "2025-11-25", "2026-07-28"}

// fakeDomain is a ToolDomain whose tokens and answers a test sets.
type fakeDomain struct {
	tokens   map[string]string // token → session id
	tokenErr error
	// call answers CallTool; nil answers {"ok":true}.
	call func(ctx context.Context, sessionID string, args json.RawMessage) (json.RawMessage, bool)

	mu    sync.Mutex
	calls []fakeCall
}

type fakeCall struct {
	Session string
	Args    string
}

func (f *fakeDomain) SessionForToken(_ context.Context, token string) (string, bool, error) {
	if f.tokenErr != nil {
		return "", false, f.tokenErr
	}
	id, ok := f.tokens[token]
	return id, ok, nil
}

func (f *fakeDomain) CallTool(ctx context.Context, sessionID string, args json.RawMessage, _ *domain.Delivery) (json.RawMessage, bool) {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{Session: sessionID, Args: string(args)})
	f.mu.Unlock()
	if f.call == nil {
		return json.RawMessage(`{"ok":true,"relay":"desk","summary":"list_sessions → desk: 0 sessions"}`), false
	}
	return f.call(ctx, sessionID, args)
}

func (f *fakeDomain) recorded() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func newFakeDomain() *fakeDomain {
	return &fakeDomain{tokens: map[string]string{"tok-a": "sess-a", "tok-b": "sess-b"}}
}

// startMCP serves NewMCPHandler on 127.0.0.1 and returns its URL.
func startMCP(t *testing.T, d ToolDomain, o MCPOptions) string {
	t.Helper()
	srv := httptest.NewServer(NewMCPHandler(d, o))
	t.Cleanup(srv.Close)
	return srv.URL
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectMCP connects the SDK's own client with a bearer token.
func connectMCP(t *testing.T, url, token, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: tr}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%s): %v", version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMCPToolsList(t *testing.T) {
	t.Parallel()
	url := startMCP(t, newFakeDomain(), MCPOptions{Version: "1.2.3"})
	for _, version := range mcpTestVersions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			cs := connectMCP(t, url, "tok-a", version, nil)
			if init := cs.InitializeResult(); init != nil && init.ServerInfo != nil {
				if got := init.ServerInfo.Name; got != "relay" {
					t.Errorf("server name = %q, want relay", got)
				}
			} else if version != "2026-07-28" {
				t.Errorf("no initialize result")
			}

			res, err := cs.ListTools(callCtx(t), nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			if diff := cmp.Diff([]string{"relay_tool"}, names); diff != "" {
				t.Fatalf("listed tools (-want +got):\n%s", diff)
			}
			tool := res.Tools[0]
			if !strings.Contains(tool.Description, `"this"`) || !strings.Contains(tool.Description, "list_relays") {
				t.Errorf("description does not explain relay and list_relays: %q", tool.Description)
			}
			checkInputSchema(t, tool.InputSchema)
		})
	}
}

// checkInputSchema checks the schema as a client receives it.
func checkInputSchema(t *testing.T, schema any) {
	t.Helper()
	raw, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Type                 string                     `json:"type"`
		Required             []string                   `json:"required"`
		AdditionalProperties any                        `json:"additionalProperties"`
		Properties           map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	// The tools are registered with a stand-in schema that has no x-mcp-header bindings, so
	// the SDK checks none; the listed schema must have none either (NewMCPHandler).
	if strings.Contains(string(raw), "x-mcp-header") {
		t.Errorf("the schema binds a parameter to a header: %s", raw)
	}
	if s.Type != "object" || !slices.Equal(s.Required, []string{"action"}) || s.AdditionalProperties != nil {
		t.Errorf("schema head: type %q, required %v, additionalProperties %v", s.Type, s.Required, s.AdditionalProperties)
	}
	var action struct {
		Type string   `json:"type"`
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(s.Properties["action"], &action); err != nil {
		t.Fatal(err)
	}
	wantActions := []string{"list_relays", "relay_info", "usage", "list_sessions", "read_session", "read_task_output",
		"send", "create_session", "update_session", "wait", "answer_question", "stop", "archive",
		"subscribe", "unsubscribe", "list_subscriptions", "transfer_subscriptions",
		"schedule", "list_schedules", "unschedule", "ask", "list_questions", "withdraw"}
	if diff := cmp.Diff(wantActions, action.Enum); diff != "" || action.Type != "string" {
		t.Errorf("action (type %q) enum (-want +got):\n%s", action.Type, diff)
	}

	wantArgs := []string{"action", "relay", "session", "sessions", "text", "wait_seconds", "mode", "model", "effort",
		"provider", "cwd", "repo", "branch", "title", "group", "auto_compact_window", "thinking_enabled",
		"thinking_display", "message_id", "question_id", "choices", "answer", "task_id", "lines", "last", "scope",
		"limit", "events", "once", "match", "stalled_minutes", "heartbeat_minutes", "digest_minutes", "quiet_hours",
		"exclude", "subscription_id", "watcher", "from", "at", "every_minutes", "schedule_id", "question", "options",
		"recommendation", "detail"}
	var gotArgs []string
	for name, prop := range s.Properties {
		gotArgs = append(gotArgs, name)
		var p map[string]any
		if err := json.Unmarshal(prop, &p); err != nil {
			t.Fatal(err)
		}
		if d, _ := p["description"].(string); d == "" && name != "action" {
			t.Errorf("argument %s has no description", name)
		}
		if _, isList := p["type"].([]any); isList {
			t.Errorf("argument %s has a list of types: %v", name, p["type"])
		}
	}
	slices.Sort(wantArgs)
	slices.Sort(gotArgs)
	if diff := cmp.Diff(wantArgs, gotArgs); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{
		"mode":  `["agent","ask","plan"]`,
		"scope": `["active","archived","all"]`,
	} {
		var p struct {
			Enum json.RawMessage `json:"enum"`
		}
		_ = json.Unmarshal(s.Properties[name], &p)
		if string(p.Enum) != want {
			t.Errorf("%s enum = %s, want %s", name, p.Enum, want)
		}
	}
}

func TestMCPCallResult(t *testing.T) {
	t.Parallel()
	d := newFakeDomain()
	d.call = func(_ context.Context, sessionID string, args json.RawMessage) (json.RawMessage, bool) {
		var a struct{ Action string }
		_ = json.Unmarshal(args, &a)
		if a.Action == "stop" {
			return json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_SELF","error":"stop cannot target your own conversation. Nothing was stopped."}`), true
		}
		return json.RawMessage(fmt.Sprintf(`{"ok":true,"relay":"desk","summary":"%s → desk: as %s"}`, a.Action, sessionID)), false
	}
	url := startMCP(t, d, MCPOptions{})

	tests := []struct {
		name, version, token, tool string
		args                       map[string]any
		wantIsError                bool
		wantEnvelope               string
		wantSession                string
	}{
		{"success", "2026-07-28", "tok-a", "relay_tool", map[string]any{"action": "list_sessions", "relay": "this"},
			false, `{"ok":true,"relay":"desk","summary":"list_sessions → desk: as sess-a"}`, "sess-a"},
		{"failure is a tool result", "2025-06-18", "tok-b", "relay_tool", map[string]any{"action": "stop", "relay": "this", "session": "x"},
			true, `{"ok":false,"code":"REMOTE_RELAY_SELF","error":"stop cannot target your own conversation. Nothing was stopped."}`, "sess-b"},
		{"legacy alias callable", "2025-11-25", "tok-b", "remote_relay", map[string]any{"action": "usage", "relay": "this"},
			false, `{"ok":true,"relay":"desk","summary":"usage → desk: as sess-b"}`, "sess-b"},
		{"legacy alias on the new protocol", "2026-07-28", "tok-a", "remote_relay", map[string]any{"action": "usage", "relay": "this"},
			false, `{"ok":true,"relay":"desk","summary":"usage → desk: as sess-a"}`, "sess-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs := connectMCP(t, url, tt.token, tt.version, nil)
			res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("tools/call: %v", err)
			}
			if res.IsError != tt.wantIsError {
				t.Errorf("isError = %v, want %v", res.IsError, tt.wantIsError)
			}
			if len(res.Content) != 1 {
				t.Fatalf("content has %d items, want 1", len(res.Content))
			}
			text, ok := res.Content[0].(*mcp.TextContent)
			if !ok {
				t.Fatalf("content[0] is %T, want text", res.Content[0])
			}
			assertJSONEqual(t, "text content", tt.wantEnvelope, text.Text)
			structured, err := json.Marshal(res.StructuredContent)
			if err != nil {
				t.Fatal(err)
			}
			assertJSONEqual(t, "structuredContent", tt.wantEnvelope, string(structured))

			calls := d.recorded()
			found := slices.ContainsFunc(calls, func(c fakeCall) bool {
				return c.Session == tt.wantSession && jsonEqual(c.Args, mustJSON(t, tt.args))
			})
			if !found {
				t.Errorf("the domain got no call as %s with %s; calls: %v", tt.wantSession, mustJSON(t, tt.args), calls)
			}
		})
	}
}

func TestMCPLegacyAliasNotListed(t *testing.T) {
	t.Parallel()
	// A second look at hideTools, on the raw JSON of tools/list, independent of the SDK client.
	url := startMCP(t, newFakeDomain(), MCPOptions{})
	events := rawEvents(t, mustRawPost(t, url, "tok-a", "2025-06-18", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)) //nolint:bodyclose // rawEvents reads the body to the end and closes it
	resp := findResponse(t, events, 1)
	if strings.Contains(string(resp.Result), "remote_relay") || !strings.Contains(string(resp.Result), `"relay_tool"`) {
		t.Errorf("tools/list result: %s", resp.Result)
	}
}

// A call that returns before any keep-alive is answered in one piece: its
// event stream with a Content-Length, not in chunks.
func TestMCPQuickResultInOnePiece(t *testing.T) {
	t.Parallel()
	url := startMCP(t, newFakeDomain(), MCPOptions{})
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"relay_tool","arguments":{"action":"list_relays"}}}`
	resp := mustRawPost(t, url, "tok-a", "2025-11-25", body)
	defer resp.Body.Close()
	if resp.ContentLength <= 0 || len(resp.TransferEncoding) != 0 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("Content-Length %d, Transfer-Encoding %v, Content-Type %q", resp.ContentLength, resp.TransferEncoding, resp.Header.Get("Content-Type"))
	}
	if r := findResponse(t, rawEvents(t, resp), 3); r.Error != nil {
		t.Errorf("error %s", r.Error)
	}
}

func TestMCPArgumentsPassThrough(t *testing.T) {
	t.Parallel()
	d := newFakeDomain()
	url := startMCP(t, d, MCPOptions{})
	tests := []struct {
		name, arguments string // the "arguments" member of params, or "" for none
		wantDomainArgs  string // "" = the domain must not be called
		wantEnvelope    string // "" = the fake's default answer
	}{
		{"unknown fields and odd shapes pass through", `{"action":"send","relay":"this","bogus":[1],"wait_seconds":"ten"}`,
			`{"action":"send","relay":"this","bogus":[1],"wait_seconds":"ten"}`, ""},
		{"no arguments become an empty object", "", `{}`, ""},
		{"null becomes an empty object", `null`, `{}`, ""},
		{"a string is refused by the route", `"list_relays"`, "",
			`{"ok":false,"code":"REMOTE_RELAY_INVALID_INPUT","error":"arguments must be a JSON object. Nothing was done."}`},
		{"an array is refused by the route", `[{"action":"list_relays"}]`, "",
			`{"ok":false,"code":"REMOTE_RELAY_INVALID_INPUT","error":"arguments must be a JSON object. Nothing was done."}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each case counts the domain's calls.
			before := len(d.recorded())
			params := `{"name":"relay_tool"}`
			if tt.arguments != "" {
				params = `{"name":"relay_tool","arguments":` + tt.arguments + `}`
			}
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, i+1, params)
			resp := findResponse(t, rawEvents(t, mustRawPost(t, url, "tok-a", "2025-11-25", body)), i+1) //nolint:bodyclose // rawEvents reads the body to the end and closes it
			if resp.Error != nil {
				t.Fatalf("JSON-RPC error %s, want a tool result", resp.Error)
			}
			var result struct {
				IsError           bool            `json:"isError"`
				StructuredContent json.RawMessage `json:"structuredContent"`
			}
			if err := json.Unmarshal(resp.Result, &result); err != nil {
				t.Fatal(err)
			}
			calls := d.recorded()[before:]
			if tt.wantDomainArgs == "" {
				if len(calls) != 0 {
					t.Errorf("the domain was called: %v", calls)
				}
				if !result.IsError {
					t.Errorf("isError = false, want true")
				}
				assertJSONEqual(t, "envelope", tt.wantEnvelope, string(result.StructuredContent))
				return
			}
			if len(calls) != 1 {
				t.Fatalf("domain calls = %v, want one", calls)
			}
			assertJSONEqual(t, "arguments the domain got", tt.wantDomainArgs, calls[0].Args)
		})
	}
}

func TestMCPDomainFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func(context.Context, string, json.RawMessage) (json.RawMessage, bool)
	}{
		{"not an object", func(context.Context, string, json.RawMessage) (json.RawMessage, bool) {
			return json.RawMessage(`"oops"`), false
		}},
		{"panic", func(context.Context, string, json.RawMessage) (json.RawMessage, bool) {
			panic("boom")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := newFakeDomain()
			d.call = tt.call
			cs := connectMCP(t, startMCP(t, d, MCPOptions{}), "tok-a", "", nil)
			res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "relay_tool", Arguments: map[string]any{"action": "usage"}})
			if err != nil {
				t.Fatalf("tools/call: %v", err)
			}
			b, _ := json.Marshal(res.StructuredContent)
			if !res.IsError || !strings.Contains(string(b), `"REMOTE_RELAY_INTERNAL"`) || strings.Contains(string(b), "boom") {
				t.Errorf("isError %v, structuredContent %s", res.IsError, b)
			}
		})
	}
}

func TestMCPAuth(t *testing.T) {
	t.Parallel()
	d := newFakeDomain()
	url := startMCP(t, d, MCPOptions{})
	broken := newFakeDomain()
	broken.tokenErr = errors.New("redis: connection refused")
	brokenURL := startMCP(t, broken, MCPOptions{})

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_tool","arguments":{"action":"list_relays"}}}`
	tests := []struct {
		name, url, authorization string
		want                     int
	}{
		{"no token", url, "", http.StatusUnauthorized},
		{"unknown token", url, "Bearer tok-nobody", http.StatusUnauthorized},
		{"not a bearer", url, "Basic dG9rLWE6", http.StatusUnauthorized},
		{"token check fails", brokenURL, "Bearer tok-a", http.StatusInternalServerError},
		{"valid token", url, "Bearer tok-a", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := newRawRequest(t, tt.url, "2025-06-18", body)
			if tt.authorization != "" {
				req.Header.Set("Authorization", tt.authorization)
			}
			resp := doRaw(t, req)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d (%s)", resp.StatusCode, tt.want, b)
			}
			if strings.Contains(string(b), "redis") {
				t.Errorf("the answer shows the internal error: %s", b)
			}
		})
	}
	for _, c := range append(d.recorded(), broken.recorded()...) {
		if c.Session != "sess-a" {
			t.Errorf("domain called as %q", c.Session)
		}
	}
}

func TestMCPLocalhostProtection(t *testing.T) {
	t.Parallel()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, disable := range []bool{false, true} {
		url := startMCP(t, newFakeDomain(), MCPOptions{DisableLocalhostProtection: disable})
		req := newRawRequest(t, url, "2025-06-18", body)
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Host = "relay.example.com"
		resp := doRaw(t, req)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		want := http.StatusForbidden
		if disable {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("DisableLocalhostProtection=%v: status %d, want %d", disable, resp.StatusCode, want)
		}
	}
}

// gate is a slow fake call that the test releases.
type gate struct {
	started chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}, 8), release: make(chan struct{})} }

func (g *gate) call(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, bool) {
	g.started <- struct{}{}
	select {
	case <-g.release:
		return json.RawMessage(`{"ok":true,"relay":"desk","summary":"send → desk session 3f9c2a1e: done","status":"done"}`), false
	case <-time.After(15 * time.Second): // the test failed to release it
		return json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"test gate never opened"}`), true
	case <-ctx.Done():
		return json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"cancelled"}`), true
	}
}

func TestMCPProgressNotifications(t *testing.T) {
	// Not parallel: checks that no goroutine outlives the call.
	leakOpt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leakOpt) })

	for _, version := range []string{"2025-06-18", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			g := newGate()
			d := newFakeDomain()
			d.call = g.call
			url := startMCP(t, d, MCPOptions{ProgressFirst: 100 * time.Millisecond, ProgressEvery: 200 * time.Millisecond})

			progress := make(chan *mcp.ProgressNotificationParams, 100)
			cs := connectMCP(t, url, "tok-a", version, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					progress <- req.Params
				},
			})
			params := &mcp.CallToolParams{Name: "relay_tool", Arguments: map[string]any{"action": "send", "relay": "this"}}
			params.SetProgressToken("call-1")

			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			ctx := callCtx(t)
			go func() {
				res, err := cs.CallTool(ctx, params)
				done <- outcome{res, err}
			}()

			// Wait for three notifications while the call is held, then let it finish.
			var got []*mcp.ProgressNotificationParams
			deadline := time.After(10 * time.Second)
			for len(got) < 3 {
				select {
				case p := <-progress:
					got = append(got, p)
				case o := <-done:
					t.Fatalf("call returned before 3 progress notifications (%d): %v %v", len(got), o.res, o.err)
				case <-deadline:
					t.Fatalf("only %d progress notifications within 10 s", len(got))
				}
			}
			close(g.release)
			o := <-done
			if o.err != nil || o.res.IsError {
				t.Fatalf("call: %v %+v", o.err, o.res)
			}
			for i, p := range got {
				if p.ProgressToken != "call-1" {
					t.Errorf("notification %d token %v", i, p.ProgressToken)
				}
				if p.Progress != float64(i+1) {
					t.Errorf("notification %d progress %v, want %d", i, p.Progress, i+1)
				}
				if !strings.HasPrefix(p.Message, "send: waiting") {
					t.Errorf("notification %d message %q", i, p.Message)
				}
			}
		})
	}
}

// TestMCPKeepAlive talks raw HTTP so it can see the SSE comment lines a client without a
// progress token gets, and that the JSON-RPC result still arrives as a message event after
// them; with a progress token it gets progress events instead.
func TestMCPKeepAlive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, version string
		progressToken bool
		viaGin        bool
	}{
		{"keep-alive 2025-06-18", "2025-06-18", false, false},
		{"keep-alive 2026-07-28", "2026-07-28", false, false},
		{"keep-alive mounted in gin", "2025-11-25", false, true},
		{"progress instead 2025-11-25", "2025-11-25", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			d := newFakeDomain()
			d.call = g.call
			opts := MCPOptions{ProgressFirst: 50 * time.Millisecond, ProgressEvery: 100 * time.Millisecond}
			var url string
			if tt.viaGin { // as the router mounts it (ARCHITECTURE "Facts measured here on MCP")
				engine := gin.New()
				engine.POST("/mcp", gin.WrapH(NewMCPHandler(d, opts)))
				srv := httptest.NewServer(engine)
				t.Cleanup(srv.Close)
				url = srv.URL + "/mcp"
			} else {
				url = startMCP(t, d, opts)
			}

			meta := map[string]any{}
			if tt.version >= "2026-07-28" {
				meta[mcp.MetaKeyProtocolVersion] = tt.version
				meta[mcp.MetaKeyClientInfo] = map[string]any{"name": "raw", "version": "1"}
				meta[mcp.MetaKeyClientCapabilities] = map[string]any{}
			}
			if tt.progressToken {
				meta["progressToken"] = 7
			}
			params := map[string]any{"name": "relay_tool", "arguments": map[string]any{"action": "wait", "relay": "this"}}
			if len(meta) > 0 {
				params["_meta"] = meta
			}
			body := mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": params})
			resp := mustRawPost(t, url, "tok-a", tt.version, body)
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("Content-Type %q", ct)
			}

			// Read while the call is held: two keep-alives (or progress events) must come.
			r := bufio.NewReader(resp.Body)
			var seen bytes.Buffer
			readBlock := func() string { // one SSE block: lines up to an empty line
				var block strings.Builder
				for {
					line, err := r.ReadString('\n')
					seen.WriteString(line)
					if err != nil {
						t.Fatalf("reading the stream after %q: %v", seen.String(), err)
					}
					if line == "\n" {
						return block.String()
					}
					block.WriteString(line)
				}
			}
			for n := 0; n < 2; {
				block := readBlock()
				switch {
				case block == ": keepalive\n" && !tt.progressToken:
					n++
				case strings.Contains(block, "notifications/progress") && tt.progressToken:
					n++
				default:
					t.Fatalf("unexpected block while the call runs: %q", block)
				}
			}
			close(g.release)
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			all := seen.String() + string(rest)
			if tt.progressToken == strings.Contains(all, ": keepalive") {
				t.Errorf("progress token %v, keep-alive comments %v:\n%s", tt.progressToken, !tt.progressToken, all)
			}
			res := findResponse(t, parseSSE(t, all), 42)
			var result struct {
				IsError           bool            `json:"isError"`
				StructuredContent json.RawMessage `json:"structuredContent"`
			}
			if err := json.Unmarshal(res.Result, &result); err != nil || result.IsError {
				t.Fatalf("result %s (%v)", res.Result, err)
			}
			assertJSONEqual(t, "structuredContent",
				`{"ok":true,"relay":"desk","summary":"send → desk session 3f9c2a1e: done","status":"done"}`,
				string(result.StructuredContent))
			if !strings.HasSuffix(all, "\n\n") || strings.HasSuffix(all, ": keepalive\n\n") {
				t.Errorf("the stream does not end with the result:\n%s", all)
			}
		})
	}
}

func TestKeepAliveWriter(t *testing.T) {
	t.Parallel()
	t.Run("commits an event stream and passes the SDK's writes", func(t *testing.T) {
		rec := httptest.NewRecorder()
		rec.Header().Set("X-Outer", "1")
		kw := newKeepAliveWriter(rec)
		kw.Header().Set("Content-Type", "text/event-stream")
		kw.Header().Set("Cache-Control", "no-cache")
		if !kw.keepAlive() {
			t.Fatal("keepAlive = false on an event stream")
		}
		kw.Header().Set("X-Late", "ignored") // after commit, as in net/http
		kw.WriteHeader(http.StatusTeapot)    // superfluous
		_, _ = kw.Write([]byte("event: message\ndata: {}\n\n"))
		kw.finish()
		if _, err := kw.Write([]byte("x")); !errors.Is(err, errResponseFinished) {
			t.Errorf("write after finish: %v", err)
		}
		if kw.keepAlive() {
			t.Errorf("keepAlive after finish = true")
		}
		if rec.Code != http.StatusOK || rec.Body.String() != ": keepalive\n\nevent: message\ndata: {}\n\n" {
			t.Errorf("status %d body %q", rec.Code, rec.Body.String())
		}
		if h := rec.Result().Header; h.Get("X-Outer") != "1" || h.Get("Cache-Control") != "no-cache" || h.Get("X-Late") != "" {
			t.Errorf("headers %v", h)
		}
	})
	t.Run("a late JSON answer becomes an event", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		kw.Header().Set("Content-Type", "text/event-stream")
		kw.keepAlive()
		kw.Header().Set("Content-Type", "application/json")
		kw.WriteHeader(http.StatusBadRequest)
		_, _ = kw.Write([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}`))
		kw.finish()
		want := ": keepalive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"x\"}}\n\n"
		if rec.Body.String() != want {
			t.Errorf("body %q, want %q", rec.Body.String(), want)
		}
	})
	t.Run("no keep-alive on a JSON response; the SDK's status wins", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		kw.Header().Set("Content-Type", "application/json")
		if kw.keepAlive() {
			t.Error("keepAlive = true on a JSON response")
		}
		kw.WriteHeader(http.StatusAccepted)
		kw.finish()
		if rec.Code != http.StatusAccepted || rec.Body.Len() != 0 {
			t.Errorf("status %d body %q", rec.Code, rec.Body.String())
		}
	})
	t.Run("results of calls that returned are held and sent at finish with their length", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		kw.post = &mcpPost{ctx: context.Background()}
		kw.post.begin()
		kw.post.end()
		kw.Header().Set("Content-Type", "text/event-stream")
		kw.WriteHeader(http.StatusOK)
		_, _ = kw.Write([]byte("event: message\ndata: {}\n\n"))
		kw.Flush()
		if rec.Flushed || rec.Body.Len() != 0 {
			t.Fatalf("results went out before finish: flushed %v, body %q", rec.Flushed, rec.Body.String())
		}
		if !kw.finish() {
			t.Error("finish = false: the results count as not delivered")
		}
		res := rec.Result()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Length") != "25" || rec.Body.String() != "event: message\ndata: {}\n\n" {
			t.Errorf("status %d, Content-Length %q, body %q", res.StatusCode, res.Header.Get("Content-Length"), rec.Body.String())
		}
	})
	t.Run("held results go out first when a later call of the batch keeps the response alive", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		kw.post = &mcpPost{ctx: context.Background()}
		kw.post.begin()
		kw.post.end() // call A returned: its result is held
		kw.Header().Set("Content-Type", "text/event-stream")
		_, _ = kw.Write([]byte("event: message\ndata: {\"id\":1}\n\n"))
		kw.post.begin() // call B of the same batch begins and waits
		if !kw.keepAlive() {
			t.Fatal("keepAlive = false")
		}
		kw.post.end()
		_, _ = kw.Write([]byte("event: message\ndata: {\"id\":2}\n\n"))
		if !kw.finish() {
			t.Error("finish = false")
		}
		want := "event: message\ndata: {\"id\":1}\n\n: keepalive\n\nevent: message\ndata: {\"id\":2}\n\n"
		if rec.Body.String() != want || rec.Result().Header.Get("Content-Length") != "" {
			t.Errorf("body %q (Content-Length %q), want %q", rec.Body.String(), rec.Result().Header.Get("Content-Length"), want)
		}
	})
	t.Run("held results for a client that left are not delivered", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		ctx, cancel := context.WithCancel(context.Background())
		kw.post = &mcpPost{ctx: ctx}
		kw.post.begin()
		kw.post.end()
		_, _ = kw.Write([]byte("event: message\ndata: {}\n\n"))
		cancel()
		if kw.finish() {
			t.Error("finish = true for a client that went away")
		}
	})
	t.Run("untouched response is committed on finish", func(t *testing.T) {
		rec := httptest.NewRecorder()
		kw := newKeepAliveWriter(rec)
		kw.Header().Set("Content-Type", "text/event-stream")
		kw.finish()
		if res := rec.Result(); res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("status %d headers %v", res.StatusCode, res.Header)
		}
	})
}

// ---- raw HTTP helpers ----

func newRawRequest(t *testing.T, url, version, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(callCtx(t), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", version)
	if version >= "2026-07-28" { // SEP-2575 wants the method and name as headers too
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(body), &msg); err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Mcp-Method", msg.Method)
		if msg.Params.Name != "" {
			req.Header.Set("Mcp-Name", msg.Params.Name)
		}
	}
	return req
}

func doRaw(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// mustRawPost posts one JSON-RPC message with a bearer token and expects 200.
func mustRawPost(t *testing.T, url, token, version, body string) *http.Response {
	t.Helper()
	req := newRawRequest(t, url, version, body)
	req.Header.Set("Authorization", "Bearer "+token)
	resp := doRaw(t, req)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp
}

type sseEvent struct {
	Name, Data string
}

func rawEvents(t *testing.T, resp *http.Response) []sseEvent {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return parseSSE(t, string(b))
}

// parseSSE parses an event stream as a client must: comment lines are ignored.
func parseSSE(t *testing.T, stream string) []sseEvent {
	t.Helper()
	var events []sseEvent
	for block := range strings.SplitSeq(stream, "\n\n") {
		var e sseEvent
		var data []string
		for line := range strings.SplitSeq(block, "\n") {
			switch {
			case line == "", strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				e.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case strings.HasPrefix(line, "id: "), strings.HasPrefix(line, "retry: "):
			default:
				t.Fatalf("not an SSE line: %q in %q", line, stream)
			}
		}
		if data != nil {
			e.Data = strings.Join(data, "\n")
			events = append(events, e)
		}
	}
	return events
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// findResponse returns the JSON-RPC response with the id, which must come as a message event.
func findResponse(t *testing.T, events []sseEvent, id int) rpcResponse {
	t.Helper()
	for _, e := range events {
		var r rpcResponse
		if err := json.Unmarshal([]byte(e.Data), &r); err != nil {
			t.Fatalf("event data is not JSON: %q", e.Data)
		}
		if r.Method == "" && string(r.ID) == fmt.Sprint(id) {
			if e.Name != "message" {
				t.Errorf("response came as event %q, want message", e.Name)
			}
			return r
		}
	}
	t.Fatalf("no response with id %d in %v", id, events)
	return rpcResponse{}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
}

func assertJSONEqual(t *testing.T, what, want, got string) {
	t.Helper()
	if !jsonEqual(want, got) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}
