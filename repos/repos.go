// Package repos keeps the repositories of repository sessions (R24.4): one
// bare clone per repository under Dir/clones, fetched again before each new
// session, and one git worktree per session under Dir/worktrees. Every step
// that changes a clone (clone, fetch, worktree add and remove) holds the
// repository's lock, a flock on a file next to its clone: two sessions
// started at once, in one process or in two, never clone it twice.
package repos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// Manager keeps the clones and worktrees of one relay.
type Manager struct {
	// Dir holds clones/ and worktrees/ (config repos.dir).
	Dir string
	// BaseURL resolves owner/name (config repos.base_url); "" = https://github.com.
	BaseURL string
}

// GitError is a git command that failed: Line is the line of its error
// output that says why (git's "fatal: …" line, else its last line).
type GitError struct {
	Line string
}

func (e *GitError) Error() string { return e.Line }

// DefaultBaseURL is what owner/name is resolved against without repos.base_url.
const DefaultBaseURL = "https://github.com"

// scpLike is git's user@host:path form.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9_.-]+@[^:/]+:`)

// unsafeKey are the characters a clone's folder name leaves out.
var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// ownerName is a repository given as owner/name.
var ownerName = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)

// Resolve turns a repo as an agent gives it into the URL git clones: a URL
// (scheme://…, user@host:path) or an absolute path as given, owner/name
// against BaseURL (a URL, or a local directory).
func (m *Manager) Resolve(repo string) (string, error) {
	repo = strings.TrimSpace(repo)
	switch {
	case repo == "":
		return "", errors.New("repo is empty")
	case strings.HasPrefix(repo, "-") || strings.ContainsAny(repo, "\x00\n\r"):
		return "", fmt.Errorf("%q is not a repository", repo)
	case strings.Contains(repo, "://"), strings.HasPrefix(repo, "/"), scpLike.MatchString(repo):
		return repo, nil
	case ownerName.MatchString(repo) && !strings.Contains(repo, ".."):
		base := strings.TrimRight(m.BaseURL, "/")
		if base == "" {
			base = DefaultBaseURL
		}
		return base + "/" + repo, nil
	}
	return "", fmt.Errorf("%q is neither a git URL nor owner/name", repo)
}

