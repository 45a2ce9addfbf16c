package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

const (
	nothingSent    = "Nothing was sent."
	nothingCreated = "No session was created."
	nothingChanged = "Nothing was changed."
	nothingDone    = "Nothing was done."
)

// promptText reads and checks the `text` argument.
func promptText(a *args, nothing string) (string, *Error) {
	text, e := a.str("text")
	if e != nil {
		return "", e
	}
	if strings.TrimSpace(text) == "" {
		return "", Errorf(CodeInvalidInput, "text is required: the prompt to send. %s", nothing)
	}
	if len(text) > MaxTextBytes {
		return "", Errorf(CodeInvalidInput, "text is %d bytes; a prompt may have at most %d bytes (1 MiB). %s", len(text), MaxTextBytes, nothing)
	}
	if !utf8.ValidString(text) {
		return "", Errorf(CodeInvalidInput, "text is not valid UTF-8. %s", nothing)
	}
	return text, nil
}

// waitArg reads wait_seconds and caps it by the longest wait (R7.11).
func (r *Relay) waitArg(ctx context.Context, a *args, nothing string) (time.Duration, string, *Error) {
	n, ok, e := a.integer("wait_seconds")
	if e != nil {
		return 0, "", e
	}
	if !ok {
		return r.capWait(ctx, r.opts.Timing.DefaultWait)
	}
	if n < 0 {
		return 0, "", Errorf(CodeInvalidInput, "wait_seconds must be 0 or more (got %d). %s", n, nothing)
	}
	return r.capWait(ctx, time.Duration(n)*time.Second)
}

func (r *Relay) capWait(ctx context.Context, d time.Duration) (time.Duration, string, *Error) {
	max := r.maxWait(ctx)
	if d > max {
		return max, fmt.Sprintf("wait_seconds was capped at %d, the longest wait per call on relay %q.", int(max/time.Second), r.opts.Name), nil
	}
	return d, "", nil
}

// orchestrator is the conversation whose 4-at-work cap a session counts toward.
func (r *Relay) orchestrator(s *store.Session) string {
	if s.StartedBy != nil && s.StartedBy.Relay == r.opts.Name {
		return s.StartedBy.Session
	}
	return ""
}

func (r *Relay) fromRef(c *caller) *store.Ref {
	return &store.Ref{Relay: r.opts.Name, Session: c.s.ID, Title: c.s.Title, Model: c.s.Model}
}

// queue appends a prompt to a session and starts its drain (enforcing the cap
// for agent prompts). role is user (owner), agent, schedule or event.
// waitFor > 0 marks, before the turn can run, that the caller waits on its
// reply (the no-echo rule must know it before the turn_end can fan out).
func (r *Relay) queue(ctx context.Context, s *store.Session, text, role string, from *store.Ref, origin store.Origin, callerID string, enforce bool, waitFor time.Duration) (*store.Turn, error) {
	if isExternal(s) {
		return nil, notPromptable(s, nothingSent) // R17.7: no turn can run there
	}
	now := r.now()
	t := &store.Turn{ID: store.NewID(16), Session: s.ID, Role: role, From: from, Origin: origin, Caller: callerID, CreatedAt: now, Text: text}
	drainID := "drain:" + s.ID + ":" + store.NewID(6)
	if waitFor > 0 {
		if err := r.st.SetWaiting(ctx, t.ID, waitFor+time.Minute); err != nil {
			return nil, err
		}
	}
	start, err := r.st.PushTurn(ctx, t, r.orchestrator(s), r.opts.Limits.ActiveSessions, enforce, drainID)
	if errors.Is(err, store.ErrSessionLimit) {
		return nil, Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			r.opts.Limits.ActiveSessions, r.opts.Limits.ActiveSessions, nothingSent)
	}
	if err != nil {
		return nil, err
	}
	if start {
		if err := r.enq.EnqueueDrain(ctx, s.ID, drainID); err != nil {
			// The prompt is queued; the recovery sweep starts the drain.
			r.log.Warn("enqueue drain failed; the sweep will retry", "session", s.ID, "err", err)
		}
	}
	t.Status = store.TurnQueued
	_ = r.st.Notify(ctx, "session:"+s.ID) // the owner's console (R19.6)
	return t, nil
}

