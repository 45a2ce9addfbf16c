package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
	"github.com/oar/relay/taskout"
)

// NewSession is the owner's POST /api/v1/sessions.
type NewSession struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Title    string `json:"title"`
	Cwd      string `json:"cwd"`
	Mode     string `json:"mode"`
	Effort   string `json:"effort"`
	Text     string `json:"text"`
	Group    string `json:"group"`
	Repo     string `json:"repo"`   // a repository session's repository (R24.4)
	Branch   string `json:"branch"` // and its branch
}

// ownerSizes checks the owner's new session's text and title lengths.
func ownerSizes(in NewSession) *Error {
	if len(in.Text) > MaxTextBytes {
		return Errorf(CodeInvalidInput, "text may have at most 1 MiB. %s", nothingCreated)
	}
	if len(in.Title) > 200 {
		return Errorf(CodeInvalidInput, "title may have at most 200 characters. %s", nothingCreated)
	}
	return nil
}

// OwnerCreateSession creates a session for the owner; with text its first prompt is queued.
func (r *Relay) OwnerCreateSession(ctx context.Context, in NewSession) (*relay.SessionDetail, error) {
	provID := firstNonEmpty(in.Provider, "scripted")
	if provID == ProviderExternal {
		if e := externalSession(in); e != nil {
			return nil, e
		}
	}
	info, e := r.ownerAgent(provID, in)
	if e != nil {
		return nil, e
	}
	cwd, repo, e := r.ownerFolder(ctx, provID, in) // a folder, or a repository (R24.4)
	if e != nil {
		return nil, e
	}
	if e := ownerSizes(in); e != nil {
		return nil, e
	}
	var group *store.Group
	if in.Group != "" {
		if group, e = r.groups.findGroup(ctx, in.Group, nothingCreated); e != nil {
			return nil, e
		}
	}
	now := r.now()
	s := &store.Session{ID: store.NewID(16), Title: in.Title, Provider: provID, Model: firstNonEmpty(in.Model, info.DefaultModel),
		Effort: in.Effort, Mode: firstNonEmpty(in.Mode, "agent"), Cwd: firstNonEmpty(cwd, r.opts.DefaultCwd),
		Token: store.NewID(24), CreatedAt: now, LastActivityAt: now}
	if s.Title == "" {
		s.Title = "New session"
		if in.Text != "" {
			s.Title = titleFrom(in.Text)
		}
	}
	if e := r.ownerWorktree(ctx, repo, s, in.Repo); e != nil {
		return nil, e
	}
	if err := r.storeOwnerSession(ctx, s, group); err != nil {
		return nil, err
	}
	var turnID string
	if strings.TrimSpace(in.Text) != "" {
		r.unlockMentions(ctx, s.ID, in.Text)
		t, err := r.turns.queue(ctx, prompt{s: s, text: in.Text, role: "user", origin: store.Origin{Path: []string{r.opts.Name}, Unlocked: r.remote.mentionedRelays(ctx, s.ID)}})
		if err != nil {
			return nil, err
		}
		turnID = t.ID
	}
	m, err := r.SessionDetail(ctx, s, 5)
	if err != nil {
		return nil, err
	}
	m.Token = s.Token
	m.MessageID = turnID // none ("") without a first prompt
	return m, nil
}

// ownerAgent checks the provider, model, effort and mode the owner gave a
// new session; an unavailable provider is refused only with a first prompt
// (R17.1).
func (r *Relay) ownerAgent(provID string, in NewSession) (provider.Info, *Error) {
	p, e := r.models.provider(provID, nothingCreated)
	if e != nil {
		return provider.Info{}, e
	}
	if e := r.usage.checkAvailable(p, nothingCreated); e != nil && strings.TrimSpace(in.Text) != "" { // R17.1
		return provider.Info{}, e
	}
	info := p.Info()
	if _, e := r.models.checkModel(info, in.Model, nothingCreated, true); e != nil {
		return provider.Info{}, e
	}
	if e := r.models.checkEffort(info, in.Effort, nothingCreated); e != nil {
		return provider.Info{}, e
	}
	if e := checkMode(in.Mode, nothingCreated); e != nil {
		return provider.Info{}, e
	}
	return info, nil
}

