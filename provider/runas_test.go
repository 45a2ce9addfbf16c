//go:build linux

package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// R18.26, issue 33's HIGH finding "terminal/create runs any command as the
// relay's own user": a provider's user: runs every agent process (and, in
// relaytest, every ACP terminal) as that OS user. These tests switch to
// nobody (65534), so they need root (as in CI).

const nobodyUID = 65534

// runAsNobody is the provider user nobody for a relay running as root.
func runAsNobody(t *testing.T) *RunAs {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running processes as another user needs root (CI runs the tests as root)")
	}
	u, err := LookupRunAs("nobody", 0)
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != nobodyUID || !u.switches {
		t.Fatalf("nobody: %+v", u)
	}
	return u
}

// openDir is a fresh folder in the temp folder that every user may enter
// and write (t.TempDir's parent is 0700: nobody could not reach it).
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "relay-runas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRunAsLookup(t *testing.T) {
	if _, err := LookupRunAs("no-such-user-r1826", 0); err == nil || err.Error() != `user "no-such-user-r1826" does not exist on this machine` {
		t.Fatalf("unknown user: %v", err)
	}
	if _, err := LookupRunAs("4000000000", 0); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("unknown uid: %v", err)
	}
	// A relay that is not root cannot switch to another user.
	_, err := LookupRunAs("nobody", 1000)
	if err == nil || err.Error() != `the relay runs as uid 1000, not root, so it cannot run processes as user "nobody" (uid 65534): start the relay as root, or leave user out` {
		t.Fatalf("non-root relay: %v", err)
	}
	// A relay already running as the user has nothing to switch.
	u, err := LookupRunAs("nobody", nobodyUID)
	if err != nil || u.switches || u.procAttr().Credential != nil {
		t.Fatalf("relay as nobody: %+v %v", u, err)
	}
	// Root switches: uid, primary gid, groups; by name or by uid.
	for _, name := range []string{"nobody", "65534"} {
		u, err := LookupRunAs(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := u.procAttr()
		if !a.Setpgid || a.Pdeathsig != syscall.SIGKILL || a.Credential == nil || a.Credential.Uid != nobodyUID ||
			a.Credential.Gid != u.GID || len(a.Credential.Groups) == 0 || u.Name != "nobody" || u.Home == "" {
			t.Fatalf("%s: %+v %+v", name, u, a)
		}
	}
	var none *RunAs
	if a := none.procAttr(); a.Credential != nil || !a.Setpgid {
		t.Fatalf("no user: %+v", a)
	}
	u, err = LookupRunAs("nobody", 0)
	if err != nil {
		t.Fatal(err)
	}
	if env := u.withEnv(map[string]string{"A": "b"}); env["HOME"] != u.Home || env["USER"] != "nobody" || env["LOGNAME"] != "nobody" || env["A"] != "b" {
		t.Fatalf("env: %v", env)
	}
	if env := u.withEnv(map[string]string{"HOME": "/srv/agent"}); env["HOME"] != "/srv/agent" {
		t.Fatalf("the provider's own HOME must win: %v", env)
	}
}

