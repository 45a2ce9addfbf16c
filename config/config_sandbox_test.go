package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// R18.31: sandbox: bwrap with sandbox_rw and sandbox_ro (~ expanded) on the
// types that run processes; refused on openai and scripted, with another
// value, with paths that are not absolute or are /, and sandbox paths
// without the sandbox.
func TestLoadSandbox(t *testing.T) {
	home := withHome(t)
	path := writeFile(t, `
folders: [/srv]
providers:
  - id: claude
    type: claude-code
    sandbox: bwrap
    sandbox_rw: [~/.claude, ~/.claude.json]
    sandbox_ro: [/opt/tools]
  - id: sh
    type: exec
    command: [agent]
    sandbox: none
  - id: acp
    type: acp
    command: [gemini, --acp]
    sandbox: bwrap
`)
	c, err := Load(map[string]string{"config": path}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Provider("claude")
	if !p.Sandboxed() || !slices.Equal(p.SandboxRW, []string{filepath.Join(home, ".claude"), filepath.Join(home, ".claude.json")}) ||
		!slices.Equal(p.SandboxRO, []string{"/opt/tools"}) {
		t.Fatalf("claude provider %+v", p)
	}
	if p, _ := c.Provider("sh"); p.Sandboxed() {
		t.Fatalf("sandbox: none is sandboxed: %+v", p)
	}
	if p, _ := c.Provider("acp"); !p.Sandboxed() {
		t.Fatalf("acp provider not sandboxed: %+v", p)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"providers: [{id: x, type: openai, base_url: \"http://127.0.0.1:1/v1\", sandbox: bwrap}]",
			"config: providers[0].sandbox applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type openai runs none"},
		{"providers: [{id: scripted, type: scripted, sandbox: bwrap}]", "providers[0].sandbox applies only to the types that run agent processes"},
		{"providers: [{id: x, type: exec, command: [a], sandbox: firejail}]", `config: providers[0].sandbox must be bwrap or none (got "firejail")`},
		{"providers: [{id: x, type: exec, command: [a], sandbox_rw: [/x]}]", "config: providers[0].sandbox_rw and sandbox_ro apply only with sandbox: bwrap"},
		{"providers: [{id: x, type: exec, command: [a], sandbox: none, sandbox_ro: [/x]}]", "apply only with sandbox: bwrap"},
		{"providers: [{id: x, type: exec, command: [a], sandbox: bwrap, sandbox_rw: [rel/x]}]", `config: providers[0].sandbox_rw[0] must be an absolute path (got "rel/x")`},
		{"providers: [{id: x, type: exec, command: [a], sandbox: bwrap, sandbox_ro: [/a, /]}]", "config: providers[0].sandbox_ro[1] must not be /"},
		{"providers: [{id: x, type: exec, command: [a], sandbox: bwrap, sandbox_rw: /x}]", "providers[0].sandbox_rw must be a list of strings"},
	} {
		_, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\n"+bad.yaml+"\n")}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
