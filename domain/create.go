package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/repos"
	"github.com/oar/relay/store"
)

// creates is create_session (R7.9): its checks in R3.4a's order (also the
// check a paired relay asks, peercheck.go), the first-create card, the new
// session in its group and its first prompt; and the folders rule (R18.3),
// which the owner's sessions, update_session and every turn start keep too
// (through the doors below). It reaches the rest of the relay only through
// the subsystems it points to, its providers through models.
type creates struct {
	st     createsStore
	now    func() time.Time
	log    *slog.Logger
	opts   *Options // the relay's: name, folders, limits, default folder
	cards  *cards
	groups *groups
	usage  *usage
	remote *remote
	turns  *turnQueue // the wait, the first prompt, its reply and result, the caps
	models *models    // the provider, its model and effort
	// foldKept is the folders rule's folders resolved (realFolders).
	foldKept cached[[]string]
}

// createsStore is the store as create_session sees it.
type createsStore interface {
	recordStore
	createStore
}

func titleFrom(text string) string {
	line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
	if line == "" {
		return "Untitled"
	}
	return excerpt(line, 60)
}

// checkFolder applies the folders rule; "" is fine (defaults apply).
func (cr *creates) checkFolder(dir, nothing string) (string, *Error) {
	if dir == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) {
		return "", Errorf(CodeInvalidInput, "cwd must be an absolute path (got %q). %s", dir, nothing)
	}
	if config.HasDotDot(dir) {
		return "", Errorf(CodeInvalidInput, "cwd may not contain \"..\" (got %q). %s", dir, nothing)
	}
	dir = filepath.Clean(dir)
	if !config.Inside(cr.opts.Folders, dir) {
		return "", Errorf(CodeInvalidInput, "Relay %q may not use the folder %s; sessions may use folders inside %s. %s", cr.opts.Name, dir, strings.Join(cr.opts.Folders, ", "), nothing)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", Errorf(CodeInvalidInput, "The folder %s does not exist on relay %q. %s", dir, cr.opts.Name, nothing)
	}
	if _, why := cr.folderAllowed(dir); why != "" {
		return "", Errorf(CodeInvalidInput, "%s %s", why, nothing)
	}
	return dir, nil
}

// realFolders are the folders rule's folders with their symbolic links
// resolved, for folderRecheck: a turn start resolves its session's folder
// every time, while the rule's own folders (the operator's configuration)
// are resolved again once folderRecheck has passed since they last were.
func (cr *creates) realFolders() []string {
	return cr.foldKept.getOr(func() []string {
		folders := cr.opts.Folders
		if cr.opts.Repos != nil { // repository sessions' worktrees (R24.4)
			folders = append(append([]string{}, folders...), cr.opts.Repos.WorktreesDir())
		}
		return config.ResolveFolders(folders)
	})
}

// folderRecheck is how long the folders rule's resolved folders are kept.
const folderRecheck = 10 * time.Second

// folderAllowed resolves a session's folder and checks it against the
// folders rule after symbolic links (R18.3); why is "" when it is allowed.
func (cr *creates) folderAllowed(dir string) (resolved, why string) {
	resolved, ok, err := config.InsideReal(cr.realFolders(), dir)
	if err != nil {
		return "", fmt.Sprintf("The folder %s cannot be resolved on relay %q (it no longer exists or cannot be read).", dir, cr.opts.Name)
	}
	if !ok {
		return "", fmt.Sprintf("The folder %s resolves to %s, outside the folders relay %q may use (%s).", dir, resolved, cr.opts.Name, strings.Join(cr.opts.Folders, ", "))
	}
	return resolved, ""
}

// createSession starts a session with a first prompt (R7.9) and waits for
// its reply (R7.11). Its checks run in R3.4a's order: shapes, rule limits,
// provider / model / effort / group / folder, card; only then the effect.
func (cr *creates) createSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	in, pl, e := cr.createChecks(ctx, c, a)
	if e != nil {
		return nil, e
	}
	defer func() {
		if !pl.queued {
			cr.cards.giveBack(ctx, pl.need, c) // nothing was sent: the prompt does not count (R5.2.6)
		}
	}()
	if e := cr.cardCreate(ctx, c, in, pl); e != nil {
		return nil, e
	}
	return cr.applyCreate(ctx, c, in, pl)
}

// createArgs are create_session's arguments, their shapes checked.
type createArgs struct {
	text                             string
	wait                             time.Duration
	note                             string // wait_seconds was capped
	provID, model, effort, mode, cwd string
	repo, branch, title, groupRef    string
}

