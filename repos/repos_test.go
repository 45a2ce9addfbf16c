package repos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// run runs a command in dir and fails the test when it fails.
func run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Origin makes a bare repository BASE/owner/name with one commit on main
// and a branch feature/old, and answers BASE.
func Origin(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	bare := filepath.Join(base, "example-org", "sample-repo")
	run(t, base, "git", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	work := t.TempDir()
	run(t, work, "git", "clone", "--quiet", bare, "w")
	w := filepath.Join(work, "w")
	if err := os.WriteFile(filepath.Join(w, "banner.txt"), []byte("Hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, w, "git", "add", "banner.txt")
	run(t, w, "git", "commit", "--quiet", "-m", "banner")
	run(t, w, "git", "push", "--quiet", "origin", "HEAD:main")
	run(t, w, "git", "push", "--quiet", "origin", "HEAD:feature/old")
	return base
}

// R24.4: owner/name against the base URL, a file:// URL, a worktree per
// session on its branch (new ones from the default branch), the branch git
// refuses and the repository that cannot be cloned as git's line, the
// worktree removed.
func TestPrepareAndWorktreesR24_4(t *testing.T) {
	base := Origin(t)
	m := &Manager{Dir: t.TempDir(), BaseURL: base}
	ctx := context.Background()
	r, err := m.Prepare(ctx, "example-org/sample-repo", "feature/banner")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := m.AddWorktree(ctx, r, "feature/banner", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, dir, "git", "rev-parse", "--abbrev-ref", "HEAD"); got != "feature/banner" {
		t.Errorf("branch %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "banner.txt")); err != nil || string(b) != "Hi\n" {
		t.Errorf("banner.txt from main: %q %v", b, err)
	}
	// The same repository as a file:// URL is another clone; an existing
	// remote branch is checked out as it is.
	r2, err := m.Prepare(ctx, "file://"+filepath.Join(base, "example-org", "sample-repo"), "feature/old")
	if err != nil {
		t.Fatal(err)
	}
	dir2, err := m.AddWorktree(ctx, r2, "feature/old", "s2")
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, dir2, "git", "rev-parse", "--abbrev-ref", "HEAD"); got != "feature/old" {
		t.Errorf("branch %q", got)
	}

	var ge *GitError
	if _, err := m.Prepare(ctx, "example-org/sample-repo", "feature/banner"); !errors.As(err, &ge) || !strings.Contains(ge.Line, "already checked out") {
		t.Errorf("a branch another session has: %v", err)
	}
	if _, err := m.Prepare(ctx, "example-org/sample-repo", "bad..name"); !errors.As(err, &ge) || !strings.Contains(ge.Line, "not a valid branch name") {
		t.Errorf("bad branch: %v", err)
	}
	if _, err := m.Prepare(ctx, "example-org/missing", "main"); !errors.As(err, &ge) || !strings.HasPrefix(ge.Line, "fatal:") {
		t.Errorf("missing repository: %v", err)
	}
	if err := m.RemoveWorktree(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("worktree still there: %v", err)
	}
	if list := run(t, r.Clone, "git", "worktree", "list"); strings.Contains(list, dir) {
		t.Errorf("worktree still listed: %s", list)
	}
}

// R24.4: sessions started at once on one repository do not race: one clone,
// every worktree made.
func TestConcurrentSessionsOneCloneR24_4(t *testing.T) {
	base := Origin(t)
	m := &Manager{Dir: t.TempDir(), BaseURL: base}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			branch := fmt.Sprintf("topic/%d", i)
			r, err := m.Prepare(context.Background(), "example-org/sample-repo", branch)
			if err == nil {
				_, err = m.AddWorktree(context.Background(), r, branch, fmt.Sprintf("s%d", i))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	clones, _ := filepath.Glob(filepath.Join(m.Dir, "clones", "*.git"))
	wts, _ := filepath.Glob(filepath.Join(m.Dir, "worktrees", "*"))
	if len(clones) != 1 || len(wts) != 8 {
		t.Errorf("%d clones, %d worktrees", len(clones), len(wts))
	}
}

func TestResolve(t *testing.T) {
	m := &Manager{}
	for in, want := range map[string]string{
		"example-org/sample-repo":     "https://github.com/example-org/sample-repo",
		"git@example.com:x/y.git":     "git@example.com:x/y.git",
		"https://example.com/x/y.git": "https://example.com/x/y.git",
		"/srv/git/y.git":              "/srv/git/y.git",
	} {
		if got, err := m.Resolve(in); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "--upload-pack=x", "a/../b", "just-a-name"} {
		if _, err := m.Resolve(bad); err == nil {
			t.Errorf("Resolve(%q) accepted", bad)
		}
	}
}