// key names a repository's clone: readable, and unique by a hash of its URL.
func key(url string) string {
	sum := sha256.Sum256([]byte(url))
	name := unsafeKey.ReplaceAllString(url, "_")
	name = strings.Trim(name, "_.")
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

// Repo is a repository's clone, ready for worktrees.
type Repo struct {
	URL   string // what was cloned
	Clone string // the bare clone's folder
	lock  string
}

// Prepare clones the repository (or fetches it again when its clone exists)
// under its lock and checks branch's name with git; a repository that
// cannot be cloned and a branch name git refuses are *GitError.
func (m *Manager) Prepare(ctx context.Context, repo, branch string) (*Repo, error) {
	url, err := m.Resolve(repo)
	if err != nil {
		return nil, &GitError{Line: err.Error()}
	}
	if branch != "" {
		if _, err := git(ctx, "", "check-ref-format", "--branch", branch); err != nil {
			return nil, err
		}
	}
	clones := filepath.Join(m.Dir, "clones")
	if err := os.MkdirAll(clones, 0o700); err != nil {
		return nil, fmt.Errorf("repos: %w", err)
	}
	k := key(url)
	r := &Repo{URL: url, Clone: filepath.Join(clones, k+".git"), lock: filepath.Join(clones, k+".lock")}
	unlock, err := r.locked(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(r.Clone, "HEAD")); err == nil {
		// Fetched again so a new branch starts from the default branch as it is now.
		if _, err := git(ctx, r.Clone, "fetch", "--prune", "--quiet", "origin"); err != nil {
			return nil, err
		}
		return r, r.branchFree(ctx, branch)
	}
	_ = os.RemoveAll(r.Clone) // a clone cut short before
	if _, err := git(ctx, clones, "clone", "--bare", "--quiet", "--", url, r.Clone); err != nil {
		_ = os.RemoveAll(r.Clone)
		return nil, err
	}
	// Remote branches go to refs/remotes/origin (a fetch never moves a
	// branch a session has checked out).
	if _, err := git(ctx, r.Clone, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"); err != nil {
		return nil, err
	}
	if _, err := git(ctx, r.Clone, "fetch", "--quiet", "origin"); err != nil {
		return nil, err
	}
	return r, nil
}

// branchFree refuses a branch another session's worktree has checked out
// (git would refuse it only once the worktree is made).
func (r *Repo) branchFree(ctx context.Context, branch string) error {
	list, err := git(ctx, r.Clone, "worktree", "list", "--porcelain")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(list, "\n") {
		if l == "branch refs/heads/"+branch {
			return &GitError{Line: fmt.Sprintf("fatal: '%s' is already checked out in another session's worktree", branch)}
		}
	}
	return nil
}

// locked takes the repository's lock (waiting while another holds it).
func (r *Repo) locked(ctx context.Context) (func(), error) {
	fl := flock.New(r.lock)
	ok, err := fl.TryLockContext(ctx, 50*time.Millisecond)
	if err != nil || !ok {
		return nil, fmt.Errorf("repos: lock %s: %w", r.lock, errors.Join(err, ctx.Err()))
	}
	return func() { _ = fl.Unlock() }, nil
}

// WorktreesDir is the folder of the sessions' worktrees.
func (m *Manager) WorktreesDir() string { return filepath.Join(m.Dir, "worktrees") }

// AddWorktree gives a session its own worktree of the repository at
// Dir/worktrees/name on branch: the branch as it is, else the remote's
// branch of that name, else a new branch from the default branch.
func (m *Manager) AddWorktree(ctx context.Context, r *Repo, branch, name string) (string, error) {
	dir := filepath.Join(m.WorktreesDir(), name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("repos: %w", err)
	}
	unlock, err := r.locked(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	args := []string{"worktree", "add", "--quiet"}
	switch {
	case refExists(ctx, r.Clone, "refs/heads/"+branch):
		args = append(args, dir, branch)
	case refExists(ctx, r.Clone, "refs/remotes/origin/"+branch):
		args = append(args, "-b", branch, dir, "refs/remotes/origin/"+branch)
	default:
		args = append(args, "-b", branch, dir, defaultStart(ctx, r.Clone))
	}
	if _, err := git(ctx, r.Clone, args...); err != nil {
		return "", err
	}
	return dir, nil
}

// defaultStart is where a new branch starts: the remote's default branch.
func defaultStart(ctx context.Context, clone string) string {
	head, err := git(ctx, clone, "symbolic-ref", "--quiet", "HEAD")
	if err != nil {
		return "HEAD"
	}
	name := strings.TrimPrefix(head, "refs/heads/")
	if refExists(ctx, clone, "refs/remotes/origin/"+name) {
		return "refs/remotes/origin/" + name
	}
	return head
}

func refExists(ctx context.Context, clone, ref string) bool {
	_, err := git(ctx, clone, "show-ref", "--verify", "--quiet", ref)
	return err == nil
}

// RemoveWorktree removes a session's worktree (its branch stays in the
// clone). A folder that is no worktree of a clone here is left alone.
func (m *Manager) RemoveWorktree(ctx context.Context, dir string) error {
	if !strings.HasPrefix(filepath.Clean(dir), m.WorktreesDir()+string(filepath.Separator)) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, ".git"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("repos: %w", err)
	}
	gitdir := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "gitdir:"))
	clone := filepath.Dir(filepath.Dir(gitdir)) // CLONE/worktrees/NAME
	r := &Repo{Clone: clone, lock: strings.TrimSuffix(clone, ".git") + ".lock"}
	unlock, err := r.locked(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := git(ctx, clone, "worktree", "remove", "--force", dir); err != nil {
		return err
	}
	return nil
}

// git runs git in dir without a terminal to ask on, and answers its output
// (trimmed) or a *GitError with the line that says why it failed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", &GitError{Line: errorLine(errb.String(), err)}
	}
	return strings.TrimSpace(out.String()), nil
}

// errorLine is the line of git's error output that says why: its "fatal:"
// or "error:" line, else its last line, else how the command ended.
func errorLine(stderr string, err error) string {
	var last string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal:") || strings.HasPrefix(l, "error:") {
			return l
		}
		if l != "" {
			last = l
		}
	}
	if last != "" {
		return last
	}
	return "git: " + err.Error()
}
