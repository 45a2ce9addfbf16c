package relaytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest/agentfake"
)

// R24.3: every ACP agent is a session. Each test runs the pinned agent
// (agentfake.Install, one install per cache) as an acp provider, offline
// against a fake model API on 127.0.0.1 whose model calls relay_tool
// (read_session of another session) and answers after its result.

// acpAgentTurn runs the relay_tool turn of turnOneRelayTool: the reply
// after an ok relay_tool result and the relay's activity line of the call.
// A permission request for relay_tool that became a question card (one the
// relay did not tell as its own) fails the test at once.
func acpAgentTurn(t *testing.T, prov config.Provider, fake *agentfake.Server) {
	t.Helper()
	e := startACPE2E(t, prov, fake)
	start := time.Now()
	mid := e.r.Message(e.a.ID, "Please CALLTOOL "+e.target.ID+" and report.")
	turn := e.r.Turn(mid)
	Eventually(t, 120*time.Second, func() bool {
		turn = e.r.Turn(mid)
		if qs := list(t, readSession(e.m, e.a.ID, 1)["pendingQuestions"], "pendingQuestions"); len(qs) > 0 {
			b, _ := json.Marshal(qs)
			t.Fatalf("%s: the relay_tool call became a question card: %s", prov.ID, b)
		}
		return turn.Status == "done" || turn.Status == "error" || turn.Status == "stopped"
	}, "the %s turn to end", prov.ID)
	t.Logf("%s turn 1 (relay_tool): %s", prov.ID, time.Since(start).Round(time.Millisecond))
	if reqs := fake.Requests(); len(reqs) > 0 {
		t.Logf("%s: first model request %s after the prompt", prov.ID, reqs[0].At.Sub(start).Round(time.Millisecond))
	}
	if turn.Status != "done" || turn.Reply != "FINAL: relay answered ok=true" {
		t.Fatalf("turn 1 ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	acts := e.r.Messages(e.a.ID, "activity")
	want := "🛰️ read_session → desk session " + e.target.ID[:8]
	if len(acts) < 1 || acts[0]["text"] != want {
		t.Fatalf("activity lines %v, want %q first", acts, want)
	}
}

// R24.3 with Qwen Code (qwen --acp) against a fake chat-completions API:
// its relay_tool permission request (kind other, _meta.toolName
// mcp__relay__relay_tool) is answered by the relay itself.
func TestACPQwenCode(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.QwenCode)
	fake := agentfake.OpenAIChat(t, acpShellScript("", nil))
	home := t.TempDir()
	// MCP tools hide behind tool_search by default (a real model finds
	// relay_tool there; the fake calls it directly), and the background
	// memory extraction would ask the model after each turn.
	settings := `{"tools": {"toolSearch": {"enabled": false}}, "memory": {"enableManagedAutoMemory": false}}`
	if err := os.MkdirAll(filepath.Join(home, ".qwen"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".qwen", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	prov := config.Provider{ID: "qwen", Name: "Qwen Code", Type: config.TypeACP,
		Command: []string{bin, "--acp", "--approval-mode", "default"}, Models: []string{"fake-model"},
		Env: map[string]string{
			"HOME":                          home,
			"OPENAI_API_KEY":                "dummy",
			"OPENAI_BASE_URL":               fake.URL + "/v1",
			"OPENAI_MODEL":                  "fake-model",
			"QWEN_USAGE_STATISTICS_ENABLED": "false",
			// MCP discovery in the background could let the first prompt
			// go out before relay_tool exists.
			"QWEN_CODE_LEGACY_MCP_BLOCKING": "1",
		}}
	acpAgentTurn(t, prov, fake)
}

// R24.3 with Codex through codex-acp against a fake Responses API (a custom
// model provider in CODEX_HOME/config.toml).
func TestACPCodexACP(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.CodexACP)
	fake := agentfake.OpenAIResponses(t, acpShellScript("", nil))
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := `model_provider = "fake"
model = "fake-model"

[model_providers.fake]
name = "fake"
base_url = "` + fake.URL + `/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"

[analytics]
enabled = false

[features]
plugins = false
`
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	prov := config.Provider{ID: "codex-acp", Name: "Codex (ACP)", Type: config.TypeACP,
		Command: []string{bin}, Models: []string{"fake-model"},
		Env: map[string]string{"HOME": home, "CODEX_HOME": codexHome, "FAKE_API_KEY": "dummy", "INITIAL_AGENT_MODE": "workspace-write"}}
	acpAgentTurn(t, prov, fake)
}

// claudeAgentEnv runs Claude Code inside claude-agent-acp against base (""
// for no key at all), in the permission mode "default": the agent asks
// the client (its own mode "auto" asks a model classifier instead).
func claudeAgentEnv(t *testing.T, base string) map[string]string {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings := `{"permissions": {"defaultMode": "default"}}`
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME": home,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
		"ENABLE_TOOL_SEARCH":                       "false",
		// Claude Code refuses to skip its permissions as root outside a
		// sandbox: CI runs as root.
		"IS_SANDBOX": "1",
	}
	if base != "" {
		env["ANTHROPIC_BASE_URL"] = base
		env["ANTHROPIC_API_KEY"] = "dummy"
	}
	return env
}

// R24.3 with Claude through claude-agent-acp against a fake Anthropic API.
func TestACPClaudeAgent(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.ClaudeAgentACP)
	fake := agentfake.Anthropic(t, acpShellScript("", nil))
	prov := config.Provider{ID: "claude-agent", Name: "Claude (ACP)", Type: config.TypeACP,
		Command: []string{bin}, Models: []string{"claude-sonnet-4-5"}, Env: claudeAgentEnv(t, fake.URL)}
	acpAgentTurn(t, prov, fake)
}

