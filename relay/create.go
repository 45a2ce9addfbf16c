package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

func titleFrom(text string) string {
	line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
	if line == "" {
		return "Untitled"
	}
	return excerpt(line, 60)
}

// checkFolder applies the folders rule; "" is fine (defaults apply).
func (r *Relay) checkFolder(dir, nothing string) (string, *Error) {
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
	if !config.Inside(r.opts.Folders, dir) {
		return "", Errorf(CodeInvalidInput, "Relay %q may not use the folder %s; sessions may use folders inside %s. %s", r.opts.Name, dir, strings.Join(r.opts.Folders, ", "), nothing)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", Errorf(CodeInvalidInput, "The folder %s does not exist on relay %q. %s", dir, r.opts.Name, nothing)
	}
	if _, why := r.folderAllowed(dir); why != "" {
		return "", Errorf(CodeInvalidInput, "%s %s", why, nothing)
	}
	return dir, nil
}

// folderAllowed resolves a session's folder and checks it against the
// folders rule after symbolic links (R18.3); why is "" when it is allowed.
func (r *Relay) folderAllowed(dir string) (resolved, why string) {
	resolved, ok, err := config.InsideResolved(r.opts.Folders, dir)
	if err != nil {
		return "", fmt.Sprintf("The folder %s cannot be resolved on relay %q (it no longer exists or cannot be read).", dir, r.opts.Name)
	}
	if !ok {
		return "", fmt.Sprintf("The folder %s resolves to %s, outside the folders relay %q may use (%s).", dir, resolved, r.opts.Name, strings.Join(r.opts.Folders, ", "))
	}
	return resolved, ""
}