// The exec provider with user: nobody: the agent runs as 65534 (before
// the fix: as the relay's uid 0), with nobody's HOME, and reads its MCP
// config file (still 0600, now nobody's) also from a folder of the relay's
// (made 0711, not listable); with sandbox: bwrap, bwrap itself runs as
// nobody and the agent still reads its file.
func TestRunAsExec(t *testing.T) {
	u := runAsNobody(t)
	defer goleak.VerifyNone(t)
	for _, sandboxed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox=%v", sandboxed), func(t *testing.T) {
			var sb *Sandbox
			if sandboxed {
				sb = &Sandbox{Bwrap: needBwrap(t)}
			}
			base := openDir(t)
			folder := mkdir(t, filepath.Join(base, "folder"))
			if err := os.Chmod(folder, 0o777); err != nil {
				t.Fatal(err)
			}
			bin := writeFile(t, filepath.Join(base, "bin", "agent.sh"), `#!/bin/sh
echo "uid=$(id -u) home=$HOME"
echo "cfg=$(stat -c %a:%u "$RELAY_MCP_CONFIG")"
grep -q "$RELAY_TOKEN" "$RELAY_MCP_CONFIG" && echo READ_CONFIG
echo "others=$(ls "$(dirname "$RELAY_MCP_CONFIG")" 2>/dev/null | grep -c other-session)"
echo x > "$PWD/w" && echo WROTE_FOLDER
`, 0o755)
			// A folder of the relay's own (0700, root's) for the MCP config files.
			cfgDir := filepath.Join(base, "mcp")
			if err := os.Mkdir(cfgDir, 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(cfgDir, "relay-mcp-1-other-session-x.json"), `{"token":"other"}`, 0o600)
			c := ExecConfig{ID: "x", Command: []string{bin}, ConfigDir: cfgDir, User: u, Sandbox: sb}
			if sb != nil {
				sb.RO = []string{filepath.Dir(bin)}
				sb.Hide = NewExec(c).SandboxHidden()
			}
			turn := execTurn(t)
			turn.Cwd = folder
			res, _, err := runExec(t, c, turn)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("uid=65534 home=%s\ncfg=600:65534\nREAD_CONFIG\nothers=0\nWROTE_FOLDER", u.Home)
			if strings.TrimSpace(res.Text) != want {
				t.Fatalf("the agent reported\n%s\nwant\n%s", res.Text, want)
			}
			if fi, err := os.Stat(cfgDir); err != nil || fi.Mode().Perm() != 0o711 {
				t.Fatalf("the MCP config folder: %v %v", fi.Mode(), err)
			}
		})
	}
}

// Agent CLIs with user: nobody: Claude Code reads its per-turn MCP config in
// the relay's state folder, Gemini CLI writes its own home (nobody's) and
// reads the settings the relay wrote there; neither lists the other
// sessions' files; with and without the sandbox.
func TestRunAsCLI(t *testing.T) {
	u := runAsNobody(t)
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		typ, body string
	}{
		{TypeClaudeCode, `cfg=""
for a in "$@"; do case "$a" in --mcp-config=*) cfg="${a#--mcp-config=}";; esac; done
own=no; grep -q "$RELAY_TOKEN" "$cfg" && own=yes
n=$(ls -A "$STATE/mcp" 2>/dev/null | grep -c other-session)
echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"uid=$(id -u) own=$own others=$n\",\"session_id\":\"11111111-2222-4333-8444-555555555555\"}"`},
		{TypeGeminiCLI, `own=no; echo chat > "$GEMINI_CLI_HOME/.gemini/chat" && grep -q httpUrl "$GEMINI_CLI_HOME/.gemini/settings.json" && own=yes
n=$(ls -A "$STATE/gemini" 2>/dev/null | grep -c other-session)
echo '{"type":"init","session_id":"aaaaaaaa-2222-4333-8444-555555555555","model":"m1"}'
echo "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"uid=$(id -u) own=$own others=$n\",\"delta\":true}"
echo '{"type":"result","status":"success","stats":{"input_tokens":1,"output_tokens":1}}'`},
	} {
		for _, sandboxed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sandbox=%v", tc.typ, sandboxed), func(t *testing.T) {
				var sb *Sandbox
				if sandboxed {
					sb = &Sandbox{Bwrap: needBwrap(t)}
				}
				base := openDir(t)
				folder := mkdir(t, filepath.Join(base, "folder"))
				state := filepath.Join(base, "state")
				if err := os.Mkdir(state, 0o700); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(state, "mcp", "relay-mcp-1-other-session-x.json"), `{"token":"other"}`, 0o600)
				writeFile(t, filepath.Join(state, "gemini", "other-session", ".gemini", "chat"), "secret chat", 0o600)
				for _, d := range []string{filepath.Join(state, "mcp"), filepath.Join(state, "gemini")} {
					if err := os.Chmod(d, 0o700); err != nil {
						t.Fatal(err)
					}
				}
				bin := writeFile(t, filepath.Join(base, "bin", "cli.sh"), "#!/bin/sh\n"+tc.body+"\n", 0o755)
				if sb != nil {
					sb.RO = []string{filepath.Dir(bin)}
				}
				p, err := NewCLI(CLIConfig{ID: "fake", Name: "Fake", Type: tc.typ, Command: []string{"/bin/sh", bin}, StateDir: state,
					Env: map[string]string{"STATE": state}, Sandbox: sb, User: u})
				if err != nil {
					t.Fatal(err)
				}
				if sb != nil {
					sb.Hide = p.SandboxHidden()
				}
				turn := execTurn(t)
				turn.Cwd = folder
				res, _, err := runCLI(t, p, turn)
				if err != nil {
					t.Fatal(err)
				}
				if want := "uid=65534 own=yes others=0"; res.Text != want {
					t.Fatalf("reply %q, want %q", res.Text, want)
				}
				if tc.typ == TypeGeminiCLI {
					home := GeminiHome(state, turn.SessionID)
					for _, f := range []string{home, filepath.Join(home, ".gemini"), filepath.Join(home, ".gemini", "settings.json")} {
						fi, err := os.Lstat(f)
						if err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobodyUID {
							t.Fatalf("%s is not nobody's: %v", f, err)
						}
					}
				}
			})
		}
	}
}

