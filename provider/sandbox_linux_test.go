//go:build linux

package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oar/relay/internal/testwait"
)

// needBwrap is bwrap's path; without it, or where it cannot make its
// namespaces, the test skips, or fails with CI=true (CI installs bubblewrap).
func needBwrap(t *testing.T) string {
	t.Helper()
	p, err := FindBwrap()
	if err == nil {
		if out, perr := exec.Command(p, "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "/bin/true").CombinedOutput(); perr != nil {
			err = fmt.Errorf("bwrap cannot make its namespaces here: %w: %s", perr, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %v", err)
		}
		t.Skipf("the sandbox tests need bubblewrap: %v", err)
	}
	return p
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) string {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// R18.31: the bwrap command line: namespaces, the read-only root, a fresh
// /dev, /proc and /tmp, the folder and the provider's paths, the relay's
// paths hidden (a folder by a tmpfs, a file by /dev/null, a missing one
// left out), a sandbox path inside a hidden folder mounted again after it,
// the turn's own file and the program under /tmp shown, then the command.
func TestSandboxArgs(t *testing.T) {
	t.Setenv("TMPDIR", "") // os.TempDir() is /tmp
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := mkdir(t, filepath.Join(base, "data"))
	keep := mkdir(t, filepath.Join(data, "keep"))
	cfgFile := writeFile(t, filepath.Join(base, "relay.yaml"), "name: x\n", 0o600)
	folder := mkdir(t, filepath.Join(base, "work"))
	mcp := writeFile(t, filepath.Join(base, "mcp", "relay-mcp-1-s.json"), "{}", 0o600)
	prog := writeFile(t, filepath.Join(base, "bin", "agent"), "#!/bin/sh\n", 0o755)
	s := &Sandbox{Bwrap: "/usr/bin/bwrap", RW: []string{keep, "/var/cache/agent/"}, RO: []string{"/opt/tools"},
		Hide: []string{data, cfgFile, filepath.Join(base, "missing"), "/tmp", filepath.Join(base, "mcp")}}
	cmd := &exec.Cmd{Path: prog, Args: []string{"agent", "-x", "--", "a b"}, Dir: filepath.Join(folder, "sub")}
	s.wrap(cmd, folder, sandboxBind{path: mcp}, sandboxBind{path: filepath.Join(base, "home"), rw: true})
	if cmd.Err != nil {
		t.Fatal(cmd.Err)
	}
	want := []string{"/usr/bin/bwrap",
		"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
		"--bind", folder, folder,
		"--bind", keep, keep,
		"--bind", "/var/cache/agent", "/var/cache/agent",
		"--ro-bind", "/opt/tools", "/opt/tools",
		"--tmpfs", data,
		"--ro-bind", "/dev/null", cfgFile,
		"--tmpfs", filepath.Join(base, "mcp"),
		"--bind", keep, keep, // inside the hidden data directory: named on purpose
		"--ro-bind", mcp, mcp,
		"--bind", filepath.Join(base, "home"), filepath.Join(base, "home"),
		"--ro-bind", prog, prog, // under /tmp
		"--chdir", filepath.Join(folder, "sub"),
		"--", prog, "-x", "--", "a b"}
	if cmd.Path != "/usr/bin/bwrap" || !reflect.DeepEqual(cmd.Args, want) {
		t.Fatalf("bwrap command line\n got %q\nwant %q", cmd.Args, want)
	}

	// No sandbox: the command is left as it is.
	var none *Sandbox
	plain := &exec.Cmd{Path: prog, Args: []string{"agent"}, Dir: folder}
	none.wrap(plain, folder)
	if plain.Path != prog || !reflect.DeepEqual(plain.Args, []string{"agent"}) || plain.Err != nil {
		t.Fatalf("nil sandbox changed the command: %q %q %v", plain.Path, plain.Args, plain.Err)
	}
	// A sandbox without a folder to run in refuses to start the command.
	bad := &exec.Cmd{Path: prog, Args: []string{"agent"}}
	s.wrap(bad, "")
	if bad.Err == nil || bad.Start() == nil {
		t.Fatalf("a sandboxed command without a folder started")
	}
}

// confinedScript is an exec agent that tries what R18.31 forbids and says
// what worked: one word per success.
const confinedScript = `
echo in > "$PWD/inside.txt" && echo WROTE_INSIDE
echo out > "$OUTSIDE/x" 2>/dev/null && echo WROTE_OUTSIDE
grep -q data-secret "$DATA/secret" 2>/dev/null && echo READ_DATA
grep -q owner-secret "$CFG" 2>/dev/null && echo READ_CONFIG
for f in /proc/[0-9]*/environ; do
  if grep -q sibling-token-42 "$f" 2>/dev/null; then echo SAW_SIBLING; break; fi
done
ls "$MCPDIR" 2>/dev/null | grep -q other-session && echo SAW_OTHER_MCP
grep -q "$RELAY_TOKEN" "$RELAY_MCP_CONFIG" && echo OWN_MCP
echo > /etc/relay-sandbox-probe 2>/dev/null && rm -f /etc/relay-sandbox-probe && echo WROTE_ETC
echo end
`

// R18.31, MEDIUM finding "a running agent reads a sibling session's token
// from /proc/<pid>/environ": an exec agent in the sandbox writes its folder
// and nothing else, sees no other process's environment, no data directory,
// no config file and no other session's MCP config file. Without the
// sandbox (the same test, sandbox none) every one of these succeeds: the
// attack is real.
func TestSandboxExecConfined(t *testing.T) {
	bwrap := needBwrap(t)
	defer goleak.VerifyNone(t)
	base := t.TempDir()
	folder := mkdir(t, filepath.Join(base, "work"))
	outside := mkdir(t, filepath.Join(base, "outside"))
	data := mkdir(t, filepath.Join(base, "data"))
	writeFile(t, filepath.Join(data, "secret"), "data-secret", 0o600)
	cfgFile := writeFile(t, filepath.Join(base, "relay.yaml"), "owner_token: owner-secret\n", 0o600)
	mcpDir := mkdir(t, filepath.Join(base, "mcp"))
	writeFile(t, filepath.Join(mcpDir, "relay-mcp-1-other-session-x.json"), `{"token":"other"}`, 0o600)
	agent := writeFile(t, filepath.Join(base, "bin", "agent.sh"), "#!/bin/sh\n"+confinedScript, 0o755)

	// A sibling session's agent: a process of the same user with its token.
	sib := exec.Command("sleep", "300")
	sib.Env = append(os.Environ(), "RELAY_TOKEN=sibling-token-42")
	if err := sib.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sib.Process.Kill(); _ = sib.Wait() }()

	for _, tc := range []struct {
		name string
		sb   *Sandbox
		want []string
	}{
		{"none", nil, []string{"WROTE_INSIDE", "WROTE_OUTSIDE", "READ_DATA", "READ_CONFIG", "SAW_SIBLING", "SAW_OTHER_MCP", "OWN_MCP"}},
		{"bwrap", &Sandbox{Bwrap: bwrap, Hide: []string{data, cfgFile, mcpDir}}, []string{"WROTE_INSIDE", "OWN_MCP"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(filepath.Join(outside, "x"))
			turn := execTurn(t)
			turn.Cwd = folder
			res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{agent}, ConfigDir: mcpDir, Sandbox: tc.sb,
				Env: map[string]string{"OUTSIDE": outside, "DATA": data, "CFG": cfgFile, "MCPDIR": mcpDir}}, turn)
			if err != nil {
				t.Fatalf("turn: %v", err)
			}
			got := strings.Fields(res.Text)
			want := append(append([]string(nil), tc.want...), "end")
			if os.Getuid() == 0 && tc.sb == nil {
				want = append(want[:len(want)-1], "WROTE_ETC", "end") // root writes /etc unconfined
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the agent managed %q, want %q", got, want)
			}
			if _, err := os.Stat(filepath.Join(folder, "inside.txt")); err != nil {
				t.Fatalf("the write in the folder did not reach it: %v", err)
			}
		})
	}
}

