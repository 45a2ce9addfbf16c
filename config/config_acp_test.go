package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// R22.1: type acp loads with its command (the agent and its ACP flag), env and
// models; timing.acp_idle; an acp provider without a command is refused.
func TestLoadACPProvider(t *testing.T) {
	withHome(t)
	path := writeFile(t, `
folders: [/srv]
providers:
  - id: gemini-acp
    type: acp
    command: [gemini, --acp]
    env: {GEMINI_CLI_TRUST_WORKSPACE: "true"}
    models: [gemini-2.5-flash]
timing:
  acp_idle: 3m
`)
	c, err := Load(map[string]string{"config": path}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Provider("gemini-acp")
	if p.Type != TypeACP || !slices.Equal(p.Command, []string{"gemini", "--acp"}) || p.Env["GEMINI_CLI_TRUST_WORKSPACE"] != "true" ||
		p.DefaultModel != "gemini-2.5-flash" || IsAgentCLI(p.Type) {
		t.Fatalf("acp provider %+v", p)
	}
	if c.Timing.ACPIdle != 3*time.Minute {
		t.Fatalf("acp_idle %s", c.Timing.ACPIdle)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"providers: [{id: x, type: acp}]", "providers[0].command must name the ACP agent's binary"},
		{"providers: [{id: x, type: acp, command: [\"\"]}]", "providers[0].command must name the ACP agent's binary"},
		{"providers: [{id: x, type: acp, command: [gemini], args: [--acp]}]", "providers[0].args is only for the agent CLI types"},
		{"timing: {acp_idle: -1s}", "timing.acp_idle must not be negative"},
	} {
		_, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\n"+bad.yaml+"\n")}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