// storeOwnerSession stores a new session of the owner's, in its group if
// it has one.
func (r *Relay) storeOwnerSession(ctx context.Context, s *store.Session, group *store.Group) error {
	if err := r.st.CreateSession(ctx, s); err != nil {
		return fmt.Errorf("create session %s: %w", id8(s.ID), err)
	}
	r.noteCwd(ctx, s) // relay_info's recentCwds: the owner's sessions too (R24.6)
	if group == nil {
		return nil
	}
	if err := r.groups.joinGroup(ctx, s, group); err != nil {
		return fmt.Errorf("create session %s in group %s: %w", id8(s.ID), group.ID, err)
	}
	if err := r.st.SaveSession(ctx, s); err != nil {
		return fmt.Errorf("create session %s: %w", id8(s.ID), err)
	}
	return nil
}

// OwnerSession reads one session for the owner (id or prefix).
func (r *Relay) OwnerSession(ctx context.Context, ref string, last int) (*relay.SessionDetail, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	m, err := r.SessionDetail(ctx, s, last)
	if err != nil {
		return nil, err
	}
	cards, err := r.st.PendingCards(ctx)
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", id8(s.ID), err)
	}
	mine := []*relay.Card{}
	for _, c := range cards {
		if c.Session == s.ID {
			mine = append(mine, c)
		}
	}
	m.Cards = mine
	watching, err := r.remote.watchingList(ctx, s.ID) // those on paired relays too
	if err != nil {
		return nil, err
	}
	m.Watching = watching
	watched := m.IsWatched() // present, false too
	m.Watched = &watched
	return m, nil
}