// waitTurn waits until the turn ends, waits on a question, or d passes.
func (r *Relay) waitTurn(ctx context.Context, id string, d time.Duration) (*store.Turn, error) {
	ch, unsub := r.hub.sub("turn:" + id)
	defer unsub()
	timer := time.NewTimer(d)
	defer timer.Stop()
	recheck := time.NewTicker(2 * time.Second)
	defer recheck.Stop()
	for {
		t, err := r.st.GetTurn(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.Status == store.TurnDone || t.Status == store.TurnError || t.Status == store.TurnStopped || t.Question != "" || d <= 0 {
			return t, nil
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-timer.C:
			return r.st.GetTurn(ctx, id)
		case <-ctx.Done():
			return t, nil
		}
	}
}

// sent finishes a prompt an agent sent to another agent once it is queued:
// it waits for the reply (R7.11); its loop-protection count was taken with
// the card check (loopCard). done says what already happened, for an error
// from here on.
func (r *Relay) sent(ctx context.Context, c *caller, t *store.Turn, wait time.Duration, done string) (*store.Turn, *Error) {
	t, err := r.waitReply(ctx, t.ID, wait)
	if err != nil {
		return nil, internalAfter(err, done)
	}
	return t, nil
}

func terminal(status string) bool {
	return status == store.TurnDone || status == store.TurnError || status == store.TurnStopped
}

// waitReply is waitTurn for the prompt's own caller: while it waits, the
// turn's turn_end is held from its subscriptions and dropped once the reply
// reached it (no echo, R8.18). A reply counts as seen only once the call's
// result was written to the client (endWait, R18.12); a wait cut off because
// the client went away (ctx ended) ends at once.
func (r *Relay) waitReply(ctx context.Context, id string, d time.Duration) (*store.Turn, error) {
	if d > 0 {
		if err := r.st.SetWaiting(ctx, id, d+time.Minute); err != nil { // wait: the caller comes back for it
			return nil, err
		}
	}
	t, err := r.waitTurn(ctx, id, d)
	got := err == nil && terminal(t.Status)
	if serr := r.endWait(ctx, id, got); serr != nil {
		return nil, serr
	}
	return t, err
}

// turnResult fills the fields every prompting action returns (R7.7, R7.11).
func (r *Relay) turnResult(ctx context.Context, res *result, t *store.Turn) {
	status := t.Status
	if status == store.TurnRunning && t.Question != "" {
		status = "question"
	}
	res.set("status", status).set("session", t.Session).set("message_id", t.ID).set("openUrl", nil)
	switch status {
	case store.TurnDone:
		res.set("reply", map[string]any{"text": t.Reply, "model": t.ReplyModel})
		res.what = fmt.Sprintf("done, reply %d chars", utf8.RuneCountInString(t.Reply))
	case store.TurnError:
		res.set("turnError", t.Error)
		res.what = "error: " + t.Error
	case "question":
		qs, _ := r.pendingQuestions(ctx, t.Session)
		res.set("pendingQuestions", qs)
		res.what = "waiting on a question"
	case store.TurnRunning:
		// R7.11: what the reply has so far, its last 2,000 characters.
		p := []rune(t.Partial)
		if len(p) > 2000 {
			p = p[len(p)-2000:]
		}
		res.set("partial", string(p))
		res.what = status
	default:
		res.what = status
	}
}

func (r *Relay) send(ctx context.Context, c *caller, a *args) (*result, *Error) {
	// Shapes first (R3.4a).
	text, e := promptText(a, nothingSent)
	if e != nil {
		return nil, e
	}
	wait, note, e := r.waitArg(ctx, a, nothingSent)
	if e != nil {
		return nil, e
	}
	mode, e := a.str("mode")
	if e != nil {
		return nil, e
	}
	model, e := a.str("model")
	if e != nil {
		return nil, e
	}
	effort, e := a.str("effort")
	if e != nil {
		return nil, e
	}
	provID, e := a.str("provider")
	if e != nil {
		return nil, e
	}
	if e := checkMode(mode, nothingSent); e != nil {
		return nil, e
	}
	// Target, self.
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s is archived; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "send cannot target the calling conversation itself. %s", nothingSent)
	}
	if isExternal(s) {
		return nil, notPromptable(s, nothingSent)
	}
	// Rule limits: the 4-at-work cap (checked again atomically when queued).
	if e := r.precheckCap(ctx, s); e != nil {
		return nil, e
	}
	// Provider switch (R7.8), model, effort.
	target := s.Provider
	switchTo := ""
	if provID != "" && provID != s.Provider {
		cur, ok := r.providers[s.Provider]
		partner := ""
		if ok {
			partner = cur.Info().SwitchTo
		}
		p, ok2 := r.providers[provID]
		if !ok2 || (partner != provID && p.Info().SwitchTo != s.Provider) {
			return nil, Errorf(CodeProviderUnavailable, "Provider %q is not set up as a billing partner of %q on relay %q. %s", provID, s.Provider, r.opts.Name, nothingSent).
				With("remoteCode", strings.ToUpper(provID)+"_NOT_CONFIGURED")
		}
		target, switchTo = provID, provID
	}
	p, e := r.provider(target, nothingSent)
	if e != nil {
		return nil, e
	}
	if e := r.checkAvailable(p, nothingSent); e != nil { // R17.1
		return nil, e
	}
	info := p.Info()
	checkM := model
	if switchTo != "" && checkM == "" {
		checkM = s.Model
	}
	modelNote, e := r.checkModel(info, checkM, nothingSent, false)
	if e != nil {
		return nil, e
	}
	if e := r.checkEffort(info, effort, nothingSent); e != nil {
		return nil, e
	}
	// Card.
	if mode == "" {
		mode = c.s.Mode // a send without mode passes the caller's own mode (R7.10)
	}
	need := &cardNeed{}
	modeCard(need, c, "send")
	if e := r.loopCard(ctx, need, c); e != nil {
		return nil, e
	}
	queued := false
	defer func() {
		if !queued {
			r.giveBack(ctx, need, c) // nothing was sent: the prompt does not count (R5.2.6)
		}
	}()
	lines := []string{fmt.Sprintf("Send to %q (%s): %s", s.Title, id8(s.ID), excerpt(text, 200)),
		settingsLine(firstNonEmpty(model, s.Model), firstNonEmpty(effort, s.Effort), mode)}
	if switchTo != "" {
		lines = append(lines, "Switches billing to "+info.Name)
	}
	tid := s.ID
	if e := r.askCard(ctx, c, need, "send", &tid, lines, nothingSent); e != nil {
		return nil, e
	}
	// Effect. It completes even if the caller's client goes away now (its
	// context ends on a disconnect, R18.12); only the wait for the reply ends.
	waitCtx := ctx
	ctx = context.WithoutCancel(ctx)
	// Read the session again: a card may have taken minutes.
	s, err := r.st.GetSession(ctx, s.ID)
	if err != nil {
		return nil, internal(err)
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s was archived meanwhile; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	// The settings the prompt changes, written before it is queued (the turn
	// runs with them) and put back if the queue refuses it: a rejected message
	// switches nothing (R7.8).
	changes, undo := map[string]any{}, map[string]any{}
	change := func(field, old, nw string) {
		if nw != "" && nw != old {
			changes[field], undo[field] = nw, old
		}
	}
	change("mode", s.Mode, mode)
	change("model", s.Model, model)
	change("effort", s.Effort, effort)
	change("provider", s.Provider, switchTo)
	if len(changes) > 0 {
		if err := r.st.SetSessionFields(ctx, s.ID, changes); err != nil {
			return nil, internal(err)
		}
	}
	t, err := r.queue(ctx, s, text, "agent", r.fromRef(c), c.origin(r.opts.Name), c.s.ID, true, wait)
	if err != nil {
		if len(undo) > 0 {
			if uerr := r.st.SetSessionFields(context.WithoutCancel(ctx), s.ID, undo); uerr != nil {
				r.log.Error("undo settings of a refused send", "session", s.ID, "err", uerr)
			}
		}
		return nil, AsError(err)
	}
	queued = true
	t, e = r.sent(waitCtx, c, t, wait, "the prompt was queued (message_id "+t.ID+")")
	if e != nil {
		return nil, e
	}
	res := newResult(s.ID, "")
	r.turnResult(ctx, res, t)
	if note != "" {
		res.set("note", note)
	}
	if modelNote != "" {
		res.set("modelNote", modelNote)
	}
	return res, nil
}

