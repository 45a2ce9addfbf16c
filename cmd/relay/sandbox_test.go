package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// R18.31: a provider with sandbox: bwrap and no bwrap on PATH: `relay serve`
// (and `relay worker`) exit 2 at start with one line naming the provider and
// how to install it.
func TestSandboxWithoutBwrapExit2(t *testing.T) {
	cleanEnv(t)
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte("folders: [/tmp]\nproviders:\n  - id: boxed\n    type: exec\n    command: [/bin/true]\n    sandbox: bwrap\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir()) // an empty folder: no bwrap
	for _, args := range [][]string{
		{"serve", "--addr", "127.0.0.1:0", "--owner-token", "x-test-token-0123456789", "--config", cfg},
		{"worker", "--redis", "redis://127.0.0.1:1/0", "--config", cfg},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 {
			t.Fatalf("relay %s with sandbox: bwrap and no bwrap: exit %d, want 2 (stderr %q)", args[0], code, errOut)
		}
		oneLine(t, "relay "+args[0], errOut)
		if !strings.Contains(errOut, `providers[0].sandbox is bwrap (provider "boxed"), but bwrap is not on PATH (install bubblewrap: apt-get install bubblewrap)`) {
			t.Fatalf("relay %s: stderr %q", args[0], errOut)
		}
	}
}
