package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// R18.26: a provider whose user: does not exist: `relay serve` (and `relay
// worker`) exit 2 at start with one line naming the provider and the user.
func TestUnknownUserExit2(t *testing.T) {
	cleanEnv(t)
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte("folders: [/tmp]\nproviders:\n  - id: agent\n    type: exec\n    command: [/bin/true]\n    user: no-such-user-r1826\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--addr", "127.0.0.1:0", "--owner-token", "x-test-token-0123456789", "--config", cfg},
		{"worker", "--redis", "redis://127.0.0.1:1/0", "--config", cfg},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 {
			t.Fatalf("relay %s with an unknown user: exit %d, want 2 (stderr %q)", args[0], code, errOut)
		}
		oneLine(t, "relay "+args[0], errOut)
		if !strings.Contains(errOut, `providers[0].user (provider "agent"): user "no-such-user-r1826" does not exist on this machine`) {
			t.Fatalf("relay %s: stderr %q", args[0], errOut)
		}
	}
}
