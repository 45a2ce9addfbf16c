package relaytest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// gitRun runs git in dir and fails the test when it fails.
func gitRun(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitOrigin makes a bare repository BASE/example-org/sample-repo with
// banner.txt on main, and answers BASE.
func gitOrigin(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	bare := filepath.Join(base, "example-org", "sample-repo")
	gitRun(t, base, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	work := t.TempDir()
	gitRun(t, work, "clone", "--quiet", bare, "w")
	w := filepath.Join(work, "w")
	if err := os.WriteFile(filepath.Join(w, "banner.txt"), []byte("Hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitRun(t, w, "add", "banner.txt")
	gitRun(t, w, "commit", "--quiet", "-m", "banner")
	gitRun(t, w, "push", "--quiet", "origin", "HEAD:main")
	return base
}

// R24.4: repository sessions. claude-cloud takes repo (owner/name against
// repos.base_url, or a file:// URL) and branch instead of cwd; its folder is
// its own worktree on the branch (new from the default branch); a branch
// git refuses and a repository that cannot be cloned refuse the call before
// any card with git's line; cwd is refused on create and on update;
// deleting the session removes its worktree; relay_info lists repos: true.
func TestRepositorySessionsR24_4(t *testing.T) {
	t.Parallel()
	base := gitOrigin(t)
	reposDir := t.TempDir()
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "claude-cloud", Name: "Claude Cloud", Type: config.TypeScripted,
			Models: []string{"scripted-1"}, DefaultModel: "scripted-1"})
		c.Repos = config.Repos{BaseURL: base, Dir: reposDir}
	}})
	ext := r.NewSession(map[string]any{"provider": "external", "title": "lead"})
	m := r.Connect(ext.Token, nil)

	info := m.MustOK(map[string]any{"action": "relay_info", "relay": "this"})
	if !strings.Contains(fmt.Sprint(info["providers"]), "id:claude-cloud") || !strings.Contains(fmt.Sprint(info["providers"]), "repos:true") {
		t.Fatalf("relay_info providers: %v", info["providers"])
	}

	// Refused before any card, nothing created.
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"repo": "example-org/sample-repo", "branch": "bad..name"}, "not a valid branch name"},
		{map[string]any{"repo": "example-org/missing", "branch": "main"}, "fatal:"},
		{map[string]any{"repo": "example-org/sample-repo", "cwd": r.Config.Folders[0]}, "instead of cwd"},
		{map[string]any{"branch": "main"}, "pass repo"},
	} {
		args := map[string]any{"action": "create_session", "relay": "this", "provider": "claude-cloud", "text": "x"}
		for k, v := range c.args {
			args[k] = v
		}
		env := m.MustFail(args, "REMOTE_RELAY_INVALID_INPUT")
		if msg := fmt.Sprint(env["error"]); !strings.Contains(msg, c.want) || !strings.HasSuffix(msg, "No session was created.") {
			t.Errorf("%v: %s", c.args, msg)
		}
	}
	m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "repo": "example-org/sample-repo"}, "REMOTE_RELAY_INVALID_INPUT")
	if n := len(r.Cards()); n != 0 {
		t.Fatalf("%d cards for refused calls", n)
	}

	// The first session: its card names the repository and branch.
	done := make(chan map[string]any, 1)
	go func() {
		env, _ := callNoFail(m, map[string]any{"action": "create_session", "relay": "this", "provider": "claude-cloud",
			"repo": "example-org/sample-repo", "branch": "feature/banner", "text": "change the banner", "wait_seconds": 10})
		done <- env
	}()
	card := r.WaitCard(ext.ID)
	if !strings.Contains(fmt.Sprint(card["lines"]), "example-org/sample-repo on branch feature/banner") {
		t.Errorf("card lines: %v", card["lines"])
	}
	r.Decide(card["id"].(string), "allow")
	env := <-done
	if env["ok"] != true || env["status"] != "done" || env["repo"] != "example-org/sample-repo" || env["branch"] != "feature/banner" {
		t.Fatalf("create_session: %v", env)
	}
	sid := env["session"].(string)
	cwd := r.Get(sid)["cwd"].(string)
	if !strings.HasPrefix(cwd, reposDir) || gitRun(t, cwd, "rev-parse", "--abbrev-ref", "HEAD") != "feature/banner" {
		t.Fatalf("session folder %s is not its worktree on feature/banner", cwd)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "banner.txt")); err != nil || string(b) != "Hi\n" {
		t.Fatalf("worktree from main: %q %v", b, err)
	}
	// A file:// URL, no card now; another worktree.
	env = m.MustOK(map[string]any{"action": "create_session", "relay": "this", "provider": "claude-cloud",
		"repo": "file://" + filepath.Join(base, "example-org", "sample-repo"), "branch": "other", "text": "x", "wait_seconds": 10})
	if other := r.Get(env["session"].(string))["cwd"].(string); other == cwd || gitRun(t, other, "rev-parse", "--abbrev-ref", "HEAD") != "other" {
		t.Fatalf("second worktree %s", other)
	}

	// Two sessions on a repository not cloned yet, at once: one clone, two worktrees.
	url := "file://" + filepath.Join(base, "example-org", "sample-repo") + "/"
	results := make(chan map[string]any, 2)
	for i := range 2 {
		go func() {
			env, _ := callNoFail(m, map[string]any{"action": "create_session", "relay": "this", "provider": "claude-cloud",
				"repo": url, "branch": fmt.Sprintf("at-once-%d", i), "text": "x", "wait_seconds": 0})
			results <- env
		}()
	}
	for range 2 {
		if env := <-results; env["ok"] != true {
			t.Errorf("a create_session at once: %v", env)
		}
	}
	if clones, _ := filepath.Glob(filepath.Join(reposDir, "clones", "*.git")); len(clones) != 3 {
		t.Errorf("clones: %v, want 3 (owner/name, file://, file:// with a slash)", clones)
	}

	// The owner's POST /api/v1/sessions takes repo and branch the same way.
	var out map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/sessions", map[string]any{"provider": "claude-cloud", "title": "mine"}, &out); st != http.StatusBadRequest {
		t.Errorf("owner's claude-cloud session without repo: %d %v", st, out)
	}
	if st := r.Owner(http.MethodPost, "/api/v1/sessions", map[string]any{"provider": "claude-cloud", "title": "mine",
		"repo": "example-org/sample-repo", "branch": "owner-branch"}, &out); st != http.StatusCreated ||
		!strings.HasPrefix(fmt.Sprint(out["cwd"]), reposDir) || out["branch"] != "owner-branch" {
		t.Errorf("owner's repository session: %d %v", st, out)
	}

	env = m.MustFail(map[string]any{"action": "update_session", "relay": "this", "session": sid, "cwd": r.Config.Folders[0]}, "REMOTE_RELAY_INVALID_INPUT")
	if msg := fmt.Sprint(env["error"]); !strings.Contains(msg, "its folder cannot be changed") {
		t.Errorf("update_session cwd: %s", msg)
	}
	if st := r.Owner(http.MethodDelete, "/api/v1/sessions/"+sid, nil, nil); st != http.StatusOK {
		t.Fatalf("delete: %d", st)
	}
	if _, err := os.Stat(cwd); !os.IsNotExist(err) {
		t.Fatalf("the deleted session's worktree is still there: %v", err)
	}
}

