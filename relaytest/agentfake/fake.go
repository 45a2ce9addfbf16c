package agentfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request a fake model server received.
type Request struct {
	Method, Path string
	Body         []byte
	At           time.Time
}

// Ask is what the script sees of one model request.
type Ask struct {
	Body []byte // the whole request body (a later turn carries the earlier prompts)
	// Prompt is the text of the last user message (not a tool result).
	Prompt string
	// ToolResult is the text of the tool result when the last message is one ("" otherwise).
	ToolResult string
	// AfterTool is true when the last message is a tool result.
	AfterTool bool
	// HasRelayTool is true when the request offers relay_tool.
	HasRelayTool bool
}

// Step is the model's answer to one request.
type Step struct {
	// Tool, when set, makes the model call relay_tool with these arguments.
	Tool map[string]any
	// ToolName, when set, names another of the CLI's tools for Tool's call
	// (e.g. Gemini CLI's run_shell_command, Claude Code's Bash).
	ToolName string
	// Text is streamed in Chunks pieces, ChunkDelay apart.
	Text       string
	Chunks     int
	ChunkDelay time.Duration
	// Status, when set, answers with this HTTP status and ErrorBody instead.
	Status    int
	ErrorBody string
	// InputTokens and OutputTokens are reported as usage (default 11 and 7).
	InputTokens, OutputTokens int
}

// Script answers each model request.
type Script func(a Ask) Step

// Server is a fake model API on 127.0.0.1.
type Server struct {
	URL     string
	srv     *httptest.Server
	script  Script
	mu      sync.Mutex
	reqs    []Request
	aborted int // streams the client left before their end (a killed CLI)
	slow    int // slow streams in progress
}

// Streaming counts the slow streams (ChunkDelay > 0) in progress.
func (s *Server) Streaming() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slow
}

func (s *Server) slowStart(st Step) func() {
	if st.ChunkDelay <= 0 {
		return func() {}
	}
	s.mu.Lock()
	s.slow++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.slow--
		s.mu.Unlock()
	}
}

// Aborted counts streamed answers whose client went away before the end.
func (s *Server) Aborted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// pause waits d while streaming; false when the client went away.
func (s *Server) pause(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		s.mu.Lock()
		s.aborted++
		s.mu.Unlock()
		return false
	}
}

func newServer(tb testing.TB, script Script, h func(s *Server) http.Handler) *Server {
	tb.Helper()
	s := &Server{script: script}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("fake model listen: %v", err)
	}
	inner := h(s)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Body: body, At: time.Now()})
		s.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		inner.ServeHTTP(w, r)
	}))
	_ = s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL
	tb.Cleanup(s.srv.Close)
	return s
}

// Requests are the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Dump is every request, for a failing test's log.
func (s *Server) Dump() string {
	var b strings.Builder
	for i, r := range s.Requests() {
		body := string(r.Body)
		if len(body) > 800 {
			body = body[:200] + " … " + body[len(body)-600:]
		}
		fmt.Fprintf(&b, "#%d %s %s %s\n", i, r.Method, r.Path, body)
	}
	return b.String()
}

func (st *Step) defaults() {
	if st.Chunks <= 0 {
		st.Chunks = 1
	}
	if st.InputTokens == 0 {
		st.InputTokens = 11
	}
	if st.OutputTokens == 0 {
		st.OutputTokens = 7
	}
}

// chunks splits text into n pieces.
func chunks(text string, n int) []string {
	if n <= 1 || len(text) < n {
		return []string{text}
	}
	r := []rune(text)
	var out []string
	size := (len(r) + n - 1) / n
	for i := 0; i < len(r); i += size {
		j := i + size
		if j > len(r) {
			j = len(r)
		}
		out = append(out, string(r[i:j]))
	}
	return out
}

type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) send(event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

// findToolName finds the name of the offered relay_tool anywhere in a
// request's tools (names end with relay_tool).
func findToolName(v any) string {
	switch x := v.(type) {
	case map[string]any:
		if n, ok := x["name"].(string); ok && strings.HasSuffix(n, "relay_tool") {
			return n
		}
		for _, vv := range x {
			if n := findToolName(vv); n != "" {
				return n
			}
		}
	case []any:
		for _, vv := range x {
			if n := findToolName(vv); n != "" {
				return n
			}
		}
	}
	return ""
}

func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var b strings.Builder
		for _, p := range x {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					b.WriteString(t)
				}
				if c, ok := m["content"]; ok {
					b.WriteString(textOf(c))
				}
			}
		}
		return b.String()
	}
	return ""
}

func readBody(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

var idMu sync.Mutex
var idN int

func nid() string {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return fmt.Sprintf("%d%d", time.Now().UnixNano()%1000000, idN)
}

// step is the scripted answer to a request: ok=false when it was an error
// status, already written. A tool step without relay_tool offered (tool "")
// becomes a text answer saying so.
func (s *Server) step(w http.ResponseWriter, a Ask, tool string) (Step, bool) {
	st := s.script(a)
	st.defaults()
	if st.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st.Status)
		_, _ = w.Write([]byte(st.ErrorBody))
		return st, false
	}
	if st.Tool != nil && st.ToolName != "" {
		return st, true
	}
	if st.Tool != nil && tool == "" {
		st.Tool, st.Text = nil, "(no relay_tool offered)"
	}
	return st, true
}
