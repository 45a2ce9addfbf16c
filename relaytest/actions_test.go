package relaytest

// The MCP layer's part of the relay_tool envelope (the legacy tool name,
// arguments that are not a JSON object), and the helpers and error codes the
// end-to-end tests share. The actions' rules on this relay are the domain's
// rule suites (domain/actions_rules_test.go and the other *_rules_test.go).

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	codeInvalid      = "REMOTE_RELAY_INVALID_INPUT"
	codeNotFound     = "REMOTE_RELAY_NOT_FOUND"
	codeUnknownRelay = "REMOTE_RELAY_UNKNOWN_RELAY"
	codeDisabled     = "REMOTE_RELAY_DISABLED"
	codePermission   = "REMOTE_RELAY_PERMISSION"
	codeNoTurn       = "REMOTE_RELAY_NO_ACTIVE_TURN"
	codeForbidden    = "REMOTE_RELAY_FORBIDDEN"
	codeSelf         = "REMOTE_RELAY_SELF"
	codeSessionLimit = "REMOTE_RELAY_SESSION_LIMIT"
	codeBusy         = "REMOTE_RELAY_BUSY"
	codeUnknownModel = "REMOTE_RELAY_UNKNOWN_MODEL"
	codeUnknownGroup = "REMOTE_RELAY_UNKNOWN_GROUP"
	codeProviderUnav = "REMOTE_RELAY_PROVIDER_UNAVAILABLE"
	codeUnsupported  = "REMOTE_RELAY_UNSUPPORTED"

	// noSuchSession is a well-formed session id no test relay has.
	noSuchSession = "0000000000000000ffffffffffffffff"
	turnWait      = 30 * time.Second
)

// ---- helpers ---------------------------------------------------------------

// callRaw calls relay_tool with arguments of any JSON shape (json.RawMessage
// keeps the key order as written).
func callRaw(t *testing.T, m *MCP, args any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := m.Session.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", args, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("call %s: want one content item, got %d", args, len(res.Content))
	}
	txt, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("call %s: content is %T", args, res.Content[0])
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(txt.Text), &env); err != nil {
		t.Fatalf("call %s: text is not a JSON object: %q", args, txt.Text)
	}
	return env, res.IsError
}

// failRaw is MustFail for raw arguments.
func failRaw(t *testing.T, m *MCP, args any, code string) map[string]any {
	t.Helper()
	env, isErr := callRaw(t, m, args)
	if !isErr || env["ok"] != false || env["code"] != code {
		t.Fatalf("call %s: want %s, got isError=%v %v", args, code, isErr, env)
	}
	return env
}

func obj(t testing.TB, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T %v", what, v, v)
	}
	return m
}

func list(t testing.TB, v any, what string) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: want a list, got %T %v", what, v, v)
	}
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(t testing.TB, v any, what string) int {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s: want a number, got %T %v", what, v, v)
	}
	return int(f)
}

// strList turns a JSON list of strings into []string.
func strList(t testing.TB, v any, what string) []string {
	t.Helper()
	out := []string{}
	for _, x := range list(t, v, what) {
		s, ok := x.(string)
		if !ok {
			t.Fatalf("%s: element %v is not a string", what, x)
		}
		out = append(out, s)
	}
	return out
}

func wantEq(t testing.TB, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

func wantHas(t testing.TB, what string, s any, frags ...string) {
	t.Helper()
	txt, ok := s.(string)
	if !ok {
		t.Errorf("%s: want a string, got %T %v", what, s, s)
		return
	}
	for _, f := range frags {
		if !strings.Contains(txt, f) {
			t.Errorf("%s = %q, want it to contain %q", what, txt, f)
		}
	}
}

// readSession reads a session through the MCP client.
func readSession(m *MCP, sid string, last int) map[string]any {
	return m.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": sid, "last": last})
}

// ---- envelope --------------------------------------------------------------

// R3.1, R3.2: the MCP layer's part of the envelope: the legacy tool name,
// and arguments that are not a JSON object (the rest of the envelope's rules
// are in domain.TestRulesActEnvelope).
func TestActionsEnvelope(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "caller"})
	m := r.Connect(a.Token, nil)

	t.Run("legacy tool name", func(t *testing.T) {
		env, isErr := m.CallTool("remote_relay", map[string]any{"action": "usage", "relay": "this"}, nil)
		if isErr || env["ok"] != true {
			t.Fatalf("remote_relay usage: %v", env)
		}
		wantEq(t, "summary", env["summary"], "usage → desk: 1 provider, quotas not tracked")
		env, isErr = m.CallTool("remote_relay", map[string]any{"action": "usage"}, nil)
		if !isErr || env["code"] != codeInvalid {
			t.Fatalf("remote_relay without relay: %v", env)
		}
	})

	t.Run("arguments not an object", func(t *testing.T) {
		for _, raw := range []any{
			[]any{"list_relays"},
			"list_relays",
			42,
			json.RawMessage(`[{"action":"list_relays"}]`),
		} {
			env := failRaw(t, m, raw, codeInvalid)
			wantHas(t, "error", env["error"], "JSON object")
		}
	})
}
