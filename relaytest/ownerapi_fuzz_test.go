package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fuzzOwnerRoute is one owner API route the fuzzer may pick. path builds the URL
// path from the fuzzed reference (already stripped of '/') and the ids the
// fixture made.
type fuzzOwnerRoute struct {
	method string
	path   func(ref string, fx *fuzzOwnerFixture) string
}

// fuzzOwnerFixture is what one fuzzing process sets up once: a session, a group
// and an open ask, so that most requests reach the domain rather than stop at
// "not found".
type fuzzOwnerFixture struct {
	sid   string
	group string

	mu     sync.Mutex
	mcp    *mcp.ClientSession
	askID  string
	askNew bool // askID is still open as far as we know
}

// refOr returns ref when the fuzzer gave one, else def.
func refOr(ref, def string) string {
	if ref != "" {
		return url.PathEscape(ref)
	}
	return def
}

var fuzzOwnerRoutes = []fuzzOwnerRoute{
	{"POST", func(ref string, fx *fuzzOwnerFixture) string { return "/api/v1/sessions" }},
	{"PATCH", func(ref string, fx *fuzzOwnerFixture) string { return "/api/v1/sessions/" + refOr(ref, fx.sid) }},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/sessions/" + refOr(ref, fx.sid) + "/messages"
	}},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/sessions/" + fx.sid + "/questions/" + refOr(ref, "q_0000000000000000")
	}},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/cards/" + refOr(ref, "card_0000000000000000")
	}},
	{"PATCH", func(ref string, fx *fuzzOwnerFixture) string { return "/api/v1/settings" }},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string { return "/api/v1/groups" }},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string { return "/api/v1/inbox/" + refOr(ref, fx.openAsk()) }},
	{"GET", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/sessions/" + refOr(ref, fx.sid) + "?last=3"
	}},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/sessions/" + refOr(ref, fx.sid) + "/stop"
	}},
	{"POST", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/sessions/" + refOr(ref, "zzzzzzzzzzzz") + "/archive"
	}},
	{"DELETE", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/schedules/" + refOr(ref, "sch_0000000000")
	}},
	{"DELETE", func(ref string, fx *fuzzOwnerFixture) string {
		return "/api/v1/subscriptions/" + refOr(ref, "sub_0000000000")
	}},
}

// openAsk returns an ask id that is open, asking a new question (as the
// fixture's session, over MCP) when the last one was answered.
func (fx *fuzzOwnerFixture) openAsk() string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if fx.askNew || fx.mcp == nil {
		return fx.askID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := fx.mcp.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: map[string]any{
		"action": "ask", "question": "Ship it?", "options": []string{"yes", "no"}}})
	if err == nil && len(res.Content) == 1 {
		if txt, ok := res.Content[0].(*mcp.TextContent); ok {
			var env map[string]any
			if json.Unmarshal([]byte(txt.Text), &env) == nil {
				if id, ok := env["question_id"].(string); ok {
					fx.askID, fx.askNew = id, true
				}
			}
		}
	}
	return fx.askID
}

func (fx *fuzzOwnerFixture) askUsed(path string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if strings.HasSuffix(path, "/"+fx.askID) {
		fx.askNew = false
	}
}

// FuzzOwnerAPI sends fuzzed JSON bodies with the owner token over real HTTP
// (loopback) to one relay started for the fuzzing process (REDIS_URL, else
// the in-process Redis). The input is a route index, a reference for the
// route's path id ("" = the fixture's own session, group or ask) and the body.
//
// Properties: the relay never answers 5xx (a panic in a handler would be a
// 500 from gin's recovery) and always answers JSON; it keeps answering (no
// hang, no crash).
func FuzzOwnerAPI(f *testing.F) {
	seeds := []struct {
		route uint
		ref   string
		body  string
	}{
		{0, "", `{"title":"t","text":"hello","mode":"plan","effort":"low","group":"fuzz-group"}`},
		{0, "", `{"provider":"nope","model":"x","cwd":"/"}`},
		{0, "", `{"text":"{\"script\":[{\"reply\":\"hi\"},{\"task\":{\"lines\":[\"a\",\"b\"],\"exit\":1}}]}"}`},
		{0, "", `{"title":1}`},
		{0, "", ``},
		{1, "", `{"title":"renamed","mode":"ask","model":"scripted-1","effort":"high","may_create_sessions":true}`},
		{1, "", `{"title":"   "}`},
		{1, "zz", `{"mode":""}`},
		{2, "", `{"text":"hello"}`},
		{2, "", `{"text":"` + strings.Repeat("x", 64) + `"}`},
		{2, "", `{"text":null,"extra":1}`},
		{3, "", `{"choices":["a"],"answer":"b"}`},
		{4, "", `{"decision":"ALLOW "}`},
		{4, "", `{"decision":"maybe"}`},
		{5, "", `{"max_wait_seconds":600,"quiet_task_minutes":10,"max_turn_seconds":3600,"agent_sessions":true,"accept_agent_prompts":true}`},
		{5, "", `{"max_wait_seconds":1e99}`},
		{5, "", `{"max_turn_seconds":-1}`},
		{6, "", `{"name":"builders"}`},
		{6, "", `{"name":"none"}`},
		{7, "", `{"choice":"yes"}`},
		{7, "", `{"answer":"later","dismiss":true}`},
		{7, "ask_missing", `{"choice":"maybe"}`},
		{8, "", ``},
		{8, "12345678", ``},
		{9, "", ``},
		{10, "", ``},
		{11, "", ``},
		{12, "", ``},
		{2, "", "{\"text\":\"\xff\xfe\"}"},
		{5, "", `[1,2,3]`},
		{6, "", `{"name":"a"}{"name":"b"}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.ref, []byte(s.body))
	}

	r := Start(f, Options{})
	fx := &fuzzOwnerFixture{}
	s := r.NewSession(map[string]any{"title": "fuzz target"})
	fx.sid = s.ID
	var g map[string]any
	if st := r.Owner("POST", "/api/v1/groups", map[string]any{"name": "fuzz-group"}, &g); st != http.StatusCreated {
		f.Fatalf("create group: status %d: %v", st, g)
	}
	fx.group = g["id"].(string)
	fx.mcp = r.Connect(s.Token, nil).Session
	fx.openAsk()
	client := &http.Client{Timeout: 30 * time.Second}

	f.Fuzz(func(t *testing.T, route uint, ref string, body []byte) {
		rt := fuzzOwnerRoutes[route%uint(len(fuzzOwnerRoutes))]
		ref = strings.ReplaceAll(ref, "/", "") // one path segment: the route stays the one picked
		path := rt.path(ref, fx)
		req, err := http.NewRequest(rt.method, r.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %s %s: %v", rt.method, path, err)
		}
		req.Header.Set("Authorization", "Bearer "+OwnerToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s %q: %v", rt.method, path, body, err)
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s %q: read the answer: %v", rt.method, path, body, err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s %q: status %d: %s", rt.method, path, body, resp.StatusCode, data)
		}
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" || !json.Valid(data) {
			t.Fatalf("%s %s %q: status %d, %s: answer is not JSON: %q", rt.method, path, body, resp.StatusCode, ct, data)
		}
		if resp.StatusCode < 300 && strings.HasPrefix(path, "/api/v1/inbox/") {
			fx.askUsed(path)
		}
	})
}
