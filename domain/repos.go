package domain

import (
	"context"
	"errors"
	"fmt"

	"github.com/oar/relay/repos"
	"github.com/oar/relay/store"
)

// Repository sessions (R24.4): a provider whose sessions work on a
// repository (Options.Traits' Repos: config repos: true, or claude-cloud)
// takes repo and branch on create_session instead of cwd. The clone is
// prepared and the branch name checked before any card; the session's own
// worktree is made once the card allowed it, and is its folder; deleting the
// session removes it. The git work is package repos' (Options.Repos).

// checkRepo applies create_session's repository rules to the plan: repo and
// branch only for a provider that takes them, never with cwd; the clone
// fetched and the branch name checked (git's line when it refuses).
func (cr *creates) checkRepo(ctx context.Context, in *createArgs, pl *createPlan) *Error {
	if !cr.opts.Traits[pl.provID].Repos {
		if in.repo != "" || in.branch != "" {
			return Errorf(CodeInvalidInput, "Provider %q does not work on repositories: repo and branch are for providers that do (relay_info lists them with repos: true); pass cwd for a folder. %s", pl.provID, nothingCreated)
		}
		return nil
	}
	if e := cr.repoArgs(in, pl.provID); e != nil {
		return e
	}
	pl.branch = in.branch
	if pl.branch == "" {
		pl.branch = "relay/" + store.NewID(4) // a branch of its own, from the default branch
	}
	r, err := cr.opts.Repos.Prepare(ctx, in.repo, pl.branch)
	if err != nil {
		return repoError(in.repo, err)
	}
	pl.repo = r
	return nil
}

// repoArgs refuses a create_session for provider provID, which works on a
// repository, that passes cwd or no repo, or reaches a relay that keeps no
// repositories.
func (cr *creates) repoArgs(in *createArgs, provID string) *Error {
	if in.cwd != "" {
		return Errorf(CodeInvalidInput, "Provider %q works on a repository: pass repo and branch instead of cwd. %s", provID, nothingCreated)
	}
	if in.repo == "" {
		return Errorf(CodeInvalidInput, "Provider %q works on a repository: pass repo (a git URL or owner/name) and branch. %s", provID, nothingCreated)
	}
	if cr.opts.Repos == nil {
		return Errorf(CodeUnsupported, "Relay %q keeps no repositories. %s", cr.opts.Name, nothingCreated)
	}
	return nil
}

// repoError is a failed git step: git's own line, nothing created.
func repoError(repo string, err error) *Error {
	var ge *repos.GitError
	if errors.As(err, &ge) {
		return Errorf(CodeInvalidInput, "Repository %q: %s %s", repo, LineValue(ge.Line, fieldExcerpt), nothingCreated)
	}
	return internal("repository "+repo, err)
}

// addWorktree makes the new session's worktree (its folder) on its branch.
func (cr *creates) addWorktree(ctx context.Context, pl *createPlan, sid, repo string) (string, *Error) {
	dir, err := cr.opts.Repos.AddWorktree(ctx, pl.repo, pl.branch, sid)
	if err != nil {
		return "", repoError(repo, err)
	}
	return dir, nil
}

// removeWorktree removes a repository session's worktree (deleting the
// session, or its creation undone); a failure is logged.
func (cr *creates) removeWorktree(ctx context.Context, s *store.Session) {
	if s.Repo == "" || cr.opts.Repos == nil {
		return
	}
	if err := cr.opts.Repos.RemoveWorktree(context.WithoutCancel(ctx), s.Cwd); err != nil {
		cr.log.Warn("worktree not removed", "session", id8(s.ID), "dir", s.Cwd, "err", err)
	}
}

// repoFolderFixed refuses a new folder for a repository session (the seed:
// it works on its clone).
func repoFolderFixed(s *store.Session) *Error {
	return Errorf(CodeInvalidInput, "Session %s works on its own clone of %s (branch %s); its folder cannot be changed. %s", id8(s.ID), s.Repo, s.Branch, nothingChanged)
}

// repoWhere is where a repository session works, for its card.
func repoWhere(repo, branch string) string { return fmt.Sprintf("%s on branch %s", repo, branch) }

// ownerFolder is the owner's new session's folder (the folders rule), or,
// for a provider whose sessions work on a repository, its clone prepared
// and its branch checked, as create_session does.
func (r *Relay) ownerFolder(ctx context.Context, provID string, in NewSession) (string, *createPlan, *Error) {
	pl := &createPlan{provID: provID}
	if e := r.creates.checkRepo(ctx, &createArgs{repo: in.Repo, branch: in.Branch, cwd: in.Cwd}, pl); e != nil {
		return "", nil, e
	}
	if pl.repo != nil {
		return "", pl, nil
	}
	cwd, e := r.checkFolder(in.Cwd, nothingCreated)
	return cwd, nil, e
}

// ownerWorktree makes the owner's repository session's worktree, its folder.
func (r *Relay) ownerWorktree(ctx context.Context, pl *createPlan, s *store.Session, repo string) *Error {
	if pl == nil {
		return nil
	}
	dir, e := r.creates.addWorktree(ctx, pl, s.ID, repo)
	if e != nil {
		return e
	}
	s.Cwd, s.Repo, s.Branch = dir, repo, pl.branch
	return nil
}
