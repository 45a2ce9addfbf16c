package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// fakeLLM is an OpenAI-compatible endpoint on 127.0.0.1: /v1/chat/completions
// answers from a script (one step per request, streamed as SSE unless the
// step says otherwise) and /v1/models lists models. It records every request.
type fakeLLM struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	reqs   []fakeReq
	script []fakeStep
	models []string
	always *fakeStep // answers every request once the script is used up
}

type fakeReq struct {
	Method, Path, Auth string
	Body               map[string]any
}

type fakeStep struct {
	status     int    // not 200: an error answer with body
	retryAfter string // Retry-After of an error answer
	body       string
	text       []string // content pieces, one chunk each
	pause      time.Duration
	call       *fakeCall
	usage      [2]int64 // prompt, completion
	hang       bool     // after the text, block until the client goes away
	plainJSON  bool     // answer one JSON completion, not a stream
}

type fakeCall struct {
	id, name string
	args     []string // pieces of the arguments
}

func newFakeLLM(t *testing.T, steps ...fakeStep) *fakeLLM {
	f := &fakeLLM{t: t, script: steps}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", f.handleModels)
	mux.HandleFunc("/v1/chat/completions", f.handleChat)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) URL() string { return f.srv.URL + "/v1" }

func (f *fakeLLM) record(r *http.Request) map[string]any {
	data, _ := io.ReadAll(r.Body)
	var body map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &body); err != nil {
			f.t.Errorf("fake: request body is not JSON: %v: %s", err, data)
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeReq{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Body: body})
	f.mu.Unlock()
	return body
}

func (f *fakeLLM) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}

