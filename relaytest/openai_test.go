package relaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// llmFake is a small OpenAI-compatible endpoint for the end-to-end test: the
// first chat request of a turn is answered with a relay_tool call
// (list_sessions), the next (carrying the tool result) with a text reply
// that quotes the result's summary. It records every chat request.
type llmFake struct {
	mode string // "" as above; "hang": stream some text, then nothing until the client goes; "401": refuse the key
	mu   sync.Mutex
	reqs []map[string]any
	auth []string
}

func (f *llmFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"llama-test"},{"id":"qwen-test"}]}`)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.reqs = append(f.reqs, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()

	msgs, _ := body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if f.mode == "401" {
		http.Error(w, `{"error":{"message":"Incorrect API key provided"}}`, http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v string) { _, _ = fmt.Fprintf(w, "data: %s\n\n", v); w.(http.Flusher).Flush() }
	switch {
	case f.mode == "hang":
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me think"}}]}`)
		<-r.Context().Done()
		return
	case last["role"] == "tool":
		var env map[string]any
		_ = json.Unmarshal([]byte(last["content"].(string)), &env)
		reply, _ := json.Marshal("done: " + fmt.Sprint(env["summary"]))
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
		send(`{"choices":[{"index":0,"delta":{"content":` + string(reply) + `}}]}`)
		send(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		send(`{"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":20}}`)
	default:
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"relay_tool","arguments":"{\"action\":\"list_"}}]}}]}`)
		send(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"sessions\",\"relay\":\"this\"}"}}]}}]}`)
		send(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
		send(`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":10}}`)
	}
	send("[DONE]")
}

func (f *llmFake) requests() ([]map[string]any, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.reqs...), append([]string(nil), f.auth...)
}

// R17.6 (R11.3): an openai provider runs a session's turn as an agent loop
// against an OpenAI-compatible endpoint; the model's relay_tool call goes
// through the relay as the session, the result goes back as a tool message,
// the text answer is the turn's reply and the tokens land in usage.
func TestOpenAIProviderEndToEnd(t *testing.T) {
	t.Parallel()
	fake := &llmFake{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "local", Name: "Local", Type: config.TypeOpenAI,
			BaseURL: srv.URL + "/v1", SystemPrompt: "You are a session on a relay."})
	}})
	owner := r.NewSession(map[string]any{"title": "watcher"})
	m := r.Connect(owner.Token, nil)

	// Models come from GET /models (no models in the config).
	Eventually(t, 10*time.Second, func() bool {
		env := m.MustOK(map[string]any{"action": "relay_info", "relay": "this"})
		for _, p := range list(t, env["providers"], "providers") {
			pv := obj(t, p, "provider")
			if pv["id"] == "local" {
				return strings.Join(strList(t, pv["models"], "models"), ",") == "llama-test,qwen-test"
			}
		}
		return false
	}, "the openai provider's models discovered")

	s := r.NewSession(map[string]any{"provider": "local", "title": "llm"})
	tid := r.Message(s.ID, "Which sessions are there?")
	turn := r.WaitTurn(tid, 20*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	if turn.Status != store.TurnDone {
		t.Fatalf("turn ended %s: %q", turn.Status, turn.Error)
	}
	if !strings.HasPrefix(turn.Reply, "done: ") || !strings.Contains(turn.Reply, "session") {
		t.Errorf("reply = %q", turn.Reply)
	}
	if turn.ReplyModel != "llama-test" {
		t.Errorf("reply model = %q, want the first discovered model", turn.ReplyModel)
	}

	reqs, auth := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("chat requests = %d, want 2", len(reqs))
	}
	for i, a := range auth {
		if a != "" {
			t.Errorf("request %d carried Authorization %q without api_key_env", i, a)
		}
	}
	tools, _ := reqs[0]["tools"].([]any)
	if len(tools) != 1 {
		t.Fatalf("tools = %v", reqs[0]["tools"])
	}
	fn := obj(t, obj(t, tools[0], "tool")["function"], "function")
	params := obj(t, fn["parameters"], "parameters")
	wantEq(t, "tool name", fn["name"], "relay_tool")
	if props := obj(t, params["properties"], "properties"); props["action"] == nil || props["session"] == nil {
		t.Errorf("tool parameters are not relay_tool's input schema: %v", params)
	}
	msgs := list(t, reqs[1]["messages"], "messages")
	first := obj(t, msgs[0], "messages[0]")
	wantEq(t, "system prompt", first["content"], "You are a session on a relay.")
	tool := obj(t, msgs[len(msgs)-1], "tool message")
	wantEq(t, "role", tool["role"], "tool")
	wantEq(t, "tool_call_id", tool["tool_call_id"], "call_1")
	var env map[string]any
	if err := json.Unmarshal([]byte(str(tool["content"])), &env); err != nil {
		t.Fatalf("tool message content %q: %v", tool["content"], err)
	}
	wantEq(t, "tool result ok", env["ok"], true)
	sessions := list(t, env["sessions"], "sessions")
	ids := []string{}
	for _, sv := range sessions {
		ids = append(ids, str(obj(t, sv, "session")["id"]))
	}
	if !strings.Contains(strings.Join(ids, ","), owner.ID) {
		t.Errorf("list_sessions through the relay did not list %s: %v", owner.ID, ids)
	}
	if !strings.Contains(turn.Reply, str(env["summary"])) {
		t.Errorf("reply %q does not quote the tool result's summary %q", turn.Reply, env["summary"])
	}

	// Usage: both steps' tokens, one turn.
	u := m.MustOK(map[string]any{"action": "usage", "relay": "this"})
	found := false
	for _, p := range list(t, u["providers"], "providers") {
		pv := obj(t, p, "provider")
		if pv["id"] != "local" {
			continue
		}
		found = true
		counted := obj(t, pv["counted"], "counted")
		wantEq(t, "turns", num(t, counted["turns"], "turns"), 1)
		wantEq(t, "inputTokens", num(t, counted["inputTokens"], "inputTokens"), 300)
		wantEq(t, "outputTokens", num(t, counted["outputTokens"], "outputTokens"), 30)
	}
	if !found {
		t.Errorf("usage lists no provider local: %v", u["providers"])
	}

	// A second turn: the model sees the conversation so far (the relay reads
	// the history for providers whose turns use it), then the new prompt.
	tid2 := r.Message(s.ID, "And now?")
	if t2 := r.WaitTurn(tid2, 20*time.Second, store.TurnDone, store.TurnError, store.TurnStopped); t2.Status != store.TurnDone {
		t.Fatalf("second turn ended %s: %q", t2.Status, t2.Error)
	}
	reqs, _ = fake.requests()
	if len(reqs) != 4 {
		t.Fatalf("chat requests = %d, want 4", len(reqs))
	}
	var seen []string
	for _, mv := range list(t, reqs[2]["messages"], "messages") {
		mm := obj(t, mv, "message")
		seen = append(seen, fmt.Sprintf("%v: %v", mm["role"], mm["content"]))
	}
	got := strings.Join(seen, " | ")
	for _, want := range []string{"user: Which sessions are there?", "assistant: " + turn.Reply, "user: And now?"} {
		if !strings.Contains(got, want) {
			t.Errorf("the second turn's request lacks %q: %s", want, got)
		}
	}
}