// OwnerMessage is the owner writing in a conversation: it queues the prompt
// and resets loop protection (R5.2.6).
func (r *Relay) OwnerMessage(ctx context.Context, ref, text string) (*relay.MessageQueued, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	if strings.TrimSpace(text) == "" {
		return nil, Errorf(CodeInvalidInput, "text is required. %s", nothingSent)
	}
	if len(text) > MaxTextBytes {
		return nil, Errorf(CodeInvalidInput, "text may have at most 1 MiB. %s", nothingSent)
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s is archived; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	if p, ok := r.models.providers[s.Provider]; ok {
		if e := r.usage.checkAvailable(p, nothingSent); e != nil { // R17.1
			return nil, e
		}
	}
	if err := r.st.ResetLoop(ctx, s.ID); err != nil {
		return nil, fmt.Errorf("message session %s: %w", id8(s.ID), err)
	}
	r.unlockMentions(ctx, s.ID, text)         // R4.4: the owner mentioned paired relays
	r.schedules.releaseHeld(ctx, s.ID, false) // the owner wrote: held schedule firings go (R9.6)
	if isExternal(s) {
		return r.keepOwnerMessage(ctx, s, text)
	}
	t, err := r.turns.queue(ctx, prompt{s: s, text: text, role: "user", origin: store.Origin{Path: []string{r.opts.Name}, Unlocked: r.remote.mentionedRelays(ctx, s.ID)}})
	if err != nil {
		return nil, err
	}
	r.noteCwd(ctx, s) // relay_info's recentCwds: the owner's sessions too (R24.6)
	return &relay.MessageQueued{Session: s.ID, MessageID: t.ID, Status: string(t.Status)}, nil
}

// keepOwnerMessage keeps the owner's message in an external session's
// conversation (R24.7): no turn runs there (its agent is the user's own MCP
// client, R17.7), so it is kept as the owner's message for that client to
// read with read_session.
func (r *Relay) keepOwnerMessage(ctx context.Context, s *store.Session, text string) (*relay.MessageQueued, error) {
	m := &store.Message{ID: store.NewID(16), Role: "user", Text: text, CreatedAt: r.now()}
	if err := r.st.AppendActivity(ctx, s.ID, m); err != nil {
		return nil, fmt.Errorf("message session %s: %w", id8(s.ID), err)
	}
	delivered := false
	return &relay.MessageQueued{Session: s.ID, MessageID: m.ID, Status: "kept", Delivered: &delivered,
		Note: "Session " + id8(s.ID) + " is an external MCP client: the relay runs no turn for it. Your message is kept in its conversation; the session's own client reads it with read_session."}, nil
}

// noteCwd records the folder of a session that runs here for relay_info's
// recentCwds (not an external session's, which runs nowhere, nor a
// repository session's worktree); a failure only leaves it out of that list.
func (r *Relay) noteCwd(ctx context.Context, s *store.Session) {
	if s.Cwd == "" || isExternal(s) || s.Repo != "" {
		return
	}
	if err := r.st.NoteCwd(ctx, s.Cwd, r.now()); err != nil {
		r.log.Warn("recent folder not noted", "cwd", s.Cwd, "err", err)
	}
}

// OwnerStop stops a session's running turn.
func (r *Relay) OwnerStop(ctx context.Context, ref string) (*relay.StopRequested, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	ok, err := r.StopTurn(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	out := &relay.StopRequested{Session: s.ID, StopRequested: ok}
	if !ok {
		out.Note = "nothing was running"
	}
	return out, nil
}

// OwnerArchive archives a session.
func (r *Relay) OwnerArchive(ctx context.Context, ref string) (*relay.SessionArchived, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	if !s.Archived {
		if err := r.Archive(ctx, s.ID); err != nil {
			return nil, err
		}
	}
	return &relay.SessionArchived{Session: s.ID, Archived: true}, nil
}

// OwnerDeleteSession is the owner's DELETE /sessions/{id} (SPEC §12), archived
// or not: the session is archived first (token revoked R18.2, its turn stopped,
// queued prompts dropped), its schedules and subscriptions end with "deleted",
// its asks end; once no turn runs or waits, its record, messages, tasks and
// indexes are removed.
func (r *Relay) OwnerDeleteSession(ctx context.Context, ref string) (*relay.SessionDeleted, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	cards, err := r.st.PendingCards(ctx)
	if err != nil {
		return nil, fmt.Errorf("delete session %s: %w", id8(s.ID), err)
	}
	for _, c := range cards {
		if c.Session == s.ID { // a call blocked on a card in this session gives up
			if _, _, err := r.st.DecideCard(ctx, c.ID, "withdrawn"); err != nil {
				return nil, fmt.Errorf("withdraw card %s of deleted session %s: %w", c.ID, id8(s.ID), err)
			}
			r.notify(ctx, "card:"+c.ID)
			r.notify(ctx, "cards")
		}
	}
	if err := r.steer.retire(ctx, s.ID, "deleted"); err != nil {
		return nil, err
	}
	// The drain ends the stopped turn and the queued ones of an archived
	// session; wait for that (bounded) so no turn end writes into a deleted
	// session.
	for deadline := time.Now().Add(deleteDrainWait); time.Now().Before(deadline); {
		quiet, err := r.st.SessionQuiet(ctx, s.ID)
		if err != nil {
			return nil, fmt.Errorf("delete session %s: %w", id8(s.ID), err)
		}
		if quiet {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(deleteDrainPoll):
		}
	}
	if err := r.groups.leaveGroup(ctx, s); err != nil {
		return nil, fmt.Errorf("delete session %s: %w", id8(s.ID), err)
	}
	orch := orchestrator(r.opts.Name, s)
	if err := r.st.DeleteSession(ctx, s.ID, r.st.BusyKey(orch), r.st.PeerBusyKey(orch)); err != nil {
		return nil, fmt.Errorf("delete session %s: %w", id8(s.ID), err)
	}
	r.creates.removeWorktree(ctx, s) // a repository session's worktree (R24.4)
	r.notify(ctx, "tokens")
	r.notify(ctx, "session:"+s.ID)
	return &relay.SessionDeleted{Session: s.ID, Deleted: true}, nil
}

// SessionPatch is the owner's PATCH /sessions/{id}.
type SessionPatch struct {
	MayCreateSessions *bool   `json:"may_create_sessions"`
	Title             *string `json:"title"`
	Mode              *string `json:"mode"`
	Model             *string `json:"model"`
	Effort            *string `json:"effort"`
	// Group moves the session (R23.7): a group id or name (a new name
	// makes an owner's group), or "" / null to take it out of its group.
	Group OptString `json:"group"`
}

// OptString is a JSON string that may be absent (Set false), null or a string.
type OptString struct {
	Set   bool
	Value string
}

// UnmarshalJSON takes a string or null.
func (o *OptString) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Value = ""
		return nil
	}
	if err := json.Unmarshal(b, &o.Value); err != nil {
		return errors.New("group must be a string or null")
	}
	return nil
}