// chats are the recorded chat-completions requests.
func (f *fakeLLM) chats() []fakeReq {
	var out []fakeReq
	for _, r := range f.requests() {
		if r.Path == "/v1/chat/completions" {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeLLM) setModels(ids ...string) {
	f.mu.Lock()
	f.models = ids
	f.mu.Unlock()
}

func (f *fakeLLM) handleModels(w http.ResponseWriter, r *http.Request) {
	f.record(r)
	f.mu.Lock()
	ids := f.models
	f.mu.Unlock()
	var data []map[string]any
	for _, id := range ids {
		data = append(data, map[string]any{"id": id, "object": "model"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func (f *fakeLLM) handleChat(w http.ResponseWriter, r *http.Request) {
	reqBody := f.record(r)
	f.mu.Lock()
	var st fakeStep
	switch {
	case len(f.script) > 0:
		st, f.script = f.script[0], f.script[1:]
	case f.always != nil:
		st = *f.always
	default:
		f.mu.Unlock()
		f.t.Errorf("fake: unexpected request %d (script used up)", len(f.reqs))
		http.Error(w, `{"error":{"message":"script used up"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Unlock()
	if st.status != 0 && st.status != http.StatusOK {
		if st.retryAfter != "" {
			w.Header().Set("Retry-After", st.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st.status)
		_, _ = io.WriteString(w, st.body)
		return
	}
	if st.plainJSON {
		msg := map[string]any{"role": "assistant", "content": strings.Join(st.text, "")}
		if st.call != nil {
			msg["tool_calls"] = []any{map[string]any{"id": st.call.id, "type": "function",
				"function": map[string]any{"name": st.call.name, "arguments": strings.Join(st.call.args, "")}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"index": 0, "message": msg}},
			"usage": map[string]any{"prompt_tokens": st.usage[0], "completion_tokens": st.usage[1]}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	_, _ = io.WriteString(w, ": keep-alive comment\n\n")
	for _, piece := range st.text {
		if st.pause > 0 {
			select {
			case <-time.After(st.pause):
			case <-r.Context().Done():
				return
			}
		}
		send(chunk(map[string]any{"content": piece}, nil))
	}
	if st.hang {
		<-r.Context().Done()
		return
	}
	finish := "stop"
	if c := st.call; c != nil {
		for i, a := range c.args {
			tc := map[string]any{"index": 0, "function": map[string]any{"arguments": a}}
			if i == 0 {
				tc["id"], tc["type"] = c.id, "function"
				tc["function"].(map[string]any)["name"] = c.name
			}
			send(chunk(map[string]any{"tool_calls": []any{tc}}, nil))
		}
		finish = "tool_calls"
	}
	send(chunk(map[string]any{}, finish))
	if include, _ := reqBody["stream_options"].(map[string]any); include != nil && include["include_usage"] == true {
		send(map[string]any{"id": "chatcmpl-1", "choices": []any{},
			"usage": map[string]any{"prompt_tokens": st.usage[0], "completion_tokens": st.usage[1], "total_tokens": st.usage[0] + st.usage[1]}})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	fl.Flush()
}

func replyStep(usage [2]int64, pieces ...string) fakeStep {
	return fakeStep{text: pieces, usage: usage}
}

func toolStep(id string, usage [2]int64, args ...string) fakeStep {
	return fakeStep{call: &fakeCall{id: id, name: "relay_tool", args: args}, usage: usage}
}

// fakeHost records tool calls and partial replies.
type fakeHost struct {
	mu       sync.Mutex
	calls    []string
	partials []string
	result   string
}

func (h *fakeHost) CallTool(_ context.Context, args json.RawMessage) json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, string(args))
	if h.result != "" {
		return json.RawMessage(h.result)
	}
	return json.RawMessage(`{"ok":true,"summary":"1 session","sessions":[{"id":"s1"}]}`)
}

func (h *fakeHost) AskUser(context.Context, string, []string) (string, error) {
	return "", errors.New("no questions here")
}

func (h *fakeHost) StartTask(context.Context, TaskSpec) (Task, error) {
	return nil, errors.New("no tasks here")
}

func (h *fakeHost) Partial(text string) {
	h.mu.Lock()
	h.partials = append(h.partials, text)
	h.mu.Unlock()
}

func (h *fakeHost) snapshot() (calls, partials []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...), append([]string(nil), h.partials...)
}

const testSchema = `{"type":"object","required":["action"],"properties":{"action":{"type":"string"}}}`

const testKey = "sk-test-0123456789abcdefSECRET"

func newTestOpenAI(f *fakeLLM, mod func(c *OpenAIConfig)) *OpenAI {
	c := OpenAIConfig{
		ID: "local", Name: "Local", BaseURL: f.URL(), DefaultModel: "m1",
		ToolSchema: json.RawMessage(testSchema), ToolDescription: "work with sessions",
		SystemPrompt: "You are a relay session.",
		Backoff:      func(int) time.Duration { return time.Millisecond },
	}
	if mod != nil {
		mod(&c)
	}
	return NewOpenAI(c)
}

func testTurn(prompt string) Turn {
	return Turn{SessionID: "s1", TurnID: "t1", Prompt: prompt, MCPURL: "http://127.0.0.1:1/mcp", Token: "tok"}
}

// messages of a recorded request as (role, content, tool_call_id) triples.
type wireMsg struct {
	Role, Content, ToolCallID string
	ToolCalls                 []any
}

func msgsOf(t *testing.T, r fakeReq) []wireMsg {
	t.Helper()
	raw, _ := r.Body["messages"].([]any)
	var out []wireMsg
	for _, m := range raw {
		mm := m.(map[string]any)
		w := wireMsg{Role: mm["role"].(string)}
		w.Content, _ = mm["content"].(string)
		w.ToolCallID, _ = mm["tool_call_id"].(string)
		w.ToolCalls, _ = mm["tool_calls"].([]any)
		out = append(out, w)
	}
	return out
}

func TestOpenAIToolLoop(t *testing.T) {
	f := newFakeLLM(t,
		toolStep("call_abc", [2]int64{10, 5}, `{"action":"list_`, `sessions","relay":`, `"this"}`),
		replyStep([2]int64{20, 7}, "done: ", "1 session"),
	)
	o := newTestOpenAI(f, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("list the sessions"), h)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Text != "done: 1 session" || res.Model != "m1" {
		t.Errorf("result = %+v", res)
	}
	if res.Usage != (Usage{InputTokens: 30, OutputTokens: 12}) {
		t.Errorf("usage = %+v, want 30 in / 12 out summed over the two steps", res.Usage)
	}
	calls, _ := h.snapshot()
	if len(calls) != 1 {
		t.Fatalf("tool calls = %q", calls)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(calls[0]), &args); err != nil || args["action"] != "list_sessions" || args["relay"] != "this" {
		t.Errorf("tool call args = %s (%v)", calls[0], err)
	}
	reqs := f.chats()
	if len(reqs) != 2 {
		t.Fatalf("requests = %d, want 2", len(reqs))
	}
	first := reqs[0].Body
	if first["model"] != "m1" || first["stream"] != true {
		t.Errorf("first request model/stream = %v/%v", first["model"], first["stream"])
	}
	if so, _ := first["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", first["stream_options"])
	}
	tools, _ := first["tools"].([]any)
	if len(tools) != 1 {
		t.Fatalf("tools = %v", first["tools"])
	}
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	params, _ := json.Marshal(fn["parameters"])
	var schema any
	_ = json.Unmarshal([]byte(testSchema), &schema)
	wantParams, _ := json.Marshal(schema)
	if fn["name"] != "relay_tool" || string(params) != string(wantParams) || fn["description"] != "work with sessions" {
		t.Errorf("tool = %v (parameters %s)", fn, params)
	}
	m1 := msgsOf(t, reqs[0])
	if len(m1) != 2 || m1[0].Role != "system" || m1[0].Content != "You are a relay session." || m1[1].Role != "user" || m1[1].Content != "list the sessions" {
		t.Errorf("first messages = %+v", m1)
	}
	m2 := msgsOf(t, reqs[1])
	if len(m2) != 4 {
		t.Fatalf("second messages = %+v", m2)
	}
	asst, tool := m2[2], m2[3]
	if asst.Role != "assistant" || len(asst.ToolCalls) != 1 {
		t.Errorf("assistant message = %+v", asst)
	} else {
		tc := asst.ToolCalls[0].(map[string]any)
		fn := tc["function"].(map[string]any)
		if tc["id"] != "call_abc" || fn["name"] != "relay_tool" || fn["arguments"] != `{"action":"list_sessions","relay":"this"}` {
			t.Errorf("assistant tool call = %v", tc)
		}
	}
	if tool.Role != "tool" || tool.ToolCallID != "call_abc" || tool.Content != `{"ok":true,"summary":"1 session","sessions":[{"id":"s1"}]}` {
		t.Errorf("tool message = %+v", tool)
	}
}

func TestOpenAIKeepsHistory(t *testing.T) {
	f := newFakeLLM(t, replyStep([2]int64{1, 1}, "Paris."), replyStep([2]int64{1, 1}, "About 2 million."))
	o := newTestOpenAI(f, func(c *OpenAIConfig) { c.SystemPrompt = "" })
	h := &fakeHost{}
	t1 := testTurn("What is the capital of France?")
	r1, err := o.Run(context.Background(), t1, h)
	if err != nil {
		t.Fatal(err)
	}
	// The relay hands the second turn the conversation so far.
	t2 := testTurn("How many people live there?")
	t2.History = []HistoryItem{{Role: "user", Text: t1.Prompt}, {Role: "assistant", Text: r1.Text},
		{Role: "event", Text: "[relay event] s2 finished"}}
	if _, err := o.Run(context.Background(), t2, h); err != nil {
		t.Fatal(err)
	}
	got := msgsOf(t, f.chats()[1])
	want := []wireMsg{
		{Role: "user", Content: "What is the capital of France?"},
		{Role: "assistant", Content: "Paris."},
		{Role: "user", Content: "[relay event] s2 finished\n\nHow many people live there?"},
	}
	if len(got) != len(want) {
		t.Fatalf("messages = %+v", got)
	}
	for i := range want {
		if got[i].Role != want[i].Role || got[i].Content != want[i].Content {
			t.Errorf("message %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestOpenAIStreamsPartials(t *testing.T) {
	st := replyStep([2]int64{3, 4}, "one ", "two ", "three")
	st.pause = 150 * time.Millisecond
	f := newFakeLLM(t, st)
	o := newTestOpenAI(f, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("count"), h)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "one two three" {
		t.Errorf("reply = %q", res.Text)
	}
	_, partials := h.snapshot()
	if len(partials) < 2 { // one per piece (150 ms apart) unless a slow reader got two at once
		t.Fatalf("partials = %q, want one per streamed piece", partials)
	}
	if partials[0] != "one " || partials[len(partials)-1] != "one two three" {
		t.Errorf("partials = %q", partials)
	}
	for i := 1; i < len(partials); i++ {
		if !strings.HasPrefix(partials[i], partials[i-1]) {
			t.Errorf("partial %q does not extend %q", partials[i], partials[i-1])
		}
	}
}

func TestOpenAIStopEndsTurnPromptly(t *testing.T) {
	st := replyStep([2]int64{}, "thinking about it")
	st.hang = true
	f := newFakeLLM(t, st)
	o := newTestOpenAI(f, nil)
	h := &fakeHost{}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, p := h.snapshot(); len(p) > 0 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := o.Run(ctx, testTurn("go"), h)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %s after the stop", d)
	}
	if _, p := h.snapshot(); p[len(p)-1] != "thinking about it" {
		t.Errorf("last partial = %q", p[len(p)-1])
	}
}

func TestOpenAIBadKey(t *testing.T) {
	for _, status := range []int{401, 403} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f := newFakeLLM(t, fakeStep{status: status, body: `{"error":{"message":"Incorrect API key provided: ` + testKey + `"}}`})
			o := newTestOpenAI(f, func(c *OpenAIConfig) {
				c.APIKeyEnv = "TEST_OPENAI_KEY"
				c.Getenv = func(k string) string {
					if k == "TEST_OPENAI_KEY" {
						return testKey
					}
					return ""
				}
			})
			_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
			want := fmt.Sprintf("the endpoint refused the API key (HTTP %d)", status)
			var te *TurnError
			if !errors.As(err, &te) || te.Msg != want {
				t.Fatalf("err = %v, want turn error %q", err, want)
			}
			if r := f.chats(); len(r) != 1 || r[0].Auth != "Bearer "+testKey {
				t.Errorf("requests = %+v (a refused key is not retried; the key goes as a bearer token)", r)
			}
		})
	}
}

func TestOpenAIMissingKeyVariable(t *testing.T) {
	f := newFakeLLM(t)
	o := newTestOpenAI(f, func(c *OpenAIConfig) {
		c.APIKeyEnv = "TEST_OPENAI_KEY"
		c.Getenv = func(string) string { return "" }
	})
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	var te *TurnError
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "TEST_OPENAI_KEY (api_key_env) is not set") {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Errorf("a request was sent without the key")
	}
}

func TestOpenAIRetries429(t *testing.T) {
	f := newFakeLLM(t,
		fakeStep{status: 429, retryAfter: "0", body: `{"error":{"message":"slow down"}}`},
		fakeStep{status: 429, body: `{"error":{"message":"slow down"}}`},
		replyStep([2]int64{2, 3}, "finally"),
	)
	var waits []int
	o := newTestOpenAI(f, func(c *OpenAIConfig) {
		c.Backoff = func(retry int) time.Duration { waits = append(waits, retry); return time.Millisecond }
	})
	res, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err != nil || res.Text != "finally" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if n := len(f.chats()); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
	if fmt.Sprint(waits) != "[1 2]" {
		t.Errorf("backoff asked for retries %v, want [1 2]", waits)
	}
}

func TestOpenAILongRetryAfterEndsTurn(t *testing.T) {
	f := newFakeLLM(t, fakeStep{status: 429, retryAfter: "3600", body: `{"error":{"message":"quota"}}`})
	o := newTestOpenAI(f, nil)
	start := time.Now()
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err == nil || !strings.Contains(err.Error(), "HTTP 429") || !strings.Contains(err.Error(), "wait 1h0m0s") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("the provider waited for a long Retry-After")
	}
}

func TestOpenAIServerErrorsRetriedThenFail(t *testing.T) {
	e := fakeStep{status: 503, body: `{"error":{"message":"model is loading"}}`}
	f := newFakeLLM(t, e, e, e, e)
	o := newTestOpenAI(f, nil)
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	want := "the endpoint answered HTTP 503 (Service Unavailable) and still did after 3 retries: model is loading"
	var te *TurnError
	if !errors.As(err, &te) || te.Msg != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if n := len(f.chats()); n != 4 {
		t.Errorf("requests = %d, want 4 (3 retries)", n)
	}
}

func TestOpenAIBadRequestNotRetried(t *testing.T) {
	f := newFakeLLM(t, fakeStep{status: 404, body: `{"error":{"message":"model \"nope\" not found"}}`})
	o := newTestOpenAI(f, nil)
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err == nil || err.Error() != `the endpoint answered HTTP 404 (Not Found): model "nope" not found` {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.chats()); n != 1 {
		t.Errorf("requests = %d", n)
	}
}

func TestOpenAIMaxSteps(t *testing.T) {
	f := newFakeLLM(t)
	st := toolStep("c1", [2]int64{1, 1}, `{"action":"list_relays"}`)
	f.always = &st
	o := newTestOpenAI(f, func(c *OpenAIConfig) { c.MaxSteps = 3 })
	h := &fakeHost{}
	_, err := o.Run(context.Background(), testTurn("loop"), h)
	var te *TurnError
	if !errors.As(err, &te) || te.Msg != "stopped after 3 steps" {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.chats()); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
	if calls, _ := h.snapshot(); len(calls) != 3 {
		t.Errorf("tool calls = %d, want 3", len(calls))
	}
}

func TestOpenAIDefaultMaxSteps(t *testing.T) {
	if o := NewOpenAI(OpenAIConfig{ID: "x"}); o.c.MaxSteps != 25 {
		t.Errorf("default max steps = %d", o.c.MaxSteps)
	}
}

func TestOpenAIModelDiscovery(t *testing.T) {
	f := newFakeLLM(t)
	f.setModels("llama3.2", "qwen2.5-coder")
	o := newTestOpenAI(f, func(c *OpenAIConfig) { c.DiscoverEvery = 50 * time.Millisecond })
	if m := o.Info().Models; len(m) != 0 {
		t.Fatalf("models before discovery = %v", m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { o.Discovery(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return strings.Join(o.Info().Models, ",") == "llama3.2,qwen2.5-coder" }, "first discovery")
	f.setModels("llama3.2", "mistral")
	waitFor(t, func() bool { return strings.Join(o.Info().Models, ",") == "llama3.2,mistral" }, "discovery again")
	if info := o.Info(); info.Type != "openai" || info.ID != "local" {
		t.Errorf("info = %+v", info)
	}
	// Configured models are not discovered.
	o2 := newTestOpenAI(f, func(c *OpenAIConfig) { c.Models = []string{"fixed"} })
	before := len(f.requests())
	o2.Discovery(context.Background()) // returns at once
	if len(f.requests()) != before || strings.Join(o2.Info().Models, ",") != "fixed" {
		t.Errorf("configured models: %v, requests %d → %d", o2.Info().Models, before, len(f.requests()))
	}
}

func TestOpenAIModelFromDiscoveryWhenNoDefault(t *testing.T) {
	f := newFakeLLM(t, replyStep([2]int64{}, "ok"))
	f.setModels("llama3.2")
	o := newTestOpenAI(f, func(c *OpenAIConfig) { c.DefaultModel = "" })
	if _, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{}); err == nil || !strings.Contains(err.Error(), "no model") {
		t.Fatalf("err before discovery = %v", err)
	}
	if err := o.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err != nil || res.Model != "llama3.2" || f.chats()[0].Body["model"] != "llama3.2" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}

func TestOpenAINoAuthorizationWithoutKeyEnv(t *testing.T) {
	f := newFakeLLM(t, replyStep([2]int64{}, "hello"))
	f.setModels("m1")
	o := newTestOpenAI(f, nil)
	if err := o.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("requests = %+v", reqs)
	}
	for _, r := range reqs {
		if r.Auth != "" {
			t.Errorf("%s %s sent Authorization %q", r.Method, r.Path, r.Auth)
		}
	}
	// With a key both routes get it.
	f2 := newFakeLLM(t, replyStep([2]int64{}, "hello"))
	o2 := newTestOpenAI(f2, func(c *OpenAIConfig) {
		c.APIKeyEnv = "K"
		c.Getenv = func(string) string { return testKey }
	})
	_ = o2.Discover(context.Background())
	_, _ = o2.Run(context.Background(), testTurn("hi"), &fakeHost{})
	for _, r := range f2.requests() {
		if r.Auth != "Bearer "+testKey {
			t.Errorf("%s %s sent Authorization %q", r.Method, r.Path, r.Auth)
		}
	}
}

func TestOpenAIKeyNeverInErrors(t *testing.T) {
	echo := `{"error":{"message":"bad request for key ` + testKey + ` (sk-test-0123****SECRET)"}}`
	cases := []struct {
		name  string
		steps []fakeStep
	}{
		{"401", []fakeStep{{status: 401, body: echo}}},
		{"400", []fakeStep{{status: 400, body: echo}}},
		{"500", []fakeStep{{status: 500, body: echo}, {status: 500, body: echo}, {status: 500, body: echo}, {status: 500, body: echo}}},
		{"429 long", []fakeStep{{status: 429, retryAfter: "900", body: echo}}},
	}
	withKey := func(c *OpenAIConfig) {
		c.APIKeyEnv = "K"
		c.Getenv = func(string) string { return testKey }
	}
	check := func(what, text string) {
		t.Helper()
		if strings.Contains(text, testKey) || strings.Contains(text, "SECRET") {
			t.Errorf("%s shows the key: %q", what, text)
		}
	}
	for _, tc := range cases {
		f := newFakeLLM(t, tc.steps...)
		o := newTestOpenAI(f, withKey)
		_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
		if err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		check(tc.name, err.Error())
	}
	// An error chunk in the stream, a failed discovery, a refused connection.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			http.Error(w, echo, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+echo+"\n\n")
	}))
	defer srv.Close()
	o := newTestOpenAI(&fakeLLM{srv: srv}, withKey)
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err == nil || !strings.Contains(err.Error(), "the endpoint reported an error") {
		t.Fatalf("stream error = %v", err)
	}
	check("stream error", err.Error())
	err = o.Discover(context.Background())
	if err == nil {
		t.Fatal("discovery did not fail")
	}
	check("discovery error", err.Error())

	o = NewOpenAI(OpenAIConfig{ID: "x", BaseURL: "http://" + closedAddr(t) + "/v1", DefaultModel: "m", APIKeyEnv: "K", Getenv: func(string) string { return testKey }})
	_, err = o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	if err == nil || !strings.Contains(err.Error(), "refused the connection") {
		t.Fatalf("connection refused: %v", err)
	}
	check("connection error", err.Error())
}

func TestOpenAIConnectionRefused(t *testing.T) {
	addr := closedAddr(t)
	o := NewOpenAI(OpenAIConfig{ID: "x", BaseURL: "http://user:pw@" + addr + "/v1?k=v", DefaultModel: "m"})
	_, err := o.Run(context.Background(), testTurn("hi"), &fakeHost{})
	want := "the endpoint http://" + addr + "/v1 refused the connection (is the server running?)"
	var te *TurnError
	if !errors.As(err, &te) || te.Msg != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestOpenAIToolOfferAndBadCalls(t *testing.T) {
	// Without the MCP route (agent sessions off) the model is offered no tool.
	f := newFakeLLM(t, replyStep([2]int64{}, "plain"))
	o := newTestOpenAI(f, nil)
	tn := testTurn("hi")
	tn.MCPURL = ""
	if _, err := o.Run(context.Background(), tn, &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.chats()[0].Body["tools"]; ok {
		t.Errorf("tools offered without the MCP route: %v", f.chats()[0].Body["tools"])
	}
	// A call to an unknown tool or with arguments that are not JSON gets an
	// error envelope back and reaches no host.
	f = newFakeLLM(t,
		fakeStep{call: &fakeCall{id: "a", name: "shell", args: []string{`{"cmd":"ls"}`}}},
		fakeStep{call: &fakeCall{id: "b", name: "relay_tool", args: []string{`{"action":`}}},
		replyStep([2]int64{}, "gave up"),
	)
	o = newTestOpenAI(f, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("hi"), h)
	if err != nil || res.Text != "gave up" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if calls, _ := h.snapshot(); len(calls) != 0 {
		t.Errorf("host got %q", calls)
	}
	reqs := f.chats()
	for i, want := range []string{`There is no tool \"shell\"`, "not valid JSON"} {
		m := msgsOf(t, reqs[i+1])
		last := m[len(m)-1]
		if last.Role != "tool" || !strings.Contains(last.Content, `"ok":false`) || !strings.Contains(last.Content, want) {
			t.Errorf("request %d last message = %+v", i+1, last)
		}
	}
}

func TestOpenAIPlainJSONAnswer(t *testing.T) {
	// A server that ignores stream:true and answers one JSON completion.
	f := newFakeLLM(t,
		fakeStep{plainJSON: true, call: &fakeCall{id: "c", name: "relay_tool", args: []string{`{"action":"list_relays"}`}}, usage: [2]int64{4, 2}},
		fakeStep{plainJSON: true, text: []string{"all good"}, usage: [2]int64{6, 3}},
	)
	o := newTestOpenAI(f, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("hi"), h)
	if err != nil || res.Text != "all good" || res.Usage != (Usage{InputTokens: 10, OutputTokens: 5}) {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if calls, _ := h.snapshot(); len(calls) != 1 || calls[0] != `{"action":"list_relays"}` {
		t.Errorf("calls = %q", calls)
	}
}

func TestOpenAIToolArgumentsAsObject(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		msgs := body["messages"].([]any)
		w.Header().Set("Content-Type", "text/event-stream")
		if msgs[len(msgs)-1].(map[string]any)["role"] == "tool" {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"relay_tool","arguments":{"action":"list_relays"}}}]}}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	o := newTestOpenAI(&fakeLLM{srv: srv}, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("hi"), h)
	if err != nil || res.Text != "ok" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if calls, _ := h.snapshot(); len(calls) != 1 || calls[0] != `{"action":"list_relays"}` {
		t.Errorf("calls = %q", calls)
	}
}

func TestOpenAIBoundsReply(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	pieces := make([]string, 20) // 1.25 MiB
	for i := range pieces {
		pieces[i] = big
	}
	f := newFakeLLM(t, replyStep([2]int64{}, pieces...))
	o := newTestOpenAI(f, nil)
	h := &fakeHost{}
	res, err := o.Run(context.Background(), testTurn("hi"), h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Text, "[relay: the agent printed") || len(res.Text) > MaxReplyBytes+200 {
		t.Errorf("reply of %d bytes starts %q", len(res.Text), res.Text[:min(80, len(res.Text))])
	}
	_, partials := h.snapshot()
	for _, p := range partials {
		if len(p) > MaxPartialBytes {
			t.Fatalf("partial of %d bytes", len(p))
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{"0": 0, "7": 7 * time.Second, "": -1, "soon": -1} {
		d, ok := retryAfter(v)
		if (want < 0 && ok) || (want >= 0 && (!ok || d != want)) {
			t.Errorf("retryAfter(%q) = %s, %v", v, d, ok)
		}
	}
	d, ok := retryAfter(time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat))
	if !ok || d <= 0 || d > 6*time.Second {
		t.Errorf("retryAfter(date) = %s, %v", d, ok)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	testwait.Eventually(t, 5*time.Second, 10*time.Millisecond, cond, "timed out waiting for %s", what)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