// The Gemini CLI home belongs to the user, who may put links in it: the
// relay, writing the next turn's settings as root, never follows one out.
func TestRunAsGeminiHomeLink(t *testing.T) {
	u := runAsNobody(t)
	base := openDir(t)
	state := filepath.Join(base, "state")
	outside := mkdir(t, filepath.Join(base, "outside"))
	p, err := NewCLI(CLIConfig{ID: "g", Type: TypeGeminiCLI, Command: []string{"/bin/true"}, StateDir: state, User: u})
	if err != nil {
		t.Fatal(err)
	}
	home := GeminiHome(state, "s-1")
	if err := p.writeGeminiHome(home, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// The user swaps its .gemini for a link to a folder of root's.
	if err := os.RemoveAll(filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := p.writeGeminiHome(home, []byte("{}")); err == nil {
		t.Fatal("the relay wrote the settings through the user's link")
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Fatalf("the relay wrote outside the home: %v", ents)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the folder behind the link changed owner: %v", err)
	}
}

// ACP file requests as the agent's user (R18.26): a file only root may read
// stays closed to it, what it writes belongs to it, and the relay's other
// threads keep root's identity; a panic comes back to the caller.
func TestRunAsFiles(t *testing.T) {
	u := runAsNobody(t)
	dir := openDir(t)
	secret := writeFile(t, filepath.Join(dir, "secret"), "root only", 0o600)
	err := u.files(func() error {
		f, err := os.Open(secret)
		if err == nil {
			_ = f.Close()
		}
		return err
	})
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("nobody opened root's 0600 file: %v", err)
	}
	made := filepath.Join(dir, "sub", "made")
	if err := u.files(func() error {
		if err := os.MkdirAll(filepath.Dir(made), 0o755); err != nil {
			return err
		}
		return os.WriteFile(made, []byte("x"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{made, filepath.Dir(made)} {
		fi, err := os.Stat(p)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobodyUID || fi.Sys().(*syscall.Stat_t).Gid != u.GID {
			t.Fatalf("%s is not nobody's: %v", p, err)
		}
	}
	// Every thread of the relay is still root's: many opens after, on any thread.
	for i := 0; i < 50; i++ {
		if _, err := os.ReadFile(secret); err != nil {
			t.Fatalf("the relay lost its own identity: %v", err)
		}
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("panic %v, want boom", v)
			}
		}()
		_ = u.files(func() error { panic("boom") })
	}()
	var none *RunAs
	if err := none.files(func() error { _, err := os.ReadFile(secret); return err }); err != nil {
		t.Fatal(err)
	}
}

// The sandbox run as the provider's user: a hidden path that user cannot
// reach (the data directory under root's 0700 home) is left alone, as bwrap
// (now nobody) could not mount over it and nobody cannot read it anyway; a
// hidden path it can reach is still hidden.
func TestRunAsSandboxHide(t *testing.T) {
	u := runAsNobody(t)
	bwrap := needBwrap(t)
	// Outside /tmp: the sandbox's own /tmp would hide them whatever Hide says.
	closedDir, err := os.MkdirTemp("/var/tmp", "relay-runas-closed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(closedDir) })
	openHome, err := os.MkdirTemp("/var/tmp", "relay-runas-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(openHome) })
	if err := os.Chmod(openHome, 0o755); err != nil {
		t.Fatal(err)
	}
	closedData := mkdir(t, filepath.Join(closedDir, "data")) // closedDir is 0700: nobody cannot pass
	openData := mkdir(t, filepath.Join(openHome, "data"))
	writeFile(t, filepath.Join(openData, "visible-secret"), "x", 0o644)
	base := openDir(t)
	folder := mkdir(t, filepath.Join(base, "folder"))
	bin := writeFile(t, filepath.Join(base, "bin", "agent.sh"), `#!/bin/sh
echo "uid=$(id -u) open=$(ls -A "$OPEN" 2>&1 | wc -l) closed=$(ls "$CLOSED" >/dev/null 2>&1 && echo listed || echo no)"
`, 0o755)
	sb := &Sandbox{Bwrap: bwrap, RO: []string{filepath.Dir(bin)}, Hide: []string{closedData, openData}}
	turn := execTurn(t)
	turn.Cwd = folder
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{bin}, User: u, Sandbox: sb,
		Env: map[string]string{"OPEN": openData, "CLOSED": closedData}}, turn)
	if err != nil {
		t.Fatal(err)
	}
	if want := "uid=65534 open=0 closed=no"; strings.TrimSpace(res.Text) != want {
		t.Fatalf("the agent reported %q, want %q", res.Text, want)
	}
}

// A folder of the relay's for the user's files that lies where the user
// cannot pass (under a 0700 folder) is refused with a clear error, not left
// for the agent to fail on.
func TestRunAsReachRefused(t *testing.T) {
	u := runAsNobody(t)
	closed := t.TempDir() // its parent is 0700
	d := mkdir(t, filepath.Join(closed, "mcp"))
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	err := u.reach(d)
	if err == nil || !strings.Contains(err.Error(), `user "nobody" cannot reach `+d) {
		t.Fatalf("reach: %v", err)
	}
	// A folder someone else owns is refused too: its owner could swap the files.
	other := mkdir(t, filepath.Join(openDir(t), "other"))
	if err := os.Chown(other, nobodyUID, nobodyUID); err != nil {
		t.Fatal(err)
	}
	if err := u.reach(other); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, not to the relay") {
		t.Fatalf("reach of nobody's folder: %v", err)
	}
}

// Without a state folder of its own, an agent CLI run as another user keeps
// its state in the temp folder, named after both uids (the relay's cache
// folder is in root's home, which the user cannot enter), and works there.
func TestRunAsCLIDefaultState(t *testing.T) {
	u := runAsNobody(t)
	tmp := openDir(t)
	t.Setenv("TMPDIR", tmp)
	base := openDir(t)
	folder := mkdir(t, filepath.Join(base, "folder"))
	bin := writeFile(t, filepath.Join(base, "bin", "cli.sh"), `#!/bin/sh
cfg=""
for a in "$@"; do case "$a" in --mcp-config=*) cfg="${a#--mcp-config=}";; esac; done
own=no; grep -q "$RELAY_TOKEN" "$cfg" && own=yes
echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"uid=$(id -u) own=$own\",\"session_id\":\"11111111-2222-4333-8444-555555555555\"}"
`, 0o755)
	p, err := NewCLI(CLIConfig{ID: "c", Type: TypeClaudeCode, Command: []string{"/bin/sh", bin}, User: u})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tmp, "relay-agents-0-as-65534"); p.c.StateDir != want {
		t.Fatalf("state folder %s, want %s", p.c.StateDir, want)
	}
	turn := execTurn(t)
	turn.Cwd = folder
	res, _, err := runCLI(t, p, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "uid=65534 own=yes" {
		t.Fatalf("reply %q", res.Text)
	}
	if fi, err := os.Lstat(p.c.StateDir); err != nil || fi.Mode().Perm() != 0o711 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the state folder: %v %v", fi, err)
	}
}

// files hands its thread back with the relay's identity and never lets it
// end: an agent started earlier from that thread holds a parent-death
// signal tied to the thread (Pdeathsig, bwrap --die-with-parent) and would
// be killed with it. The threads fn ran on are all still there after.
func TestRunAsFilesKeepsThreads(t *testing.T) {
	u := runAsNobody(t)
	var mu sync.Mutex
	tids := map[int]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				if err := u.files(func() error {
					mu.Lock()
					tids[unix.Gettid()] = true
					mu.Unlock()
					return nil
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// A thread that ends is gone from /proc/self/task within moments; look
	// for a while, on every thread fn ran on.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for tid := range tids {
			if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
				t.Fatalf("thread %d that files ran on ended: an agent it started would be killed with it", tid)
			}
			// Its identity is the relay's again.
			b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
			if err == nil && !strings.Contains(string(b), "\nUid:\t0\t0\t0\t0\n") {
				t.Fatalf("thread %d kept another identity:\n%s", tid, b)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
