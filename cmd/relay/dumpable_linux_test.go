//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// R18.17: an exec agent, running as the relay's own user, tries to read the
// relay's /proc/<pid>/environ (the owner token, REDIS_URL with its
// password): it is refused. The same agent reads the environment of another
// process of that user (a control: the refusal is the relay's doing, not
// the test's set-up). Root may read any process's environment, so relay and
// agent run as the unprivileged user nobody; the test needs root to start
// them so.
func TestAgentCannotReadRelayEnviron(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the relay as another user (CI runs as root)")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "relay-r1817-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := filepath.Join(base, "work")
	data := filepath.Join(base, "data")
	for _, d := range []string{work, data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}

	// The control: a process of the same user with a secret in its environment.
	control := exec.Command("sleep", "60")
	control.Env = []string{"CONTROL_SECRET=visible-to-the-same-user"}
	control.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := control.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = control.Process.Kill(); _ = control.Wait() })

	// The agent prints what it can read of its parent's (the relay's) and the
	// control's environment.
	spy := fmt.Sprintf(`exec 2>&1; printf 'relay:'; tr '\0' ' ' < /proc/$PPID/environ; printf '\ncontrol:'; tr '\0' ' ' < /proc/%d/environ`, control.Process.Pid)
	cfgFile := filepath.Join(base, "relay.yaml")
	cfg := fmt.Sprintf("folders: [%q]\nsettings:\n  agent_sessions: true\nproviders:\n  - id: spy\n    type: exec\n    command: [/bin/sh, -c, %q]\n", work, spy)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	const owner = "r1817-owner-token-must-stay-secret"
	relay := exec.Command(bin, "serve", "--addr", addr, "--config", cfgFile, "--data-dir", data)
	relay.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "RELAY_OWNER_TOKEN=" + owner}
	relay.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var logs bytes.Buffer
	relay.Stdout, relay.Stderr = &logs, &logs
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Process.Signal(syscall.SIGTERM); _ = relay.Wait() })

	api := func(method, path, body string, out any) int {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+owner)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	if !testwait.Poll(30*time.Second, 100*time.Millisecond, func() bool { return api("GET", "/healthz", "", nil) == http.StatusOK }) {
		t.Fatalf("relay did not start:\n%s", logs.String())
	}
	var created struct{ ID string }
	if st := api("POST", "/api/v1/sessions", `{"provider":"spy","text":"look around"}`, &created); st != http.StatusCreated {
		t.Fatalf("create session: %d\n%s", st, logs.String())
	}
	var reply string
	if !testwait.Poll(time.Until(deadline), 200*time.Millisecond, func() bool {
		var s struct {
			Messages []struct{ Role, Text string }
		}
		api("GET", "/api/v1/sessions/"+created.ID, "", &s)
		for _, m := range s.Messages {
			if m.Role == "agent" || m.Role == "assistant" {
				reply = m.Text
			}
		}
		return reply != ""
	}) {
		t.Fatalf("the agent's turn did not end:\n%s", logs.String())
	}
	if !strings.Contains(reply, "control:CONTROL_SECRET=visible-to-the-same-user") {
		t.Fatalf("the control failed: the agent could not read another process of its user, so the test proves nothing:\n%s", reply)
	}
	if strings.Contains(reply, owner) || strings.Contains(reply, "RELAY_OWNER_TOKEN") {
		t.Fatalf("the agent read the relay's environment (R18.17):\n%s", reply)
	}
	if !strings.Contains(reply, "Permission denied") {
		t.Fatalf("the agent's read of the relay's environment was not refused:\n%s", reply)
	}
}
