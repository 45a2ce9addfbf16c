package config

import (
	"strings"
	"testing"
)

// R18.26: user: (a name or a uid) on the types that run processes; refused
// on openai and scripted, and when it is not a name or a uid.
// Whether the user exists is the app's check at start.
func TestLoadUser(t *testing.T) {
	path := writeFile(t, `
folders: [/srv]
providers:
  - id: sh
    type: exec
    command: [agent]
    user: agent-1
  - id: acp
    type: acp
    command: [gemini, --acp]
    user: "65534"
    sandbox: bwrap
  - id: claude
    type: claude-code
`)
	c, err := Load(map[string]string{"config": path}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"sh": "agent-1", "acp": "65534", "claude": ""} {
		if p, _ := c.Provider(id); p.User != want {
			t.Fatalf("provider %s: user %q, want %q", id, p.User, want)
		}
	}
	for _, typ := range []string{"codex", "gemini-cli", "claude-code"} {
		if _, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\nproviders: [{id: x, type: "+typ+", user: nobody}]\n")}, envOf(nil)); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"providers: [{id: x, type: openai, base_url: \"http://127.0.0.1:1/v1\", user: nobody}]",
			"config: providers[0].user applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type openai runs none"},
		{"providers: [{id: scripted, type: scripted, user: nobody}]", "providers[0].user applies only to the types that run agent processes"},
		{"providers: [{id: x, type: exec, command: [a], user: \"no body\"}]", `config: providers[0].user must be a user name or a numeric uid (got "no body")`},
		{"providers: [{id: x, type: exec, command: [a], user: \"a:b\"}]", `providers[0].user must be a user name or a numeric uid`},
		{"providers: [{id: x, type: exec, command: [a], user: \"-r\"}]", `providers[0].user must be a user name or a numeric uid`},
		{"providers: [{id: x, type: exec, command: [a], user: [a]}]", "providers[0].user must be a string"},
	} {
		_, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\n"+bad.yaml+"\n")}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: got %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
