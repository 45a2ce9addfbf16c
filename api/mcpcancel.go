package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// R24.2: notifications a client sends are accepted with or without an
// Mcp-Method header (Claude Code sends notifications/cancelled without one,
// and go-sdk v1.8.0 answers such a POST 400), and notifications/cancelled
// ends the named relay_tool call's wait at once. In stateless mode the SDK
// knows no call of another POST, so the route keeps its running calls by
// caller and JSON-RPC id.

// rpcIDKey is the context key of a POST's JSON-RPC request id (a single
// tools/call), as its JSON text.
type rpcIDKey struct{}

// callKey names a running tool call: its caller and JSON-RPC id.
type callKey struct {
	caller string
	id     string
}

// rpcMessage is what the route reads of a single JSON-RPC message.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

// peekMessage reads a body that is one JSON-RPC message (not a batch).
func peekMessage(body []byte) (rpcMessage, bool) {
	var m rpcMessage
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &m) != nil {
		return m, false
	}
	return m, true
}

// notification handles a POST that is one notification: it names its
// method for the SDK when the client did not (R24.2), and a
// notifications/cancelled ends the call it names.
func (r *mcpRoute) notification(req *http.Request, m rpcMessage) {
	if req.Header.Get("Mcp-Method") == "" {
		req.Header.Set("Mcp-Method", m.Method)
	}
	if m.Method != "notifications/cancelled" || len(m.Params.RequestID) == 0 {
		return
	}
	ti := auth.TokenInfoFromContext(req.Context())
	if ti == nil || ti.UserID == "" {
		return
	}
	r.mu.Lock()
	cancel := r.calls[callKey{caller: ti.UserID, id: compactID(m.Params.RequestID)}]
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// withRPCID hands a tools/call's JSON-RPC id to its handler.
func withRPCID(req *http.Request, m rpcMessage) *http.Request {
	if m.Method != "tools/call" || len(m.ID) == 0 {
		return req
	}
	return req.WithContext(context.WithValue(req.Context(), rpcIDKey{}, compactID(m.ID)))
}

func compactID(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// track lets notifications/cancelled end the call: it returns ctx with a
// cancel that the notification calls, and the func that forgets the call.
func (r *mcpRoute) track(ctx context.Context, caller string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	id, _ := ctx.Value(rpcIDKey{}).(string)
	if id == "" {
		return ctx, cancel
	}
	k := callKey{caller: caller, id: id}
	r.mu.Lock()
	r.calls[k] = cancel
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.calls, k)
		r.mu.Unlock()
		cancel()
	}
}