// createPlan is what create_session's checks found: the settings of the new
// session (what the agent left out filled in) and the card's state.
type createPlan struct {
	provID, model, effort, mode, cwd, title string
	info                                    provider.Info
	modelNote                               string
	group                                   *store.Group // the named group, nil for none
	repo                                    *repos.Repo  // a repository session's clone (R24.4), nil for a folder
	branch                                  string       // its branch
	need                                    *cardNeed
	queued                                  bool // the first prompt was queued: its loop count stays taken
}

// createChecks are all of create_session's checks before its card: the
// arguments' shapes, then its rules (also the check a paired relay asks, R5.3).
func (cr *creates) createChecks(ctx context.Context, c *caller, a *args) (*createArgs, *createPlan, *Error) {
	in, e := cr.parseCreateArgs(ctx, a)
	if e != nil {
		return nil, nil, e
	}
	pl, e := cr.checkCreate(ctx, c, in)
	if e != nil {
		return nil, nil, e
	}
	return in, pl, nil
}

// parseCreateArgs reads create_session's arguments: shapes first (R3.4a).
func (cr *creates) parseCreateArgs(ctx context.Context, a *args) (*createArgs, *Error) {
	in := &createArgs{}
	var e *Error
	if in.text, e = promptText(a, nothingCreated); e != nil {
		return nil, e
	}
	if in.wait, in.note, e = cr.turns.waitArg(ctx, a, nothingCreated); e != nil {
		return nil, e
	}
	get := func(k string) string {
		v, err := a.str(k)
		if err != nil && e == nil {
			e = err
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingCreated, 1)
		}
		return v
	}
	in.provID, in.model, in.effort, in.mode, in.cwd = get("provider"), get("model"), get("effort"), get("mode"), get("cwd")
	in.repo, in.branch, in.title, in.groupRef = get("repo"), get("branch"), get("title"), get("group")
	if e != nil {
		return nil, e
	}
	if e := checkMode(in.mode, nothingCreated); e != nil {
		return nil, e
	}
	if len(in.title) > 200 {
		return nil, Errorf(CodeInvalidInput, "title may have at most 200 characters. %s", nothingCreated)
	}
	return in, nil
}

// checkCreate applies create_session's rules in order: one level, the cap,
// then provider, model, effort, group and folder, filling in what the agent
// left out.
func (cr *creates) checkCreate(ctx context.Context, c *caller, in *createArgs) (*createPlan, *Error) {
	if e := cr.checkCreateLimits(ctx, c); e != nil {
		return nil, e
	}
	pl := &createPlan{provID: in.provID, model: in.model, effort: in.effort, mode: in.mode, need: &cardNeed{}}
	if e := cr.planAgent(c, pl); e != nil {
		return nil, e
	}
	if e := cr.planPlace(ctx, c, in, pl); e != nil {
		return nil, e
	}
	pl.title = in.title
	if pl.title == "" {
		pl.title = titleFrom(in.text)
	}
	return pl, nil
}