// R18.31 with R18.11's stop: a stop (the turn's context ends) kills the
// whole sandbox, also processes that ignore SIGTERM and run in the
// background: bwrap dies, and its PID namespace with it.
func TestSandboxStopKillsAll(t *testing.T) {
	bwrap := needBwrap(t)
	defer goleak.VerifyNone(t)
	marker := fmt.Sprint(3000 + rand.IntN(100000))
	agent := writeFile(t, filepath.Join(t.TempDir(), "agent.sh"),
		"#!/bin/sh\ntrap '' TERM\nsleep "+marker+" &\necho started\nsleep "+marker+"\n", 0o755)
	h := &execHost{}
	started := make(chan struct{})
	var once bool
	h.onPartial = func(s string) {
		if !once && strings.Contains(s, "started") {
			once = true
			close(started)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	turn := execTurn(t)
	go func() {
		_, err := NewExec(ExecConfig{ID: "x", Command: []string{agent}, Sandbox: &Sandbox{Bwrap: bwrap}}).Run(ctx, turn, h)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		cancel()
		t.Fatalf("the agent ended before it started: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the agent did not start")
	}
	if !testwait.Poll(20*time.Second, 20*time.Millisecond, func() bool { return sleepers(marker) == 2 }) {
		cancel()
		t.Fatalf("%d sleep %s processes run, want 2", sleepers(marker), marker)
	}
	cancel()
	select {
	case err := <-done:
		t.Logf("Run after the stop: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
	if !testwait.Poll(20*time.Second, 50*time.Millisecond, func() bool { return sleepers(marker) == 0 }) {
		t.Fatalf("processes of the stopped sandbox still run: %d sleep %s", sleepers(marker), marker)
	}
}

// sleepers counts the live processes running "sleep MARKER" (sleep by name or path).
func sleepers(marker string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if err != nil || len(argv) != 2 || filepath.Base(argv[0]) != "sleep" || argv[1] != marker {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil && !isZombie(pid) {
			n++
		}
	}
	return n
}

// R18.31 for the agent CLIs: in the sandbox a CLI reads its own MCP config
// file and writes its own Gemini CLI home, both in the provider's state
// folder, while the other sessions' files there (MCP config files with their
// tokens, Gemini chats) are hidden. Without the sandbox it sees them.
func TestSandboxCLIStateFolder(t *testing.T) {
	bwrap := needBwrap(t)
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		typ, body string
	}{
		{TypeClaudeCode, `cfg=""
for a in "$@"; do case "$a" in --mcp-config=*) cfg="${a#--mcp-config=}";; esac; done
own=no; grep -q "$RELAY_TOKEN" "$cfg" && own=yes
n=$(ls -A "$STATE/mcp" 2>/dev/null | grep -c other-session)
echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"own=$own others=$n\",\"session_id\":\"11111111-2222-4333-8444-555555555555\"}"`},
		{TypeGeminiCLI, `own=no; echo chat > "$GEMINI_CLI_HOME/.gemini/chat" && own=yes
n=$(ls -A "$STATE/gemini" 2>/dev/null | grep -c other-session)
echo '{"type":"init","session_id":"aaaaaaaa-2222-4333-8444-555555555555","model":"m1"}'
echo "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"own=$own others=$n\",\"delta\":true}"
echo '{"type":"result","status":"success","stats":{"input_tokens":1,"output_tokens":1}}'`},
	} {
		for _, sandboxed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sandbox=%v", tc.typ, sandboxed), func(t *testing.T) {
				base := t.TempDir()
				state := mkdir(t, filepath.Join(base, "state"))
				writeFile(t, filepath.Join(state, "mcp", "relay-mcp-1-other-session-x.json"), `{"token":"other"}`, 0o600)
				writeFile(t, filepath.Join(state, "gemini", "other-session", ".gemini", "chat"), "secret chat", 0o600)
				bin := mkdir(t, filepath.Join(base, "bin"))
				scriptPath := writeFile(t, filepath.Join(bin, "cli.sh"), "#!/bin/sh\n"+tc.body+"\n", 0o755)
				var sb *Sandbox
				if sandboxed {
					sb = &Sandbox{Bwrap: bwrap, RO: []string{bin}}
				}
				c := CLIConfig{ID: "fake", Name: "Fake", Type: tc.typ, Command: []string{"/bin/sh", scriptPath}, StateDir: state,
					Env: map[string]string{"STATE": state}, Sandbox: sb}
				p, err := NewCLI(c)
				if err != nil {
					t.Fatal(err)
				}
				if sb != nil {
					sb.Hide = p.SandboxHidden()
				}
				res, _, err := runCLI(t, p, execTurn(t))
				if err != nil {
					t.Fatal(err)
				}
				want := "own=yes others=1"
				if sandboxed {
					want = "own=yes others=0"
				}
				if res.Text != want {
					t.Fatalf("reply %q, want %q", res.Text, want)
				}
			})
		}
	}
}

