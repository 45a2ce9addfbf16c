package agentfake

import (
	"encoding/json"
	"net/http"
	"testing"
)

// OpenAIResponses serves the Responses API as Codex calls it: POST
// /v1/responses, answered as SSE (response.created,
// response.output_item.added, response.output_text.delta,
// response.output_item.done, response.completed with usage).
func OpenAIResponses(tb testing.TB, script Script) *Server {
	return newServer(tb, script, func(s *Server) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/responses", func(w http.ResponseWriter, r *http.Request) { s.responses(w, r) })
		mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[],"models":[]}`))
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"message":"not here","type":"invalid_request_error"}}`))
		})
		return mux
	})
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, _ := readBody(r)
	var req struct {
		Model string           `json:"model"`
		Input []map[string]any `json:"input"`
		Tools []any            `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	a := Ask{Body: body}
	tool := findToolName(req.Tools)
	ns := toolNamespace(req.Tools, tool)
	a.HasRelayTool = tool != ""
	if n := len(req.Input); n > 0 {
		last := req.Input[n-1]
		switch last["type"] {
		case "function_call_output", "custom_tool_call_output", "mcp_call_output":
			a.AfterTool = true
			a.ToolResult = textOf(last["output"])
			if a.ToolResult == "" {
				b, _ := json.Marshal(last["output"])
				a.ToolResult = string(b)
			}
		}
	}
	for i := len(req.Input) - 1; i >= 0; i-- {
		if m := req.Input[i]; m["role"] == "user" {
			a.Prompt = textOf(m["content"])
			break
		}
	}
	st, ok := s.step(w, a, tool)
	if !ok {
		return
	}
	defer s.slowStart(st)()
	respID := "resp_" + nid()
	e := newSSE(w)
	e.send("response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": respID}})
	idx := 0
	if st.Text != "" {
		msgID := "msg_" + nid()
		e.send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx,
			"item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "in_progress", "content": []any{}}})
		for _, piece := range chunks(st.Text, st.Chunks) {
			if !s.pause(r, st.ChunkDelay) {
				return
			}
			e.send("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": msgID,
				"output_index": idx, "content_index": 0, "delta": piece})
		}
		e.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx,
			"item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": st.Text, "annotations": []any{}}}}})
		idx++
	}
	if st.Tool != nil {
		args, _ := json.Marshal(st.Tool)
		item := map[string]any{"type": "function_call", "id": "fc_" + nid(), "call_id": "call_" + nid(), "name": tool,
			"arguments": string(args), "status": "completed"}
		if ns != "" {
			item["namespace"] = ns
		}
		e.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
	}
	e.send("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": respID,
		"usage": map[string]any{"input_tokens": st.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": st.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": st.InputTokens + st.OutputTokens}}})
}

// toolNamespace is the name of a "namespace" tool holding the named tool ("" when none).
func toolNamespace(tools []any, name string) string {
	for _, t := range tools {
		m, _ := t.(map[string]any)
		if m == nil || m["type"] != "namespace" {
			continue
		}
		if findToolName(m["tools"]) == name {
			n, _ := m["name"].(string)
			return n
		}
	}
	return ""
}