// copilotProvider runs Copilot CLI with its own key against fake (a fake
// chat-completions API), offline, with more arguments.
func copilotProvider(t *testing.T, fake *agentfake.Server, more ...string) config.Provider {
	bin := agentfake.Install(t, agentfake.CopilotCLI)
	return config.Provider{ID: "copilot", Name: "GitHub Copilot CLI", Type: config.TypeACP,
		Command: append([]string{bin, "--acp", "--stdio"}, more...), Models: []string{"fake-model"},
		Env: map[string]string{
			"HOME":                      t.TempDir(),
			"COPILOT_PROVIDER_BASE_URL": fake.URL + "/v1",
			"COPILOT_PROVIDER_API_KEY":  "dummy",
			"COPILOT_MODEL":             "fake-model",
			"COPILOT_OFFLINE":           "true",
			"COPILOT_AUTO_UPDATE":       "false",
		}}
}

// R24.3 with GitHub Copilot CLI (copilot --acp --stdio), bring your own
// key: --allow-tool 'relay(relay_tool)' lets Copilot run the relay's tool
// without asking.
func TestACPCopilotCLI(t *testing.T) {
	t.Parallel()
	fake := agentfake.OpenAIChat(t, acpShellScript("", nil))
	acpAgentTurn(t, copilotProvider(t, fake, "--allow-tool", "relay(relay_tool)"), fake)
}