func (r *Relay) precheckCap(ctx context.Context, s *store.Session) *Error {
	orch := r.orchestrator(s)
	if orch == "" {
		return nil
	}
	cur, err := r.st.CurrentTurn(ctx, s.ID)
	if err != nil {
		return internal(err)
	}
	q, err := r.st.QueuedTurns(ctx, s.ID)
	if err != nil {
		return internal(err)
	}
	if cur != "" || len(q) > 0 {
		return nil // busy already: the prompt just queues
	}
	n, err := r.st.BusyCount(ctx, orch)
	if err != nil {
		return internal(err)
	}
	if n >= r.opts.Limits.ActiveSessions {
		return Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			n, r.opts.Limits.ActiveSessions, nothingSent)
	}
	return nil
}

func settingsLine(model, effort, mode string) string {
	parts := []string{"Model: " + firstNonEmpty(model, "default")}
	if effort != "" {
		parts = append(parts, "Effort: "+effort)
	}
	if mode != "" {
		parts = append(parts, "Mode: "+mode)
	}
	return strings.Join(parts, " · ")
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

func excerpt(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	rs := []rune(s)
	return string(rs[:n]) + "…"
}

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
		_ = r.st.Unreserve(ctx, c.s.ID, s.ID)
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
		_ = r.st.Unreserve(context.WithoutCancel(ctx), c.s.ID, s.ID)
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
		res.set("modelNote", modelNote)
	}
	return res, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v && v != "" {
			return true
		}
	}
	return false
}

