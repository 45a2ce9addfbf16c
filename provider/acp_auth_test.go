package provider

import (
	"errors"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"
)

// R24.3: which agent errors are "not signed in", and the error the turn
// ends with (the agent, its sign-in step).
func TestACPAuthRequired(t *testing.T) {
	withData := &acp.RequestError{Code: -32000, Message: "Authentication required: Use Qwen Code CLI to authenticate first.",
		Data: map[string]any{"authMethods": []any{map[string]any{"id": "openai", "name": "Use OpenAI API key",
			"description": "Requires setting the `OPENAI_API_KEY` environment variable", "_meta": map[string]any{"type": "terminal"}}}}}
	for _, c := range []struct {
		name    string
		err     error
		auth    bool
		methods int
	}{
		{"auth_required with methods", withData, true, 1},
		{"auth_required bare", acp.NewAuthRequired(nil), true, 0},
		{"other code, same words", &acp.RequestError{Code: -32603, Message: "Authentication required"}, true, 0},
		{"-32000, not about auth", &acp.RequestError{Code: -32000, Message: "Session not found"}, false, 0},
		{"internal error", &acp.RequestError{Code: -32603, Message: "Internal error: Cannot connect to API"}, false, 0},
		{"codex exited", &acp.RequestError{Code: 1001, Message: "Codex process has exited with code 1"}, false, 0},
		{"not an ACP error", errors.New("authentication required"), false, 0},
	} {
		ok, m := authRequired(c.err)
		if ok != c.auth || len(m) != c.methods {
			t.Errorf("%s: authRequired = %v with %d methods, want %v with %d", c.name, ok, len(m), c.auth, c.methods)
		}
	}

	title := "Copilot"
	pr := &acpProc{p: &ACP{c: ACPConfig{ID: "copilot", Name: "GitHub Copilot CLI"}}, info: &acp.Implementation{Name: "Copilot", Title: &title},
		auth: []acpAuthMethod{{Name: "Log in with Copilot CLI", Description: "Run `copilot login` in the terminal"}}}
	got := pr.authText("session/new", acp.NewAuthRequired(nil), nil)
	want := "The agent Copilot (provider \"copilot\") is not signed in (it answered session/new with \"Authentication required\"). " +
		"Sign it in: Log in with Copilot CLI: Run `copilot login` in the terminal."
	if got != want {
		t.Errorf("authText =\n%s\nwant\n%s", got, want)
	}
	_, m := authRequired(withData)
	if got := pr.authText("session/new", withData, m); !strings.Contains(got, "Sign it in: Use OpenAI API key: Requires setting") {
		t.Errorf("the error's own methods first: %s", got)
	}
	pr = &acpProc{p: &ACP{c: ACPConfig{ID: "claude", Name: "Claude (ACP)"}}}
	if got := pr.authText("session/prompt", acp.NewAuthRequired(nil), nil); !strings.HasPrefix(got, "The agent Claude (ACP) (provider \"claude\") is not signed in") ||
		!strings.Contains(got, "it names no sign-in method") {
		t.Errorf("no methods, no agentInfo: %s", got)
	}
}