// R24.3, R18.28, R22.3: without --allow-tool Copilot asks permission for
// relay_tool naming it only in the title ("relay_tool", kind other, no
// server or tool field), which the relay never trusts: the call is a
// question card; another session allows it and the turn goes on.
func TestACPCopilotCLIAsksForRelayTool(t *testing.T) {
	t.Parallel()
	fake := agentfake.OpenAIChat(t, acpShellScript("", nil))
	e := startACPE2E(t, copilotProvider(t, fake), fake)
	mid := e.r.Message(e.a.ID, "Please CALLTOOL "+e.target.ID+" and report.")
	var q map[string]any
	// Copilot starts slowly on a busy machine: wait longer than
	// pendingQuestion does.
	Eventually(t, 120*time.Second, func() bool {
		if qs := list(t, readSession(e.m, e.a.ID, 1)["pendingQuestions"], "pendingQuestions"); len(qs) == 1 {
			q = obj(t, qs[0], "question")
		}
		st := e.r.Turn(mid).Status
		return q != nil || st == "done" || st == "error" || st == "stopped"
	}, "copilot's question")
	if q == nil {
		t.Fatalf("no question; the turn ended %+v", e.r.Turn(mid))
	}
	opts, _ := json.Marshal(q["options"])
	t.Logf("copilot's relay_tool permission card: %q options %s", q["question"], opts)
	if q["kind"] != "ask_user" || q["question"] != "relay_tool" || !strings.Contains(string(opts), `"Allow once"`) {
		t.Fatalf("question %v, want Copilot's relay_tool request as an ask_user card", q)
	}
	e.m.MustOK(map[string]any{"action": "answer_question", "relay": "this", "session": e.a.ID, "question_id": q["id"], "choices": []string{"Allow once"}})
	turn := e.r.WaitTurn(mid, 120*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || turn.Reply != "FINAL: relay answered ok=true" {
		t.Fatalf("turn ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
}

// openCodeConfig is OPENCODE_CONFIG_CONTENT with one OpenAI-compatible
// provider "fake" at base.
func openCodeConfig(base string) string {
	b, _ := json.Marshal(map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"model":      "fake/fake-model",
		"autoupdate": false,
		"share":      "disabled",
		"provider": map[string]any{"fake": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "Fake",
			"options": map[string]any{"baseURL": base, "apiKey": "dummy"},
			"models":  map[string]any{"fake-model": map[string]any{"name": "Fake model"}},
		}},
	})
	return string(b)
}

// R24.3 with OpenCode (opencode acp) against a fake chat-completions API
// (an OpenAI-compatible provider in OPENCODE_CONFIG_CONTENT).
func TestACPOpenCode(t *testing.T) {
	t.Parallel()
	bin := agentfake.Install(t, agentfake.OpenCode)
	fake := agentfake.OpenAIChat(t, acpShellScript("", nil))
	prov := config.Provider{ID: "opencode", Name: "OpenCode", Type: config.TypeACP,
		Command: []string{bin, "acp"}, Models: []string{"fake/fake-model"},
		Env: map[string]string{
			"HOME":                             t.TempDir(),
			"OPENCODE_CONFIG_CONTENT":          openCodeConfig(fake.URL + "/v1"),
			"OPENCODE_DISABLE_MODELS_FETCH":    "true",
			"OPENCODE_DISABLE_AUTOUPDATE":      "true",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "true",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
			"OPENCODE_DISABLE_SHARE":           "true",
		}}
	acpAgentTurn(t, prov, fake)
}

// R24.3: agents without credentials end the turn with an error that names
// the agent and its sign-in step, never a hang: Copilot CLI (session/new
// answers "Authentication required" without data: the step is initialize's
// auth method), Qwen Code (session/new's error carries data.authMethods),
// codex-acp (session/new) and claude-agent-acp (session/prompt's error, no
// auth method at all). Keys a CI environment may hold are blanked.
func TestACPAgentsWithoutCredentials(t *testing.T) {
	t.Parallel()
	codexHome := filepath.Join(t.TempDir(), ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		prov config.Provider
		want []string
	}{
		{config.Provider{ID: "copilot", Name: "GitHub Copilot CLI", Command: []string{agentfake.Install(t, agentfake.CopilotCLI), "--acp", "--stdio"},
			Env: map[string]string{"HOME": t.TempDir(), "COPILOT_AUTO_UPDATE": "false", "GH_TOKEN": "", "GITHUB_TOKEN": "", "COPILOT_GITHUB_TOKEN": ""}},
			[]string{"The agent Copilot (provider \"copilot\") is not signed in", "Log in with Copilot CLI: Run `copilot login` in the terminal"}},
		{config.Provider{ID: "qwen", Name: "Qwen Code", Command: []string{agentfake.Install(t, agentfake.QwenCode), "--acp"},
			Env: map[string]string{"HOME": t.TempDir(), "QWEN_USAGE_STATISTICS_ENABLED": "false", "OPENAI_API_KEY": "", "DASHSCOPE_API_KEY": ""}},
			[]string{"The agent Qwen Code (provider \"qwen\") is not signed in", "Use OpenAI API key: Requires setting the `OPENAI_API_KEY` environment variable"}},
		{config.Provider{ID: "codex-acp", Name: "Codex (ACP)", Command: []string{agentfake.Install(t, agentfake.CodexACP)},
			Env: map[string]string{"HOME": t.TempDir(), "CODEX_HOME": codexHome, "OPENAI_API_KEY": "", "CODEX_API_KEY": "", "NO_BROWSER": "1"}},
			[]string{"The agent Codex (provider \"codex-acp\") is not signed in", "API Key: Use an API key to authenticate"}},
		{config.Provider{ID: "claude-agent", Name: "Claude (ACP)", Command: []string{agentfake.Install(t, agentfake.ClaudeAgentACP)},
			Env: claudeAgentEnv(t, "")},
			[]string{"The agent Claude Agent (provider \"claude-agent\") is not signed in", "session/prompt", "it names no sign-in method"}},
	}
	r := Start(t, Options{Config: func(cfg *config.Config) {
		for _, c := range cases {
			c.prov.Type = config.TypeACP
			cfg.Providers = append(cfg.Providers, c.prov)
		}
	}})
	mids := make([]string, len(cases))
	start := time.Now()
	for i, c := range cases {
		a := r.NewSession(map[string]any{"title": c.prov.ID, "provider": c.prov.ID})
		mids[i] = r.Message(a.ID, "hello")
	}
	for i, c := range cases {
		turn := r.WaitTurn(mids[i], 90*time.Second, "done", "error", "stopped")
		t.Logf("%s without credentials: %s after %s: %s", c.prov.ID, turn.Status, time.Since(start).Round(time.Millisecond), turn.Error)
		if turn.Status != "error" {
			t.Errorf("%s: turn ended %s %q, want an error", c.prov.ID, turn.Status, turn.Reply)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(turn.Error, w) {
				t.Errorf("%s: error %q, want it to say %q", c.prov.ID, turn.Error, w)
			}
		}
	}
}