// OwnerPatchSession changes a session's settings, including may_create_sessions (R6.2).
func (r *Relay) OwnerPatchSession(ctx context.Context, ref string, p SessionPatch) (*relay.SessionDetail, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	if e := r.checkSessionPatch(s, p); e != nil {
		return nil, e
	}
	var move func() error
	if p.Group.Set {
		if move, e = r.groups.moveTo(ctx, s, p.Group.Value); e != nil {
			return nil, e
		}
	}
	p.applyTo(s)
	if move != nil {
		if err := move(); err != nil {
			return nil, fmt.Errorf("update session %s: move it to group %q: %w", id8(s.ID), p.Group.Value, err)
		}
	}
	if err := r.st.SaveSession(ctx, s); err != nil {
		return nil, fmt.Errorf("update session %s: %w", id8(s.ID), err)
	}
	r.notify(ctx, "session:"+s.ID) // the owner's console (R19.6)
	if move != nil {
		r.notifyGroups(ctx)
	}
	return r.SessionDetail(ctx, s, 5)
}

// checkSessionPatch checks the settings a patch of session s changes, in
// order: mode, model, effort, title.
func (r *Relay) checkSessionPatch(s *store.Session, p SessionPatch) *Error {
	prov, e := r.models.provider(s.Provider, nothingChanged)
	if e != nil {
		return e
	}
	if p.Mode != nil {
		if e := checkMode(*p.Mode, nothingChanged); e != nil || *p.Mode == "" {
			return Errorf(CodeInvalidInput, "mode must be agent, ask or plan. %s", nothingChanged)
		}
	}
	if p.Model != nil {
		if _, e := r.models.checkModel(prov.Info(), *p.Model, nothingChanged, false); e != nil {
			return e
		}
	}
	if p.Effort != nil {
		if e := r.models.checkEffort(prov.Info(), *p.Effort, nothingChanged); e != nil {
			return e
		}
	}
	if p.Title != nil && (strings.TrimSpace(*p.Title) == "" || len(*p.Title) > 200) {
		return Errorf(CodeInvalidInput, "title must have 1 to 200 characters. %s", nothingChanged)
	}
	return nil
}

// applyTo writes the patch's settings (but its group) into s.
func (p SessionPatch) applyTo(s *store.Session) {
	if p.MayCreateSessions != nil {
		s.MayCreateSessions = *p.MayCreateSessions
	}
	if p.Title != nil {
		s.Title = *p.Title
	}
	if p.Mode != nil {
		s.Mode = *p.Mode
	}
	if p.Model != nil && *p.Model != "" {
		s.Model = *p.Model
	}
	if p.Effort != nil {
		s.Effort = *p.Effort
	}
}

// SettingsPatch is the owner's PATCH /settings.
type SettingsPatch struct {
	AgentSessions      *bool `json:"agent_sessions"`
	AcceptAgentPrompts *bool `json:"accept_agent_prompts"`
	MaxWaitSeconds     *int  `json:"max_wait_seconds"`
	QuietTaskMinutes   *int  `json:"quiet_task_minutes"`
	MaxTurnSeconds     *int  `json:"max_turn_seconds"`
}

// Settings returns the owner's settings.
func (r *Relay) Settings(ctx context.Context) (store.Settings, error) { return r.settings(ctx) }