// checkCreateLimits applies the rule limits: one level (R6.2), the cap
// (R6.1) and a paired relay's cap.
func (cr *creates) checkCreateLimits(ctx context.Context, c *caller) *Error {
	if c.s.StartedBy != nil && !c.s.MayCreateSessions {
		return Errorf(CodeForbidden, "This session was started by an agent, and such sessions cannot start sessions themselves unless the owner allows it for this conversation. %s", nothingCreated)
	}
	n, err := cr.st.BusyCount(ctx, c.s.ID)
	if err != nil {
		return internal("checkCreate: BusyCount", err)
	}
	if n >= cr.opts.Limits.ActiveSessions {
		return Errorf(CodeSessionLimit, "%d sessions this conversation started already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			n, cr.opts.Limits.ActiveSessions, nothingCreated)
	}
	return cr.turns.precheckPeerCap(ctx, c.s.ID, cr.remote.startedBy(c), nothingCreated)
}

// planAgent checks and fills in the new session's provider, model, effort
// and mode: what the agent leaves out follows the caller's session.
func (cr *creates) planAgent(c *caller, pl *createPlan) *Error {
	if pl.provID == "" {
		pl.provID = c.s.Provider
		if isExternal(c.s) {
			// An external client's sessions run on the relay's first provider.
			pl.provID = cr.models.ids()[0]
		}
	}
	if pl.provID == ProviderExternal {
		return Errorf(CodeInvalidInput, "An agent cannot start an external session: its agent is an MCP client the owner connects. %s", nothingCreated)
	}
	p, e := cr.models.provider(pl.provID, nothingCreated)
	if e != nil {
		return e
	}
	if e := cr.usage.checkAvailable(p, nothingCreated); e != nil { // R17.1
		return e
	}
	pl.info = p.Info()
	if pl.modelNote, e = cr.models.checkModel(pl.info, pl.model, nothingCreated, true); e != nil {
		return e
	}
	if pl.model == "" {
		pl.model = pl.info.DefaultModel
		if pl.provID == c.s.Provider && c.s.Model != "" {
			pl.model = c.s.Model
		}
	}
	if e := cr.models.checkEffort(pl.info, pl.effort, nothingCreated); e != nil {
		return e
	}
	if pl.effort == "" && contains(pl.info.Efforts, c.s.Effort) {
		pl.effort = c.s.Effort
	}
	if pl.mode == "" {
		pl.mode = firstNonEmpty(c.s.Mode, "agent")
	}
	return nil
}

// planPlace checks and fills in the new session's group, repo and folder.
func (cr *creates) planPlace(ctx context.Context, c *caller, in *createArgs, pl *createPlan) *Error {
	var e *Error
	if in.groupRef != "" {
		if pl.group, e = cr.groups.findGroup(ctx, in.groupRef, nothingCreated); e != nil {
			return e
		}
	}
	if e := cr.checkRepo(ctx, in, pl); e != nil { // R24.4
		return e
	}
	if pl.cwd, e = cr.checkFolder(in.cwd, nothingCreated); e != nil {
		return e
	}
	if pl.cwd == "" && pl.repo == nil {
		pl.cwd = firstNonEmpty(c.s.Cwd, cr.opts.DefaultCwd)
	}
	return nil
}

// cardCreate asks the owner when a card is needed: the conversation's first
// session (R5.2.1), ask/plan mode (R5.2.3), loop protection (R5.2.6).
func (cr *creates) cardCreate(ctx context.Context, c *caller, in *createArgs, pl *createPlan) *Error {
	first, err := cr.st.Flag(ctx, c.s.ID, "created")
	if err != nil {
		return internal("cardCreate: Flag", err)
	}
	if !first {
		pl.need.add("This is the first session an agent starts in this conversation.")
		pl.need.flags = append(pl.need.flags, "created")
	}
	modeCard(pl.need, c, "create_session")
	if e := cr.cards.loopCard(ctx, pl.need, c); e != nil {
		return e
	}
	where := pl.cwd
	if pl.repo != nil {
		where = repoWhere(in.repo, pl.branch)
	}
	lines := []string{createCardLine(pl.title, pl.info.Name, where, in.text), settingsLine(pl.model, pl.effort, pl.mode)}
	if pl.group != nil {
		lines = append(lines, groupLine(cr.groups.groupName(ctx, pl.group), pl.group.ID))
	}
	return cr.cards.askCard(ctx, c, &cardAsk{need: pl.need, action: "create_session", lines: lines, nothing: nothingCreated})
}

// createCardLine is a create_session card's first line (R18.16: one line).
func createCardLine(title, provider, cwd, text string) string {
	return fmt.Sprintf(`Start a session "%s" with %s in %s: %s`, LineValue(title, fieldTitle), LineValue(provider, fieldModel),
		LineValue(cwd, fieldPath), LineValue(text, fieldExcerpt))
}

// applyCreate creates the session in its group, queues its first prompt and
// waits for the reply.
func (cr *creates) applyCreate(ctx context.Context, c *caller, in *createArgs, pl *createPlan) (*result, *Error) {
	// Effect. It completes even if the caller's client goes away now (its
	// context ends on a disconnect, R18.12); only the wait for the reply ends.
	waitCtx := ctx
	ctx = context.WithoutCancel(ctx)
	// The caller's record again (a card may have taken minutes), and the
	// named group must still exist (R7.9): else nothing is created.
	if fresh, err := cr.st.GetSession(ctx, c.s.ID); err == nil {
		c.s = fresh
	}
	group := pl.group
	if group != nil {
		if _, err := cr.st.GetGroup(ctx, group.ID); errors.Is(err, store.ErrNotFound) {
			return nil, Errorf(CodeUnknownGroup, "The session group %q (%s) on relay %q was dissolved before the session could start. %s",
				cr.groups.groupName(ctx, group), group.ID, cr.opts.Name, nothingCreated)
		} else if err != nil {
			return nil, internal("applyCreate: GetGroup", err)
		}
	}
	s, e := cr.newSession(ctx, c, in, pl)
	if e != nil {
		return nil, e
	}
	group, groupWarning := cr.groupCreated(ctx, c, s, group)
	t, err := cr.turns.queue(ctx, prompt{s: s, text: in.text, role: "agent", from: cr.turns.fromRef(c), origin: c.origin(cr.opts.Name), caller: c.s.ID, waitFor: in.wait})
	if err != nil {
		cr.turns.unreserve(ctx, c.s.ID, s.ID)
		return nil, internalAfter(err, "session "+s.ID+" was created, but its first prompt was not queued")
	}
	pl.queued = true
	done := "session " + s.ID + " was created and its prompt queued (message_id " + t.ID + ")"
	if t, err = cr.turns.await(waitCtx, turnWait{id: t.ID, d: in.wait, own: true, delivery: c.delivery}); err != nil {
		return nil, internalAfter(err, done)
	}
	res := newResult(s.ID, "")
	pr := cr.turns.turnResult(ctx, res, t)
	res.what = fmt.Sprintf("%q, %s", pl.title, res.what)
	pr.Provider, pr.Model, pr.Mode, pr.Effort, pr.Title = some(pl.provID), some(pl.model), some(pl.mode), some(pl.effort), some(pl.title)
	if s.Repo != "" {
		pr.Repo, pr.Branch = some(s.Repo), some(s.Branch)
	}
	pr.Group = some(cr.groups.groupRefOf(ctx, group, s.ID))
	if groupWarning != "" {
		pr.GroupWarning, pr.Note = groupWarning, "The session was created but did not land in a group; tell the owner."
		res.what += " (no group: " + groupWarning + ")"
	} else {
		pr.Note = in.note
	}
	if pl.modelNote != "" {
		pr.ModelNote = joinNote(pr.ModelNote, pl.modelNote)
	}
	return res, nil
}

// newSession makes the session record under the 4-at-work cap: a
// repository session's worktree first (its folder, R24.4), removed again
// when the session is not made.
func (cr *creates) newSession(ctx context.Context, c *caller, in *createArgs, pl *createPlan) (*store.Session, *Error) {
	now := cr.now()
	s := &store.Session{ID: store.NewID(16), Title: pl.title, Provider: pl.provID, Model: pl.model, Effort: pl.effort, Mode: pl.mode,
		Cwd: pl.cwd, Token: store.NewID(24), CreatedAt: now, LastActivityAt: now, StartedBy: cr.remote.startedBy(c)}
	if pl.repo != nil {
		dir, e := cr.addWorktree(ctx, pl, s.ID, in.repo)
		if e != nil {
			return nil, e
		}
		s.Cwd, s.Repo, s.Branch = dir, in.repo, pl.branch
	}
	e := cr.reserveAndCreate(ctx, c, s)
	if e != nil {
		cr.removeWorktree(ctx, s)
		return nil, e
	}
	if pl.repo == nil {
		_ = cr.st.NoteCwd(ctx, pl.cwd, now)
	}
	return s, nil
}

// reserveAndCreate takes the new session's place under the caller's caps
// and stores it.
func (cr *creates) reserveAndCreate(ctx context.Context, c *caller, s *store.Session) *Error {
	if err := cr.st.ReserveUnder(ctx, c.s.ID, s.ID, cr.opts.Limits.ActiveSessions, cr.opts.Limits.ActiveSessionsPerPeerToken); err != nil {
		if errors.Is(err, store.ErrPeerSessionLimit) {
			return cr.turns.peerCapError(s.StartedBy, nothingCreated)
		}
		if errors.Is(err, store.ErrSessionLimit) {
			return Errorf(CodeSessionLimit, "%d sessions this conversation started already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
				cr.opts.Limits.ActiveSessions, cr.opts.Limits.ActiveSessions, nothingCreated)
		}
		return internal("applyCreate: ReserveUnder", err)
	}
	if err := cr.st.CreateSession(ctx, s); err != nil {
		cr.turns.unreserve(ctx, c.s.ID, s.ID)
		return internal("applyCreate: CreateSession", err)
	}
	return nil
}

// groupCreated puts a just created session into its group: the named one,
// else the caller's, else a new one with the caller as head. A session that
// another relay's agent started joins no group unless it named one (R7.9):
// its caller is a stand-in here, no session to head or share a group with.
// It returns the group joined, or nil and a warning when that failed (the
// session stays).
func (cr *creates) groupCreated(ctx context.Context, c *caller, s *store.Session, group *store.Group) (*store.Group, string) {
	if group == nil && c.remote != nil {
		return nil, ""
	}
	var err error
	if group == nil {
		// Join the caller's group, or found one with the caller as head.
		if c.s.GroupID != "" {
			group, err = cr.st.GetGroup(ctx, c.s.GroupID)
		}
		if group == nil {
			group, err = cr.groups.newGroup(ctx, "", c.s.ID, false)
			if err == nil {
				err = cr.groups.joinGroup(ctx, c.s, group)
			}
			if err == nil {
				err = cr.st.SaveSession(ctx, c.s)
			}
		}
	} else if _, gerr := cr.st.GetGroup(ctx, group.ID); gerr != nil {
		err = fmt.Errorf("the group %s was dissolved before the session started", group.ID)
	}
	if err == nil && group != nil {
		if err = cr.groups.joinGroup(ctx, s, group); err == nil {
			err = cr.st.SaveSession(ctx, s)
		}
	}
	if err != nil {
		cr.log.Error("create_session: group not joined", "session", s.ID, "err", err)
		s.GroupID = ""
		return nil, "the relay could not put the session into its group"
	}
	return group, ""
}
