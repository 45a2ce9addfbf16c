package relaytest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// R18.31 (sessions apart), R18.26 (ACP terminals under the agent's
// confinement) and the MEDIUM finding "a running agent reads a sibling
// session's token from /proc/<pid>/environ". Each test runs once without the
// sandbox, where the attack succeeds (so the test can fail), and once with
// sandbox: bwrap, where it must not.

// needBwrap skips without bubblewrap, or where it cannot make its
// namespaces; with CI=true it fails instead (CI installs bubblewrap).
func needBwrap(t *testing.T) {
	t.Helper()
	p, err := provider.FindBwrap()
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
}

// sandboxAgent is an exec agent: prompt "sleep" leaves a mark in its folder
// and sleeps (its RELAY_TOKEN in its environment); prompt "probe" prints
// every other RELAY_TOKEN it finds in /proc/*/environ and what else it
// managed: writing its folder, another session's folder, a folder outside
// the relay's, listing the data directory, reading the config file.
const sandboxAgent = `#!/bin/sh
read -r what
case "$what" in
sleep)
  echo "$RELAY_TOKEN" > "$PWD/asleep"
  exec sleep 300
  ;;
probe)
  for f in /proc/[0-9]*/environ; do
    tr '\0' '\n' < "$f" 2>/dev/null | grep '^RELAY_TOKEN=' | grep -v -x "RELAY_TOKEN=$RELAY_TOKEN"
  done | sort -u
  echo in > "$PWD/probe.txt" && echo WROTE_INSIDE
  echo out > "$SIBLING_DIR/probe.txt" 2>/dev/null && echo WROTE_SIBLING_FOLDER
  echo out > "$OUTSIDE/probe.txt" 2>/dev/null && echo WROTE_OUTSIDE
  [ -n "$(ls -A "$DATA" 2>/dev/null)" ] && echo SAW_DATA
  grep -q relay-config-marker "$CFG" 2>/dev/null && echo READ_CONFIG
  grep -q relay-secret-marker "$SECRET" 2>/dev/null && echo READ_SECRET_FILE
  echo end
  ;;
esac
`