func (r *Relay) wait(ctx context.Context, c *caller, a *args) (*result, *Error) {
	wait, note, e := r.waitArg(ctx, a, nothingDone)
	if e != nil {
		return nil, e
	}
	mid, e := a.str("message_id")
	if e != nil {
		return nil, e
	}
	if mid == "" {
		return nil, Errorf(CodeInvalidInput, "message_id is required: the message_id that send or create_session returned. Nothing was done.")
	}
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "wait cannot wait on the calling conversation itself. Nothing was done.")
	}
	tid, n, err := r.st.ResolveTurnID(ctx, strings.ToLower(mid))
	if err != nil {
		return nil, internal(err)
	}
	if n > 1 {
		return nil, Errorf(CodeInvalidInput, "message_id %q matches more than one message; give more characters. Nothing was done.", mid)
	}
	if tid == "" || len(mid) < 8 {
		return nil, Errorf(CodeNotFound, "Session %s on relay %q has no message %q. Nothing was done.", id8(s.ID), r.opts.Name, mid)
	}
	t, err := r.st.GetTurn(ctx, tid)
	if err != nil || t.Session != s.ID {
		return nil, Errorf(CodeNotFound, "Session %s on relay %q has no message %q. Nothing was done.", id8(s.ID), r.opts.Name, mid)
	}
	if t.Caller == c.s.ID {
		t, err = r.waitReply(ctx, t.ID, wait)
	} else {
		t, err = r.waitTurn(ctx, t.ID, wait)
	}
	if err != nil {
		return nil, internal(err)
	}
	res := newResult(s.ID, "")
	r.turnResult(ctx, res, t)
	if note != "" {
		res.set("note", note)
	}
	return res, nil
}
