package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// SPEC §18 hardening, end to end on real relays.

// callNoFail calls relay_tool from any goroutine (MCP.Call fails the test, which only the test goroutine may).
func callNoFail(m *MCP, args map[string]any) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := m.Session.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
	if err != nil {
		return nil, err
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &env); err != nil {
		return nil, err
	}
	return env, nil
}

// R18.14: a body over the owner API's limit is 413.
func TestOwnerBodyTooLarge(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	big := `{"text":"` + strings.Repeat("a", 3<<20) + `"}`
	var body map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/sessions", big, &body); st != http.StatusRequestEntityTooLarge || body["code"] != "REMOTE_RELAY_INVALID_INPUT" {
		t.Fatalf("3 MiB body: %d %v", st, body)
	}
	var list struct{ Sessions []any }
	r.Owner(http.MethodGet, "/api/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("a refused body created a session: %v", list.Sessions)
	}
}

// R18.10: agents are handed --public-url (RELAY_URL, RELAY_MCP_URL), not the bind address.
func TestPublicURLHandedToAgents(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) {
		c.PublicURL = "https://relay.example.com/"
		c.Providers = append(c.Providers, config.Provider{ID: "env", Name: "Env", Type: config.TypeExec, Command: []string{"/usr/bin/env"}})
	}})
	s := r.NewSession(map[string]any{"provider": "env", "title": "env"})
	tr := waitEnded(r, r.Message(s.ID, "x"), 20*time.Second)
	if tr.Status != store.TurnDone {
		t.Fatalf("env turn: %s %q", tr.Status, tr.Error)
	}
	for _, want := range []string{"RELAY_URL=https://relay.example.com\n", "RELAY_MCP_URL=https://relay.example.com/mcp\n"} {
		if !strings.Contains(tr.Reply+"\n", want) {
			t.Errorf("the agent's environment lacks %q", strings.TrimSpace(want))
		}
	}
	if strings.Contains(tr.Reply, OwnerToken) {
		t.Errorf("the owner token reached the agent")
	}
}

// Owner API bodies: a wrong top-level type, two JSON values and a wrong method
// answer a clear JSON error (found by FuzzOwnerAPI).
func TestOwnerBodyShapes(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	var body map[string]any
	if st := r.Owner(http.MethodPatch, "/api/v1/settings", `[1,2]`, &body); st != http.StatusBadRequest || body["error"] != "The body must be a JSON object. Nothing was done." {
		t.Fatalf("array body: %d %v", st, body)
	}
	if st := r.Owner(http.MethodPatch, "/api/v1/settings", `{"max_wait_seconds":"x"}`, &body); st != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(body["error"]), "max_wait_seconds must be a number") {
		t.Fatalf("string for a number: %d %v", st, body)
	}
	if st := r.Owner(http.MethodPost, "/api/v1/groups", `{"name":"a"}{"name":"b"}`, &body); st != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(body["error"]), "more than one JSON value") {
		t.Fatalf("two values: %d %v", st, body)
	}
	if st := r.Owner(http.MethodPut, "/api/v1/settings", `{}`, &body); st != http.StatusMethodNotAllowed || body["code"] != "REMOTE_RELAY_INVALID_INPUT" {
		t.Fatalf("PUT settings: %d %v", st, body)
	}
}
