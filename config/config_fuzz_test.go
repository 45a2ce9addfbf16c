package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadYAML feeds arbitrary bytes as the YAML config file, both through
// the file decoder alone and through Load (file written to a temp dir, no
// environment, the file named by the config flag).
//
// Properties: no panic; Load returns either a config that validates or an
// error, never both; every error is one line and starts with "config FILE: "
// (a problem in the file) or "config: " (validation), as the package promises;
// a decoder error is exactly Load's error; an accepted config has the
// scripted provider and a default_cwd inside its folders.
func FuzzLoadYAML(f *testing.F) {
	for _, name := range []string{"spec.yaml", "custom.yaml", "typo.yaml"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("~\n"))
	f.Add([]byte("---\nname: a\n---\nname: b\n"))
	f.Add([]byte("name: [a, b]\n"))
	f.Add([]byte("folders: [~]\n"))
	f.Add([]byte("folders: [\"~\", /srv/../x]\ndefault_cwd: \"~/x\"\n"))
	f.Add([]byte("base: &b {agent_sessions: true}\nsettings: *b\n"))
	f.Add([]byte("settings: &s\n  max_wait_seconds: 600\ntiming: *s\n"))
	f.Add([]byte("settings:\n  <<: {agent_sessions: true}\n"))
	f.Add([]byte("settings:\n  max_wait_seconds: 99999999999999999999999\n  quiet_task_minutes: 0x10\n"))
	f.Add([]byte("timing:\n  coalesce: -1s\n  peer_poll: 9999999999h\n"))
	f.Add([]byte("name: !!binary aGVsbG8=\n"))
	f.Add([]byte("? [complex, key]\n: 1\n"))
	f.Add([]byte("providers:\n  - id: x\n    type: exec\n    command: [\"\"]\n    env: {A: 1, A: 2}\n"))
	f.Add([]byte("providers:\n  - id: Bad ID\n  - id: scripted\n    type: openai\n"))
	f.Add([]byte("providers:\n  - id: o\n    type: openai\n    base_url: \"http://[::1\"\n    switch_to: o\n"))
	f.Add([]byte("limits: {hops: 0}\nlimits: {hops: 1}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("\tname: x\n"))
	f.Add([]byte("name: \"\\xff\\n\"\n"))

	dir := f.TempDir()
	path := filepath.Join(dir, "relay.yaml")
	home, _ := os.UserHomeDir()

	f.Fuzz(func(t *testing.T, data []byte) {
		var direct Config
		d := &fileDecoder{path: path, home: home}
		decErr := d.decode(&direct, data)
		if decErr != nil {
			checkErrLine(t, data, decErr, "config "+path+": ")
		}

		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatalf("write config: %v", err)
		}
		c, err := Load(map[string]string{"config": path}, nil)
		if decErr != nil {
			if err == nil || err.Error() != decErr.Error() {
				t.Fatalf("file %q: the decoder says %v, Load says %v", data, decErr, err)
			}
			return
		}
		if err != nil {
			checkErrLine(t, data, err, "config: ")
			return
		}
		if c.ConfigPath != path {
			t.Fatalf("file %q: ConfigPath %q", data, c.ConfigPath)
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("file %q: Load accepted a config that does not validate: %v", data, verr)
		}
		if p, ok := c.Provider(ScriptedID); !ok || p.Type != TypeScripted {
			t.Fatalf("file %q: no scripted provider in %+v", data, c.Providers)
		}
		if !Inside(c.Folders, c.DefaultCwd) {
			t.Fatalf("file %q: default_cwd %q outside folders %q", data, c.DefaultCwd, c.Folders)
		}
	})
}

func checkErrLine(t *testing.T, data []byte, err error, prefix string) {
	t.Helper()
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("file %q: error is not one line: %q", data, msg)
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Fatalf("file %q: error %q does not start with %q", data, msg, prefix)
	}
}
