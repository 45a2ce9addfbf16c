package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// The helper process of TestExecAgentDiesWithRelay: it plays a relay process
// running one exec turn whose agent writes its pid and sleeps.
func TestHelperRelayProcess(t *testing.T) {
	pidFile := os.Getenv("RELAY_TEST_HELPER_PIDFILE")
	if pidFile == "" {
		t.Skip("helper process only")
	}
	sh := filepath.Join(filepath.Dir(pidFile), "agent.sh")
	if err := os.WriteFile(sh, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _ = NewExec(ExecConfig{ID: "x", Command: []string{sh}}).Run(context.Background(), Turn{SessionID: "s", Cwd: filepath.Dir(pidFile)}, nil)
}

// R18.11: an agent process whose relay process died is killed with it (Pdeathsig).
func TestExecAgentDiesWithRelay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "agent.pid")
	relayProc := exec.Command(os.Args[0], "-test.run=^TestHelperRelayProcess$")
	relayProc.Env = append(os.Environ(), "RELAY_TEST_HELPER_PIDFILE="+pidFile)
	if err := relayProc.Start(); err != nil {
		t.Fatal(err)
	}
	var agent int
	testwait.Poll(20*time.Second, 20*time.Millisecond, func() bool {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			agent, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return agent != 0
	})
	if agent == 0 {
		_ = relayProc.Process.Kill()
		t.Fatal("the agent did not start")
	}
	_ = relayProc.Process.Signal(syscall.SIGKILL)
	_ = relayProc.Wait()
	if !testwait.Poll(10*time.Second, 20*time.Millisecond, func() bool { return !processAlive(agent) || isZombie(agent) }) {
		_ = syscall.Kill(agent, syscall.SIGKILL)
		t.Fatalf("the agent (pid %d) outlived its relay process", agent)
	}
}

// isZombie reports a process that exited and waits to be reaped by init.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// R18.11: MCP config files of relay processes that died are removed; those of
// live ones and unrelated files stay.
func TestCleanStaleMCPConfigs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	files := map[string]bool{ // name → removed
		fmt.Sprintf("relay-mcp-%d-sess-1.json", dead.Process.Pid):     true,
		fmt.Sprintf("relay-mcp-%d-sess-2.json", live.Process.Pid):     false,
		fmt.Sprintf("relay-mcp-%d-sess-3.json", os.Getpid()):          false,
		"relay-mcp-notapid-x.json":                                    false,
		"other.json":                                                  false,
		fmt.Sprintf("relay-mcp-%d-sess-4.json.bak", dead.Process.Pid): false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := CleanStaleMCPConfigs(dir)
	if err != nil || n != 1 {
		t.Fatalf("removed %d (%v), want 1", n, err)
	}
	for name, removed := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed=%v, want %v", name, gone, removed)
		}
	}
}