func TestSandboxSessionsApart(t *testing.T) {
	needBwrap(t)
	t.Parallel()
	for _, sandbox := range []string{"none", "bwrap"} {
		t.Run(sandbox, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), "agent.sh")
			if err := os.WriteFile(bin, []byte(sandboxAgent), 0o755); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			// The config and the secret file outside /tmp: the sandbox has a
			// /tmp of its own, which would hide them whatever hide() says.
			keep, err := os.MkdirTemp("/var/tmp", "relay-sandbox-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(keep) })
			cfgFile := filepath.Join(keep, "relay.yaml")
			if err := os.WriteFile(cfgFile, []byte("# relay-config-marker\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// The file the owner token was read from (R18.36's --owner-token-file).
			secretFile := filepath.Join(keep, "owner-token")
			if err := os.WriteFile(secretFile, []byte("relay-secret-marker\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			rd := NewRedis(t)
			for _, sub := range []string{"a", "b"} {
				if err := os.MkdirAll(filepath.Join(rd.Dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var dataDir string
			r := Start(t, Options{Redis: rd, Config: func(c *config.Config) {
				if c.RedisURL != "" { // the embedded store keeps its own files in its data directory
					c.DataDir = t.TempDir()
					if err := os.WriteFile(filepath.Join(c.DataDir, "secret"), []byte("x"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				dataDir = c.DataDir
				c.ConfigPath = cfgFile
				c.SecretFiles = []string{secretFile}
				c.Providers = append(c.Providers, config.Provider{ID: "agent", Name: "Agent", Type: config.TypeExec,
					Command: []string{bin}, Sandbox: sandbox, Env: map[string]string{
						"OUTSIDE": outside, "DATA": dataDir, "CFG": cfgFile, "SECRET": secretFile, "SIBLING_DIR": filepath.Join(rd.Dir, "b")}})
			}})
			if ents, err := os.ReadDir(dataDir); err != nil || len(ents) == 0 {
				t.Fatalf("the data directory %s is empty (%v): nothing to hide", dataDir, err)
			}
			sleeper := r.NewSession(map[string]any{"provider": "agent", "title": "sleeper", "cwd": filepath.Join(rd.Dir, "b")})
			prober := r.NewSession(map[string]any{"provider": "agent", "title": "prober", "cwd": filepath.Join(rd.Dir, "a")})
			sleepTurn := r.Message(sleeper.ID, "sleep")
			var sleeperToken string // the sleeping agent's RELAY_TOKEN, as it wrote it in its folder
			Eventually(t, 30*time.Second, func() bool {
				b, err := os.ReadFile(filepath.Join(rd.Dir, "b", "asleep"))
				sleeperToken = strings.TrimSpace(string(b))
				return err == nil && strings.HasSuffix(string(b), "\n") && sleeperToken != ""
			}, "the sleeping agent did not start")

			tr := waitEnded(r, r.Message(prober.ID, "probe"), 60*time.Second)
			if tr.Status != store.TurnDone {
				t.Fatalf("probe turn: %s %q", tr.Status, tr.Error)
			}
			// Tokens found (other tests' agents may run meanwhile: they count
			// as siblings too), and the rest of what the prober managed.
			var tokens, got []string
			for _, w := range strings.Fields(tr.Reply) {
				if tok, ok := strings.CutPrefix(w, "RELAY_TOKEN="); ok {
					tokens = append(tokens, tok)
				} else {
					got = append(got, w)
				}
			}
			want := []string{"WROTE_INSIDE", "end"}
			if sandbox == "none" {
				want = []string{"WROTE_INSIDE", "WROTE_SIBLING_FOLDER", "WROTE_OUTSIDE", "SAW_DATA", "READ_CONFIG", "READ_SECRET_FILE", "end"}
				if !slices.Contains(tokens, sleeperToken) {
					t.Fatalf("sandbox none: the prober did not find the sleeping agent's token (found %d others): the attack this test guards against did not work", len(tokens))
				}
			} else if len(tokens) > 0 {
				t.Fatalf("sandbox bwrap: the prober read %d other agents' RELAY_TOKEN from /proc/PID/environ (the sleeping agent's among them: %v)",
					len(tokens), slices.Contains(tokens, sleeperToken))
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("sandbox %s: the probing agent managed\n%q\nwant\n%q", sandbox, got, want)
			}
			if _, err := os.Stat(filepath.Join(rd.Dir, "a", "probe.txt")); err != nil {
				t.Fatalf("the write in the session's folder did not reach it: %v", err)
			}
			if st := r.Owner(http.MethodPost, "/api/v1/sessions/"+sleeper.ID+"/stop", nil, nil); st != http.StatusOK {
				t.Fatalf("stop: %d", st)
			}
			if tr := waitEnded(r, sleepTurn, 30*time.Second); tr.Status != store.TurnStopped {
				t.Fatalf("the sleeping turn ended %s %q, want stopped", tr.Status, tr.Error)
			}
		})
	}
}

// R18.26: an ACP agent and each of its terminals run in the sandbox: the
// agent in its own PID namespace, still reaching relay_tool on loopback;
// a terminal writes the session's folder and nothing outside it, and sees
// no other process's environment.
func TestSandboxACPTerminal(t *testing.T) {
	needBwrap(t)
	t.Parallel()
	for _, sandbox := range []string{"none", "bwrap"} {
		t.Run(sandbox, func(t *testing.T) {
			t.Parallel()
			// Another session's agent: a process of the relay's user with its token.
			sib := exec.Command("sleep", "300")
			sib.Env = append(os.Environ(), "RELAY_TOKEN=sibling-token-acp-"+sandbox)
			if err := sib.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sib.Process.Kill(); _ = sib.Wait() })
			outside := t.TempDir()
			f := newACPFake(t, nil)
			f.prov.Sandbox = sandbox
			if sandbox == "bwrap" {
				f.prov.SandboxRW = []string{f.state} // the fake agent's own sessions
			}
			r, _ := startACP(t, f, nil)
			target := r.NewSession(map[string]any{"title": "target"})
			a := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
			probe := fmt.Sprintf(`echo in > term.txt && echo WROTE_INSIDE; { echo out > %s/term.txt; } 2>/dev/null && echo WROTE_OUTSIDE; `+
				`for f in /proc/[0-9]*/environ; do grep -q sibling-token-acp "$f" 2>/dev/null && { echo SAW_SIBLING; break; }; done; echo end`, outside)
			reply := doneTurn(t, r, r.Message(a.ID, acpScript(
				map[string]any{"tool": map[string]any{"action": "read_session", "relay": "this", "session": target.ID}},
				map[string]any{"terminal": map[string]any{"command": "sh", "args": []string{"-c", probe}}})))
			if !strings.HasPrefix(reply, "TOOL: {") || !strings.Contains(reply, `"ok":true`) || !strings.Contains(reply, target.ID) {
				t.Fatalf("relay_tool from the agent: %q", reply)
			}
			want := "TERMINAL exit 0: WROTE_INSIDE\nend"
			if sandbox == "none" {
				want = "TERMINAL exit 0: WROTE_INSIDE\nWROTE_OUTSIDE\nSAW_SIBLING\nend"
			}
			if !strings.Contains(reply, want) {
				t.Fatalf("sandbox %s: terminal reply %q, want %q", sandbox, reply, want)
			}
			if _, err := os.Stat(filepath.Join(r.Config.DefaultCwd, "term.txt")); err != nil {
				t.Fatalf("the terminal's write in the folder did not reach it: %v", err)
			}
			// The agent process itself: in a PID namespace of its own with the sandbox.
			own, _ := os.Readlink("/proc/self/ns/pid")
			pids := agentPIDs(f.prov.Command[0], "FAKE_ACP_STATE="+f.state)
			if len(pids) == 0 {
				t.Fatalf("no process of the agent %s found", f.prov.Command[0])
			}
			for _, pid := range pids {
				ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
				if err != nil {
					continue
				}
				if apart := ns != own; apart != (sandbox == "bwrap") {
					t.Fatalf("sandbox %s: the agent (pid %d) runs in PID namespace %s, the relay in %s", sandbox, pid, ns, own)
				}
			}
		})
	}
}

// agentPIDs are the live processes running the binary bin (argv[0]) with
// env (NAME=VALUE) in their environment.
func agentPIDs(bin, env string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 != bin {
			continue
		}
		if e, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); err == nil && slices.Contains(strings.Split(string(e), "\x00"), env) {
			out = append(out, pid)
		}
	}
	return out
}
