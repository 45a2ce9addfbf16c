package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// R17.1: the agent CLI types load with args, env and no command (the
// default binary is the provider's business); timing.agent_silence.
func TestLoadAgentCLIProviders(t *testing.T) {
	withHome(t)
	path := writeFile(t, `
folders: [/srv]
providers:
  - id: claude
    type: claude-code
    args: [--max-turns, "30"]
    env: {ANTHROPIC_API_KEY: k}
    models: [claude-sonnet-5-5]
  - id: codex
    type: codex
    command: [/opt/codex/bin/codex, --profile, work]
  - id: gemini
    type: gemini-cli
timing:
  agent_silence: 90s
`)
	c, err := Load(map[string]string{"config": path}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := c.Provider("claude")
	if cl.Type != TypeClaudeCode || !slices.Equal(cl.Args, []string{"--max-turns", "30"}) || cl.Env["ANTHROPIC_API_KEY"] != "k" ||
		cl.DefaultModel != "claude-sonnet-5-5" || len(cl.Command) != 0 {
		t.Fatalf("claude %+v", cl)
	}
	if cx, _ := c.Provider("codex"); cx.Type != TypeCodex || !slices.Equal(cx.Command, []string{"/opt/codex/bin/codex", "--profile", "work"}) {
		t.Fatalf("codex %+v", cx)
	}
	if g, _ := c.Provider("gemini"); g.Type != TypeGeminiCLI || !IsAgentCLI(g.Type) || IsAgentCLI(TypeExec) {
		t.Fatalf("gemini %+v", g)
	}
	if c.Timing.AgentSilence != 90*time.Second {
		t.Fatalf("agent_silence %s", c.Timing.AgentSilence)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"providers: [{id: x, type: exec, command: [a], args: [b]}]", "providers[0].args is only for the agent CLI types"},
		{"providers: [{id: x, type: codex, command: [\"\"]}]", "providers[0].command[0] must name the codex binary"},
		{"timing: {agent_silence: -1s}", "timing.agent_silence must not be negative"},
	} {
		_, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\n"+bad.yaml+"\n")}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