func (r *Relay) createSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	text, e := promptText(a, nothingCreated)
	if e != nil {
		return nil, e
	}
	wait, note, e := r.waitArg(ctx, a, nothingCreated)
	if e != nil {
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
	provID, model, effort, mode, cwd := get("provider"), get("model"), get("effort"), get("mode"), get("cwd")
	repo, branch, title, groupRef := get("repo"), get("branch"), get("title"), get("group")
	if e != nil {
		return nil, e
	}
	if e := checkMode(mode, nothingCreated); e != nil {
		return nil, e
	}
	if len(title) > 200 {
		return nil, Errorf(CodeInvalidInput, "title may have at most 200 characters. %s", nothingCreated)
	}
	// Rule limits: one level (R6.2), the cap (R6.1).
	if c.s.StartedBy != nil && !c.s.MayCreateSessions {
		return nil, Errorf(CodeForbidden, "This session was started by an agent, and such sessions cannot start sessions themselves unless the owner allows it for this conversation. %s", nothingCreated)
	}
	n, err := r.st.BusyCount(ctx, c.s.ID)
	if err != nil {
		return nil, internal(err)
	}
	if n >= r.opts.Limits.ActiveSessions {
		return nil, Errorf(CodeSessionLimit, "%d sessions this conversation started already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			n, r.opts.Limits.ActiveSessions, nothingCreated)
	}
	// What the agent leaves out follows the caller's session.
	if provID == "" {
		provID = c.s.Provider
		if isExternal(c.s) {
			// An external client's sessions run on the relay's first provider.
			provID = r.providerIDs()[0]
		}
	}
	if provID == ProviderExternal {
		return nil, Errorf(CodeInvalidInput, "An agent cannot start an external session: its agent is an MCP client the owner connects. %s", nothingCreated)
	}
	p, e := r.provider(provID, nothingCreated)
	if e != nil {
		return nil, e
	}
	if e := r.checkAvailable(p, nothingCreated); e != nil { // R17.1
		return nil, e
	}
	info := p.Info()
	modelNote, e := r.checkModel(info, model, nothingCreated, true)
	if e != nil {
		return nil, e
	}
	if model == "" {
		model = info.DefaultModel
		if provID == c.s.Provider && c.s.Model != "" {
			model = c.s.Model
		}
	}
	if e := r.checkEffort(info, effort, nothingCreated); e != nil {
		return nil, e
	}
	if effort == "" && contains(info.Efforts, c.s.Effort) {
		effort = c.s.Effort
	}
	if mode == "" {
		mode = firstNonEmpty(c.s.Mode, "agent")
	}
	var group *store.Group
	if groupRef != "" {
		if group, e = r.findGroup(ctx, groupRef, nothingCreated); e != nil {
			return nil, e
		}
	}
	if cwd, e = r.checkFolder(cwd, nothingCreated); e != nil {
		return nil, e
	}
	if cwd == "" {
		cwd = firstNonEmpty(c.s.Cwd, r.opts.DefaultCwd)
	}
	if title == "" {
		title = titleFrom(text)
	}
	// Card.
	need := &cardNeed{}
	first, err := r.st.Flag(ctx, c.s.ID, "created")
	if err != nil {
		return nil, internal(err)
	}
	if !first {
		need.add("This is the first session an agent starts in this conversation.")
		need.flags = append(need.flags, "created")
	}
	modeCard(need, c, "create_session")
	if e := r.loopCard(ctx, need, c); e != nil {
		return nil, e
	}
	queued := false
	defer func() {
		if !queued {
			r.giveBack(ctx, need, c) // nothing was sent: the prompt does not count (R5.2.6)
		}
	}()
	lines := []string{fmt.Sprintf("Start a session %q with %s in %s: %s", title, info.Name, cwd, excerpt(text, 200)),
		settingsLine(model, effort, mode)}
	if group != nil {
		lines = append(lines, fmt.Sprintf("Group: %s (%s)", r.groupName(ctx, group), group.ID))
	}
	if e := r.askCard(ctx, c, need, "create_session", nil, lines, nothingCreated); e != nil {
		return nil, e
	}
	// Effect. It completes even if the caller's client goes away now (its
	// context ends on a disconnect, R18.12); only the wait for the reply ends.
	waitCtx := ctx
	ctx = context.WithoutCancel(ctx)
	// The caller's record again (a card may have taken minutes), and the
	// named group must still exist (R7.9): else nothing is created.
	if fresh, err := r.st.GetSession(ctx, c.s.ID); err == nil {
		c.s = fresh
	}
	if group != nil {
		if _, err := r.st.GetGroup(ctx, group.ID); errors.Is(err, store.ErrNotFound) {
			return nil, Errorf(CodeUnknownGroup, "The session group %q (%s) on relay %q was dissolved before the session could start. %s",
				r.groupName(ctx, group), group.ID, r.opts.Name, nothingCreated)
		} else if err != nil {
			return nil, internal(err)
		}
	}
	now := r.now()
	s := &store.Session{ID: store.NewID(16), Title: title, Provider: provID, Model: model, Effort: effort, Mode: mode,
		Cwd: cwd, Repo: repo, Branch: branch, Token: store.NewID(24), CreatedAt: now, LastActivityAt: now,
		StartedBy: &store.Ref{Relay: r.opts.Name, Session: c.s.ID, Title: c.s.Title}}
	if err := r.st.Reserve(ctx, c.s.ID, s.ID, r.opts.Limits.ActiveSessions); err != nil {
		if errors.Is(err, store.ErrSessionLimit) {
			return nil, Errorf(CodeSessionLimit, "%d sessions this conversation started already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
				r.opts.Limits.ActiveSessions, r.opts.Limits.ActiveSessions, nothingCreated)
		}
		return nil, internal(err)
	}
	if err := r.st.CreateSession(ctx, s); err != nil {
		r.unreserve(ctx, c.s.ID, s.ID)
		return nil, internal(err)
	}
	_ = r.st.NoteCwd(ctx, cwd, now)
	var groupWarning string
	if group == nil {
		// Join the caller's group, or found one with the caller as head.
		if c.s.GroupID != "" {
			group, err = r.st.GetGroup(ctx, c.s.GroupID)
		}
		if group == nil {
			group, err = r.newGroup(ctx, "", c.s.ID, false)
			if err == nil {
				err = r.joinGroup(ctx, c.s, group)
			}
			if err == nil {
				err = r.st.SaveSession(ctx, c.s)
			}
		}
	} else if _, gerr := r.st.GetGroup(ctx, group.ID); gerr != nil {
		err = fmt.Errorf("the group %s was dissolved before the session started", group.ID)
	}
	if err == nil && group != nil {
		if err = r.joinGroup(ctx, s, group); err == nil {
			err = r.st.SaveSession(ctx, s)
		}
	}
	if err != nil {
		r.log.Error("create_session: group not joined", "session", s.ID, "err", err)
		groupWarning = "the relay could not put the session into its group"
		group = nil
		s.GroupID = ""
	}
	t, err := r.queue(ctx, s, text, "agent", r.fromRef(c), c.origin(r.opts.Name), c.s.ID, false, wait)
	if err != nil {
		r.unreserve(ctx, c.s.ID, s.ID)
		return nil, internalAfter(err, "session "+s.ID+" was created, but its first prompt was not queued")
	}
	queued = true
	t, e = r.sent(waitCtx, c, t, wait, "session "+s.ID+" was created and its prompt queued (message_id "+t.ID+")")
	if e != nil {
		return nil, e
	}
	res := newResult(s.ID, "")
	r.turnResult(ctx, res, t)
	res.what = fmt.Sprintf("%q, %s", title, res.what)
	res.set("provider", provID).set("model", model).set("mode", mode).set("effort", effort).set("title", title)
	if repo != "" {
		res.set("repo", repo)
	}
	if branch != "" {
		res.set("branch", branch)
	}
	if group != nil {
		role := "member"
		if group.Head == s.ID {
			role = "head"
		}
		res.set("group", map[string]any{"id": group.ID, "name": r.groupName(ctx, group), "role": role})
	} else {
		res.set("group", nil)
	}
	if groupWarning != "" {
		res.set("groupWarning", groupWarning).set("note", "The session was created but did not land in a group; tell the owner.")
		res.what += " (no group: " + groupWarning + ")"
	} else if note != "" {
		res.set("note", note)
	}
	if modelNote != "" {
		res.note("modelNote", modelNote)
	}
	return res, nil
}
