package provider

import (
	"os"
	"path/filepath"
	"testing"
)

// R22.1, R17.1: an ACP agent whose command is missing, not executable or
// not configured is unavailable with a reason; one that exists is available.
func TestACPAvailability(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runnable := filepath.Join(dir, "agent")
	if err := os.WriteFile(runnable, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command []string
		status  string
		reason  string
	}{
		{nil, StatusUnavailable, "no command is configured"},
		{[]string{"no-such-acp-agent-xyz", "--acp"}, StatusUnavailable, `the ACP agent command "no-such-acp-agent-xyz" was not found on PATH`},
		{[]string{plain}, StatusUnavailable, `the ACP agent command "` + plain + `" does not exist or is not executable`},
		{[]string{runnable, "--acp"}, "", ""},
	} {
		p := NewACP(ACPConfig{ID: "a", Command: tc.command})
		in := p.Info()
		p.Close()
		if in.Status != tc.status || in.StatusReason != tc.reason {
			t.Errorf("command %q: status %q reason %q, want %q %q", tc.command, in.Status, in.StatusReason, tc.status, tc.reason)
		}
	}
}