// R17.6: a stop ends a streaming openai turn at once, keeping what was
// streamed; a refused key ends the turn with the exact sentence, and the key
// shows nowhere.
func TestOpenAIProviderStopAndRefusedKey(t *testing.T) {
	t.Parallel()
	hang := &llmFake{mode: "hang"}
	hangSrv := httptest.NewServer(hang)
	t.Cleanup(hangSrv.Close)
	refuse := &llmFake{mode: "401"}
	refuseSrv := httptest.NewServer(refuse)
	t.Cleanup(refuseSrv.Close)
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "slow", Type: config.TypeOpenAI, BaseURL: hangSrv.URL + "/v1", Models: []string{"m"}},
			// PATH is set in every environment: its value stands in for a key.
			config.Provider{ID: "keyed", Type: config.TypeOpenAI, BaseURL: refuseSrv.URL + "/v1", Models: []string{"m"}, APIKeyEnv: "PATH"})
	}})

	s := r.NewSession(map[string]any{"provider": "slow", "title": "slow"})
	tid := r.Message(s.ID, "think hard")
	Eventually(t, 10*time.Second, func() bool { return r.Turn(tid).Partial == "Let me think" }, "the streamed text in the turn's partial")
	start := time.Now()
	r.Owner("POST", "/api/v1/sessions/"+s.ID+"/stop", nil, nil)
	turn := r.WaitTurn(tid, 10*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	if turn.Status != store.TurnStopped || turn.Reply != "Let me think" {
		t.Errorf("stopped turn = %s %q (error %q)", turn.Status, turn.Reply, turn.Error)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stop took %s", d)
	}

	k := r.NewSession(map[string]any{"provider": "keyed", "title": "keyed"})
	tid = r.Message(k.ID, "hello")
	turn = r.WaitTurn(tid, 10*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	if turn.Status != store.TurnError || turn.Error != "the endpoint refused the API key (HTTP 401)" {
		t.Errorf("refused key: turn %s, error %q", turn.Status, turn.Error)
	}
	_, auth := refuse.requests()
	if len(auth) != 1 || !strings.HasPrefix(auth[0], "Bearer /") {
		t.Errorf("the key was not sent as a bearer token: %q", auth)
	}
	key := strings.TrimPrefix(auth[0], "Bearer ")
	for _, m := range r.Messages(k.ID, "") {
		if strings.Contains(fmt.Sprint(m["text"]), key) {
			t.Errorf("a message shows the key: %v", m)
		}
	}
}
