package relaytest

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R18.26 and issue 33's HIGH finding "terminal/create runs any command as
// the relay's own user … and outside whatever user the agent itself runs
// as": a provider's user: runs its agent processes and each ACP terminal as
// that OS user. The tests switch to nobody (65534), so they need root (as in
// CI); everything the agent touches lies in folders every user may enter.

// needRoot skips where the relay cannot switch users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running agents as another user needs a relay running as root (CI runs the tests as root)")
	}
}

// openTempDir is a fresh folder in /tmp that every user may enter and write
// (t.TempDir's parent is 0700, which nobody cannot pass).
func openTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "relay-user-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// copyExecutable copies bin into dir (0755): the shared test binaries live
// in a 0700 folder of root's.
func copyExecutable(t *testing.T, bin, dir string) string {
	t.Helper()
	in, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	dst := filepath.Join(dir, filepath.Base(bin))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// agentUIDs are the real uids of the live processes of bin with env.
func agentUIDs(t *testing.T, bin, env string) []string {
	t.Helper()
	var out []string
	for _, pid := range agentPIDs(bin, env) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				out = append(out, f[1])
			}
		}
	}
	return out
}

// An ACP agent and its terminal: with the agent's command wrapped in
// setpriv (the operator's "sudo -u agent"), the agent runs as nobody but
// the relay started its terminal as root (uid 0: the old behaviour, the
// finding), and read and wrote files for it as root; with user: nobody
// the terminal runs as 65534 too (inside the sandbox bwrap then runs as
// nobody), a root-only file is closed to the agent's fs/read_text_file and
// what its fs/write_text_file makes is nobody's.
func TestUserACPTerminal(t *testing.T) {
	needRoot(t)
	t.Parallel()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	for _, tc := range []struct {
		name, user, sandbox string
		wrap                bool
		termUID             string
		read                string // what the agent's fs/read_text_file of a root-only file got
		fileUID             uint32 // who owns what its fs/write_text_file made
	}{
		// The finding: the relay ran the terminal, and read and wrote
		// files, as root for an agent wrapped to run as nobody.
		{name: "wrapped", wrap: true, termUID: "0", read: "READ: root only", fileUID: 0},
		{name: "user", user: "nobody", termUID: "65534", read: "READ ERROR:", fileUID: 65534},
		{name: "user+bwrap", user: "nobody", sandbox: "bwrap", termUID: "65534", read: "READ ERROR:", fileUID: 65534},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sandbox != "" {
				needBwrap(t)
			}
			t.Parallel()
			base := openTempDir(t)
			folder := filepath.Join(base, "folder")
			state := filepath.Join(base, "state") // FAKE_ACP_STATE: the agent writes its log and sessions there
			for _, d := range []string{folder, state} {
				if err := os.Mkdir(d, 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(folder, "secret.txt"), []byte("root only\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			bin := copyExecutable(t, fakeACPAgent(t), base)
			f := newACPFake(t, map[string]string{"FAKE_ACP_STATE": state})
			f.state = state
			f.prov.Command = []string{bin}
			if tc.wrap {
				f.prov.Command = []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin}
			}
			f.prov.User = tc.user
			f.prov.Sandbox = tc.sandbox
			if tc.sandbox != "" {
				f.prov.SandboxRW = []string{state}
			}
			r, _ := startACP(t, f, func(c *config.Config) { c.Folders, c.DefaultCwd = []string{folder}, folder })
			a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
			reply := doneTurn(t, r, r.Message(a.ID, acpScript(
				map[string]any{"sh": "id -u > agent-uid.txt"},
				map[string]any{"terminal": map[string]any{"command": "sh", "args": []string{"-c", "id -u; echo x > term.txt && echo WROTE"}}},
				map[string]any{"read": filepath.Join(folder, "secret.txt")},
				map[string]any{"write": map[string]any{"path": filepath.Join(folder, "new", "made.txt"), "content": "made"}})))
			if want := "TERMINAL exit 0: " + tc.termUID + "\nWROTE"; !strings.Contains(reply, want) {
				t.Fatalf("the terminal reported %q, want %q", reply, want)
			}
			if !strings.Contains(reply, tc.read) || tc.read != "READ: root only" && strings.Contains(reply, "root only") {
				t.Fatalf("the agent's read of a root-only file: %q, want %q", reply, tc.read)
			}
			for _, p := range []string{filepath.Join(folder, "new"), filepath.Join(folder, "new", "made.txt")} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatalf("the agent's write: %v (reply %q)", err, reply)
				}
				if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != tc.fileUID {
					t.Fatalf("%s belongs to uid %d, want %d", p, uid, tc.fileUID)
				}
			}
			b, err := os.ReadFile(filepath.Join(folder, "agent-uid.txt"))
			if got := strings.TrimSpace(string(b)); err != nil || got != "65534" {
				t.Fatalf("the agent's own id -u: %q %v, want 65534", got, err)
			}
			uids := agentUIDs(t, bin, "FAKE_ACP_STATE="+state)
			if len(uids) == 0 {
				t.Fatalf("no process of the agent %s found", bin)
			}
			for _, u := range uids {
				if u != "65534" {
					t.Fatalf("an agent process runs as uid %s: %v", u, uids)
				}
			}
		})
	}
}

// An exec agent with user: nobody runs as 65534 with nobody's HOME and
// reads its MCP config file (the relay's, handed to nobody, still 0600).
func TestUserExec(t *testing.T) {
	needRoot(t)
	t.Parallel()
	base := openTempDir(t)
	folder := filepath.Join(base, "folder")
	if err := os.Mkdir(folder, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(folder, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "agent.sh")
	if err := os.WriteFile(bin, []byte(`#!/bin/sh
echo "uid=$(id -u) home=$HOME cfg=$(stat -c %a:%u "$RELAY_MCP_CONFIG")"
grep -q "Bearer $RELAY_TOKEN" "$RELAY_MCP_CONFIG" && echo READ_CONFIG
`), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Folders, c.DefaultCwd = []string{folder}, folder
		c.Providers = append(c.Providers, config.Provider{ID: "agent", Name: "Agent", Type: config.TypeExec, Command: []string{bin}, User: "nobody"})
	}})
	s := r.NewSession(map[string]any{"provider": "agent", "title": "as nobody"})
	tr := waitEnded(r, r.Message(s.ID, "hello"), 60*time.Second)
	if tr.Status != store.TurnDone {
		t.Fatalf("turn: %s %q", tr.Status, tr.Error)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if want := "uid=65534 home=" + nobody.HomeDir + " cfg=600:65534\nREAD_CONFIG"; strings.TrimSpace(tr.Reply) != want {
		t.Fatalf("the agent reported %q, want %q", tr.Reply, want)
	}
}