// PatchSettings changes the owner's settings; the whole patch is checked first.
func (r *Relay) PatchSettings(ctx context.Context, p SettingsPatch) (store.Settings, error) {
	st, err := r.settings(ctx)
	if err != nil {
		return st, err
	}
	if p.MaxWaitSeconds != nil && (*p.MaxWaitSeconds < 120 || *p.MaxWaitSeconds > 3600) {
		return st, Errorf(CodeInvalidInput, "max_wait_seconds must be between 120 and 3600 (got %d). %s", *p.MaxWaitSeconds, nothingChanged)
	}
	if p.QuietTaskMinutes != nil && (*p.QuietTaskMinutes < 1 || *p.QuietTaskMinutes > 1440) {
		return st, Errorf(CodeInvalidInput, "quiet_task_minutes must be between 1 and 1440 (got %d). %s", *p.QuietTaskMinutes, nothingChanged)
	}
	if p.MaxTurnSeconds != nil && (*p.MaxTurnSeconds < 1 || *p.MaxTurnSeconds > 86400) {
		return st, Errorf(CodeInvalidInput, "max_turn_seconds must be between 1 and 86400 (got %d). %s", *p.MaxTurnSeconds, nothingChanged)
	}
	if p.AgentSessions != nil {
		st.AgentSessions = *p.AgentSessions
	}
	if p.AcceptAgentPrompts != nil {
		st.AcceptAgentPrompts = *p.AcceptAgentPrompts
	}
	if p.MaxWaitSeconds != nil {
		st.MaxWaitSeconds = *p.MaxWaitSeconds
	}
	if p.QuietTaskMinutes != nil {
		st.QuietTaskMinutes = *p.QuietTaskMinutes
	}
	if p.MaxTurnSeconds != nil {
		st.MaxTurnSeconds = *p.MaxTurnSeconds
	}
	if err := r.st.SaveSettings(ctx, st); err != nil {
		return st, fmt.Errorf("update settings: %w", err)
	}
	r.setKept.keep(st)
	return st, r.st.Notify(ctx, "settings")
}

// Turn returns a turn's state for the owner (message id).
func (r *Relay) Turn(ctx context.Context, id string) (*store.Turn, error) {
	t, err := r.st.GetTurn(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No message %q. Nothing was done.", id)
	}
	return t, err
}

// RecoverDrains restarts the drain of sessions whose drain job was lost
// (an enqueue that failed, a Redis restart): any process may call it.
// stale keeps only the flags seen unchanged by the previous sweep.
func (r *Relay) RecoverDrains(ctx context.Context, stale func(map[string]string) map[string]string) (int, error) {
	flags, err := r.st.DrainFlags(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover drains: %w", err)
	}
	if stale != nil {
		flags = stale(flags)
	}
	n := 0
	for sid, taskID := range flags {
		holder, err := r.st.LeaseHolder(ctx, sid)
		if err != nil || holder != "" {
			continue
		}
		// No lease: no live worker runs this session (a running drain renews
		// its lease every 5 s). A task still waiting will run; one gone, or
		// active without a lease (its process died, R18.11), is replaced now
		// rather than when asynq's own recovery hands it back (55–120 s).
		waiting, err := r.enq.DrainTaskWaiting(ctx, taskID)
		if err != nil || waiting {
			continue
		}
		if err := r.drainer.enqueueDrain(ctx, sid); err != nil {
			return n, fmt.Errorf("recover drain %s: %w", sid, err)
		}
		r.log.Warn("restarted a lost drain", "session", sid, "lost_task", taskID)
		n++
	}
	return n, nil
}

// Providers describes the configured providers in config order (the console's New session form).
func (r *Relay) Providers() []provider.Info {
	out := []provider.Info{}
	for _, id := range r.models.ids() {
		out = append(out, r.models.providers[id].Info())
	}
	return out
}

// TaskTail is the end of a task's output as read_task_output shows it (the owner's console).
func (r *Relay) TaskTail(ctx context.Context, taskID string, n int) ([]string, error) {
	raw, err := r.st.TaskOutput(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("read the tail of task %s: %w", taskID, err)
	}
	tail, _ := taskout.Tail(raw, n)
	return tail, nil
}

// QuestionCards lists a session's pending question cards (ask_user) for the owner.
func (r *Relay) QuestionCards(ctx context.Context, sid string) ([]*store.Question, error) {
	return r.st.PendingQuestions(ctx, sid)
}