// gitAgent is an exec agent that commits a change in its folder, a
// repository session's worktree, and says whether git could.
const gitAgent = `#!/bin/sh
read -r what
echo "$what" >> banner.txt
if git -c user.email=agent@example.invalid -c user.name=agent commit -q -a -m "$what" 2>"$PWD/.giterr"; then
  echo COMMITTED
else
  echo "GIT_FAILED $(head -c 300 "$PWD/.giterr" | tr '\n' ' ')"
fi
`

// R24.4 with R18.31: a repository session of a sandboxed provider. The
// clones live in the data directory, which the sandbox hides; git in the
// session's worktree still reaches its clone (objects, refs, the worktree's
// metadata), so the agent can commit on its branch.
func TestSandboxRepositorySessionR24_4(t *testing.T) {
	needBwrap(t)
	t.Parallel()
	base := gitOrigin(t)
	bin := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(bin, []byte(gitAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Start(t, Options{Config: func(c *config.Config) {
		if c.RedisURL != "" { // the embedded store's data directory is the harness's
			c.DataDir = t.TempDir()
		}
		c.Providers = append(c.Providers, config.Provider{ID: "gitagent", Name: "Git agent", Type: config.TypeExec,
			Command: []string{bin}, Repos: true, Sandbox: config.SandboxBwrap})
		c.Repos = config.Repos{BaseURL: base} // the clones in the data directory (the default)
	}})
	s := r.NewSession(map[string]any{"provider": "gitagent", "title": "git", "repo": "example-org/sample-repo", "branch": "agent/work"})
	tr := waitEnded(r, r.Message(s.ID, "sandboxed change"), 60*time.Second)
	if tr.Status != store.TurnDone || strings.TrimSpace(tr.Reply) != "COMMITTED" {
		t.Fatalf("the sandboxed agent's commit: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
}
