package agentfake

import (
	"encoding/json"
	"net/http"
	"testing"
)

// Anthropic serves the Messages API as Claude Code calls it:
// POST /v1/messages (SSE when "stream": true) and /v1/messages/count_tokens.
func Anthropic(tb testing.TB, script Script) *Server {
	return newServer(tb, script, func(s *Server) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"input_tokens":42}`))
		})
		mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, r *http.Request) { s.anthropic(w, r) })
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"not_found_error","message":"not here"}}`))
		})
		return mux
	})
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string           `json:"model"`
		Stream   bool             `json:"stream"`
		Messages []map[string]any `json:"messages"`
		Tools    []any            `json:"tools"`
	}
	body, _ := readBody(r)
	_ = json.Unmarshal(body, &req)
	a := Ask{Body: body}
	tool := findToolName(req.Tools)
	a.HasRelayTool = tool != ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m["role"] != "user" {
			continue
		}
		isResult := false
		if parts, ok := m["content"].([]any); ok {
			for _, p := range parts {
				if pm, ok := p.(map[string]any); ok && pm["type"] == "tool_result" {
					isResult = true
					if i == len(req.Messages)-1 {
						a.AfterTool = true
						a.ToolResult += textOf(pm["content"])
					}
				}
			}
		}
		if !isResult {
			a.Prompt = textOf(m["content"]) // the last prompt, also after a tool result
			break
		}
	}
	st, ok := s.step(w, a, tool)
	if !ok {
		return
	}
	model := req.Model
	stop := "end_turn"
	var content []map[string]any
	if st.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": st.Text})
	}
	if st.Tool != nil {
		stop = "tool_use"
		name := tool
		if st.ToolName != "" {
			name = st.ToolName
		}
		content = append(content, map[string]any{"type": "tool_use", "id": "toolu_" + nid(), "name": name, "input": st.Tool})
	}
	usage := map[string]any{"input_tokens": st.InputTokens, "output_tokens": st.OutputTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_" + nid(), "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	defer s.slowStart(st)()
	e := newSSE(w)
	e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_" + nid(), "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": st.InputTokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	for i, c := range content {
		switch c["type"] {
		case "text":
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range chunks(st.Text, st.Chunks) {
				if !s.pause(r, st.ChunkDelay) {
					return
				}
				e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use",
				"id": c["id"], "name": c["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(c["input"])
			e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)}})
		}
		e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": st.OutputTokens}})
	e.send("message_stop", map[string]any{"type": "message_stop"})
}