// The helper process of TestSandboxAgentDiesWithRelay: a relay process
// running one sandboxed exec turn whose agent sleeps.
func TestHelperSandboxedRelay(t *testing.T) {
	marker := os.Getenv("RELAY_TEST_HELPER_SANDBOX_MARKER")
	if marker == "" {
		t.Skip("helper process only")
	}
	dir := t.TempDir()
	_, _ = NewExec(ExecConfig{ID: "x", Command: []string{"sleep", marker}, Sandbox: &Sandbox{Bwrap: os.Getenv("RELAY_TEST_HELPER_BWRAP")}}).
		Run(context.Background(), Turn{SessionID: "s", Cwd: dir}, nil)
}

// R18.11 in the sandbox: an agent whose relay process died is killed with it
// (Pdeathsig kills bwrap, --die-with-parent the sandbox).
func TestSandboxAgentDiesWithRelay(t *testing.T) {
	bwrap := needBwrap(t)
	marker := fmt.Sprint(3000 + rand.IntN(100000))
	relayProc := exec.Command(os.Args[0], "-test.run=^TestHelperSandboxedRelay$")
	relayProc.Env = append(os.Environ(), "RELAY_TEST_HELPER_SANDBOX_MARKER="+marker, "RELAY_TEST_HELPER_BWRAP="+bwrap)
	var out strings.Builder
	relayProc.Stdout, relayProc.Stderr = &out, &out
	if err := relayProc.Start(); err != nil {
		t.Fatal(err)
	}
	if !testwait.Poll(20*time.Second, 20*time.Millisecond, func() bool { return sleepers(marker) == 1 }) {
		_ = relayProc.Process.Kill()
		_ = relayProc.Wait()
		t.Fatalf("the sandboxed agent did not start; the relay process said: %s", out.String())
	}
	_ = relayProc.Process.Kill() // SIGKILL: no cleanup of its own
	_ = relayProc.Wait()
	testwait.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return sleepers(marker) == 0 },
		"the sandboxed agent (sleep %s) outlived its relay process", marker)
}
