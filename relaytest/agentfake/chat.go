package agentfake

import (
	"encoding/json"
	"net/http"
	"testing"
)

// OpenAIChat serves OpenAI's chat completions as Qwen Code, Copilot CLI
// (bring your own key) and OpenCode call it: POST /v1/chat/completions,
// answered as SSE chunks when "stream": true (text deltas, one tool call,
// the finish reason, a usage chunk, [DONE]) and as one JSON object
// otherwise; GET /v1/models lists "fake-model".
func OpenAIChat(tb testing.TB, script Script) *Server {
	return newServer(tb, script, func(s *Server) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.chat(w, r) })
		mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"fake"}]}`))
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"message":"not here","type":"invalid_request_error"}}`))
		})
		return mux
	})
}

// chatAsk is what the script sees of a chat request: the last user
// message's text, and the tool message's when the conversation ends with
// tool results.
func chatAsk(body []byte) (Ask, string) {
	var req struct {
		Messages []map[string]any `json:"messages"`
		Tools    []any            `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	a := Ask{Body: body}
	tool := findToolName(req.Tools)
	a.HasRelayTool = tool != ""
	i := len(req.Messages) - 1
	for ; i >= 0 && req.Messages[i]["role"] == "tool"; i-- {
		a.AfterTool = true
		a.ToolResult = textOf(req.Messages[i]["content"]) + a.ToolResult
	}
	for ; i >= 0; i-- {
		if m := req.Messages[i]; m["role"] == "user" {
			a.Prompt = textOf(m["content"])
			break
		}
	}
	return a, tool
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, _ := readBody(r)
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	a, tool := chatAsk(body)
	st, ok := s.step(w, a, tool)
	if !ok {
		return
	}
	id := "chatcmpl-" + nid()
	finish := "stop"
	var calls []map[string]any
	if st.Tool != nil {
		finish = "tool_calls"
		name := tool
		if st.ToolName != "" {
			name = st.ToolName
		}
		args, _ := json.Marshal(st.Tool)
		calls = []map[string]any{{"index": 0, "id": "call_" + nid(), "type": "function",
			"function": map[string]any{"name": name, "arguments": string(args)}}}
	}
	usage := map[string]any{"prompt_tokens": st.InputTokens, "completion_tokens": st.OutputTokens,
		"total_tokens": st.InputTokens + st.OutputTokens}
	chunk := func(choices []any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model, "choices": choices}
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": st.Text}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	defer s.slowStart(st)()
	e := newSSE(w)
	e.send("", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}}}))
	if st.Text != "" {
		for _, piece := range chunks(st.Text, st.Chunks) {
			if !s.pause(r, st.ChunkDelay) {
				return
			}
			e.send("", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"content": piece}}}))
		}
	}
	if calls != nil {
		e.send("", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": calls}}}))
	}
	e.send("", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}))
	u := chunk([]any{})
	u["usage"] = usage
	e.send("", u)
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	if e.f != nil {
		e.f.Flush()
	}
}
