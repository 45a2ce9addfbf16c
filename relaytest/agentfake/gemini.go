package agentfake

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Gemini serves the Gemini API as Gemini CLI calls it:
// POST /v1beta/models/MODEL:streamGenerateContent?alt=sse (SSE),
// :generateContent (JSON) and :countTokens.
func Gemini(tb testing.TB, script Script) *Server {
	return newServer(tb, script, func(s *Server) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, ":countTokens"):
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"totalTokens":42}`))
			case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"), strings.HasSuffix(r.URL.Path, ":generateContent"):
				s.gemini(w, r, strings.HasSuffix(r.URL.Path, ":streamGenerateContent"))
			default:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(404)
				_, _ = w.Write([]byte(`{"error":{"code":404,"message":"not here","status":"NOT_FOUND"}}`))
			}
		})
	})
}

func (s *Server) gemini(w http.ResponseWriter, r *http.Request, stream bool) {
	body, _ := readBody(r)
	var req struct {
		Contents []struct {
			Role  string           `json:"role"`
			Parts []map[string]any `json:"parts"`
		} `json:"contents"`
		Tools []any `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	a := Ask{Body: body}
	tool := findToolName(req.Tools)
	a.HasRelayTool = tool != ""
	for i := len(req.Contents) - 1; i >= 0; i-- {
		c := req.Contents[i]
		if c.Role != "user" {
			continue
		}
		isResult, text := false, ""
		for _, p := range c.Parts {
			if fr, ok := p["functionResponse"]; ok {
				isResult = true
				if i == len(req.Contents)-1 {
					a.AfterTool = true
					b, _ := json.Marshal(fr)
					a.ToolResult += string(b)
				}
			}
			if t, ok := p["text"].(string); ok {
				text += t
			}
		}
		if !isResult {
			a.Prompt = text
			break
		}
	}
	st, ok := s.step(w, a, tool)
	if !ok {
		return
	}
	usage := map[string]any{"promptTokenCount": st.InputTokens, "candidatesTokenCount": st.OutputTokens,
		"totalTokenCount": st.InputTokens + st.OutputTokens}
	cand := func(parts []map[string]any, finish string) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		if finish != "" {
			c["finishReason"] = finish
		}
		return map[string]any{"candidates": []any{c}, "usageMetadata": usage, "modelVersion": "fake"}
	}
	var toolPart []map[string]any
	if st.Tool != nil {
		name := tool
		if st.ToolName != "" {
			name = st.ToolName
		}
		toolPart = []map[string]any{{"functionCall": map[string]any{"name": name, "args": st.Tool}}}
	}
	if !stream {
		parts := []map[string]any{}
		if st.Text != "" {
			parts = append(parts, map[string]any{"text": st.Text})
		}
		parts = append(parts, toolPart...)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cand(parts, "STOP"))
		return
	}
	defer s.slowStart(st)()
	e := newSSE(w)
	pieces := []string{}
	if st.Text != "" {
		pieces = chunks(st.Text, st.Chunks)
	}
	for i, piece := range pieces {
		if !s.pause(r, st.ChunkDelay) {
			return
		}
		finish := ""
		if i == len(pieces)-1 && toolPart == nil {
			finish = "STOP"
		}
		e.send("", cand([]map[string]any{{"text": piece}}, finish))
	}
	if toolPart != nil {
		e.send("", cand(toolPart, "STOP"))
	}
	if len(pieces) == 0 && toolPart == nil {
		e.send("", cand([]map[string]any{{"text": ""}}, "STOP"))
	}
}
