package domain

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// Session states (R7.4).
const (
	StateRunning        = "running_turn"
	StateBackgroundOnly = "background_only"
	StateIdle           = "idle"
)

// Modes a session's relay mode can take.
var modes = []string{"agent", "ask", "plan"}

func validMode(m string) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// timeFormat is how results show times: UTC with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z"

func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeFormat)
}

func (r *Relay) listRelays(ctx context.Context, c *caller, a *args) (*result, *Error) {
	st, err := r.settings(ctx)
	if err != nil {
		return nil, internal("listRelays: settings", err)
	}
	relays := []any{}
	unlocked := 0
	if st.AgentSessions {
		relays = append(relays, map[string]any{"name": r.opts.Name, "self": true, "online": true,
			"version": r.opts.Version, "permission": "full", "unlocked": true})
		unlocked++
	}
	paired, n, err := r.pairedRelays(ctx, c.s.ID)
	if err != nil {
		return nil, internal("listRelays: pairedRelays", err)
	}
	relays = append(relays, paired...)
	unlocked += n
	res := newResult("", fmt.Sprintf("%s, %d unlocked", plural(len(relays), "relay", "relays"), unlocked))
	res.set("self", map[string]any{"name": r.opts.Name}).set("relays", relays).
		set("limits", map[string]any{"maxWaitSeconds": st.MaxWaitSeconds, "maxActiveSessions": r.opts.Limits.ActiveSessions})
	return res, nil
}

func (r *Relay) relayInfo(ctx context.Context, c *caller, a *args) (*result, *Error) {
	st, err := r.settings(ctx)
	if err != nil {
		return nil, internal("relayInfo: settings", err)
	}
	provs := []any{}
	for _, id := range r.providerIDs() {
		in := r.providers[id].Info()
		pv := map[string]any{"id": in.ID, "name": in.Name, "defaultModel": in.DefaultModel,
			"models": nonNil(in.Models), "efforts": nonNil(in.Efforts), "available": in.Status != provider.StatusUnavailable}
		if in.Status == provider.StatusUnavailable { // R17.1: e.g. the agent CLI is not installed
			pv["status"], pv["statusReason"] = in.Status, in.StatusReason
		}
		provs = append(provs, pv)
	}
	cwds, err := r.st.RecentCwds(ctx, 10)
	if err != nil {
		return nil, internal("relayInfo: RecentCwds", err)
	}
	res := newResult("", fmt.Sprintf("%s, %s", plural(len(provs), "provider", "providers"), "modes agent, ask, plan"))
	res.set("name", r.opts.Name).set("version", r.opts.Version).set("platform", runtime.GOOS+"/"+runtime.GOARCH).
		set("acceptsAgentPrompts", st.AcceptAgentPrompts).set("providers", provs).set("defaultCwd", r.opts.DefaultCwd).
		set("recentCwds", nonNil(cwds)).set("modes", modes)
	groups, total, err := r.grp.groupList(ctx, 50)
	if err != nil {
		r.log.Warn("relay_info: groups unreadable", "err", err)
		res.set("groups", nil).set("groupsNote", "Groups cannot be read on this relay right now, so create_session cannot take group here.")
	} else {
		res.set("groups", groups)
		if total > len(groups) {
			res.set("groupsTotal", total)
		}
		res.what += ", " + plural(total, "group", "groups")
	}
	return res, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *Relay) usage(ctx context.Context, c *caller, a *args) (*result, *Error) {
	provs := []any{}
	capped := 0
	for _, id := range r.providerIDs() {
		u, err := r.st.Usage(ctx, id)
		if err != nil {
			return nil, internal("usage: Usage", err)
		}
		pv := map[string]any{"id": id, "name": r.providers[id].Info().Name, "status": "ok",
			"tracked": false, "paused": false,
			"note":    "quota not tracked: this relay cannot see the provider's limits; it counts the turns and tokens it ran itself",
			"counted": map[string]any{"turns": u["turns"], "inputTokens": u["inputTokens"], "outputTokens": u["outputTokens"]}}
		r.use.agentUsage(ctx, id, u, pv)            // cost, a usage-limit pause, availability (R17.3)
		hasCap, err := r.use.capMeters(ctx, id, pv) // a monthly cap's meters (R7.8)
		if err != nil {
			return nil, internal("usage: capMeters", err)
		}
		if hasCap {
			capped++
		}
		provs = append(provs, pv)
	}
	what := plural(len(provs), "provider", "providers") + ", quotas not tracked"
	if capped > 0 {
		what = fmt.Sprintf("%s, %d with a monthly cap", plural(len(provs), "provider", "providers"), capped)
	}
	return newResult("", what).set("providers", provs), nil
}

// stateOf is a session's state (R7.4): a running or queued turn, else a
// background task still running, else idle.
func stateOf(x store.Extras) string {
	if x.Cur != "" || x.Queued > 0 {
		return StateRunning // a queued prompt is a turn about to run
	}
	for _, t := range x.Tasks {
		if t.Status == "running" {
			return StateBackgroundOnly
		}
	}
	return StateIdle
}

// view is a session as list_sessions and read_session show it.
type view struct {
	s       *store.Session
	state   string
	count   int
	tasks   []*store.Task
	curTurn string
	group   *store.Group // Name filled in (a nameless group is called by its head's title)
	watched bool
}

// views loads what the session records need around them, in one pipeline per kind.
func (r *Relay) views(ctx context.Context, ss []*store.Session) ([]*view, error) {
	ids := make([]string, 0, len(ss))
	for _, s := range ss {
		if s != nil {
			ids = append(ids, s.ID)
		}
	}
	extras, err := r.st.SessionExtras(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*view, 0, len(ids))
	groups := map[string]*store.Group{}
	allSubs, err := r.st.AllScopeSubscriptions(ctx)
	if err != nil {
		return nil, err
	}
	now := r.now()
	i := 0
	for _, s := range ss {
		if s == nil {
			continue
		}
		x := extras[i]
		i++
		v := &view{s: s, curTurn: x.Cur, count: x.Count, watched: x.Named > 0}
		for _, sub := range allSubs {
			if sub.Watcher != s.ID && !slices.Contains(sub.Exclude, s.ID) {
				v.watched = true
			}
		}
		for _, t := range x.Tasks {
			if t.Status == "running" || now.Sub(t.EndedAt) < r.opts.Timing.TaskOutputKept {
				v.tasks = append(v.tasks, t)
			}
		}
		v.state = stateOf(x)
		if s.GroupID != "" {
			g, ok := groups[s.GroupID]
			if !ok {
				g, err = r.st.GetGroup(ctx, s.GroupID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, err
				}
				if g != nil && g.Name == "" {
					g.Name = r.grp.groupName(ctx, g)
				}
				groups[s.GroupID] = g
			}
			v.group = g
		}
		out = append(out, v)
	}
	return out, nil
}

func taskBrief(t *store.Task) *relay.TaskBrief {
	return &relay.TaskBrief{TaskID: t.ID, Description: t.Description, Type: taskType(t.Type), Status: t.Status}
}

// taskType is a task's type as agents see it, the names of the seed's
// example (`local_bash`); the relay keeps its own kinds inside.
func taskType(kind string) string {
	switch kind {
	case "shell":
		return "local_bash"
	case "subagent":
		return "local_agent"
	}
	return kind // monitor
}

func (r *Relay) listItem(ctx context.Context, v *view) *relay.SessionItem {
	tasks := []*relay.TaskBrief{}
	for _, t := range v.tasks {
		tasks = append(tasks, taskBrief(t))
	}
	return &relay.SessionItem{ID: v.s.ID, Title: v.s.Title, Provider: v.s.Provider, Model: v.s.Model,
		State: v.state, Cwd: v.s.Cwd, LastActivityAt: tsPtr(v.s.LastActivityAt), MessageCount: v.count,
		Tasks: tasks, Group: r.grp.groupRef(ctx, v), Mode: v.s.Mode, Archived: v.s.Archived,
		MayCreateSessions: v.s.MayCreateSessions, StartedBy: v.s.StartedBy, Watched: v.watched}
}

func (r *Relay) listSessions(ctx context.Context, c *caller, a *args) (*result, *Error) {
	scope, e := a.str("scope")
	if e != nil {
		return nil, e
	}
	if scope == "" {
		scope = "active"
	}
	if scope != "active" && scope != "archived" && scope != "all" {
		return nil, Errorf(CodeInvalidInput, `scope must be "active", "archived" or "all" (got %q). Nothing was done.`, scope)
	}
	limit, e := a.boundedInt("limit", 50, 1, 200)
	if e != nil {
		return nil, e
	}
	items, total, err := r.SessionList(ctx, scope, limit)
	if err != nil {
		return nil, internal("listSessions: SessionList", err)
	}
	res := newResult("", fmt.Sprintf("%s (%s)", plural(total, "session", "sessions"), scope))
	res.set("sessions", items).set("total", total)
	if total > len(items) {
		res.set("truncated", true)
		res.what += fmt.Sprintf(", %d shown", len(items))
	}
	return res, nil
}

// Sessions names several sessions (id and title) in one read, in the order
// of ids; a session that does not exist is nil.
func (r *Relay) Sessions(ctx context.Context, ids []string) ([]*relay.SessionRef, error) {
	ss, err := r.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*relay.SessionRef, len(ss))
	for i, s := range ss {
		if s != nil {
			out[i] = &relay.SessionRef{ID: s.ID, Title: s.Title}
		}
	}
	return out, nil
}

// SessionList lists sessions as list_sessions shows them (also the owner API).
func (r *Relay) SessionList(ctx context.Context, scope string, limit int) ([]*relay.SessionItem, int, error) {
	ids, total, err := r.st.ListSessionIDs(ctx, scope, limit)
	if err != nil {
		return nil, 0, err
	}
	ss, err := r.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, 0, err
	}
	vs, err := r.views(ctx, ss)
	if err != nil {
		return nil, 0, err
	}
	items := make([]*relay.SessionItem, 0, len(vs))
	for _, v := range vs {
		items = append(items, r.listItem(ctx, v))
	}
	return items, total, nil
}

// target resolves the `session` argument to a session on this relay.
func (r *Relay) target(ctx context.Context, a *args, key string) (*store.Session, *Error) {
	ref, e := a.str(key)
	if e != nil {
		return nil, e
	}
	if ref == "" {
		return nil, Errorf(CodeInvalidInput, "%s is required: the id of a session (list_sessions shows them). Nothing was done.", key)
	}
	if key == "session" && a.pre != nil { // read with the caller (loadCall), this call's ref
		return r.sessionFound(normRef(ref), a.pre.Target, a.pre.TargetMatches, a.pre.TargetErr)
	}
	return r.sessionByRef(ctx, ref)
}

// normRef is a session reference as looked up: lowercase, no spaces around.
func normRef(ref string) string { return strings.ToLower(strings.TrimSpace(ref)) }

func (r *Relay) sessionByRef(ctx context.Context, ref string) (*store.Session, *Error) {
	ref = normRef(ref)
	if len(ref) < 8 {
		return nil, Errorf(CodeInvalidInput, "session %q is too short: give the full id or at least its first 8 characters. Nothing was done.", ref)
	}
	s, n, err := r.st.ResolveSession(ctx, ref) // one round trip for a whole id
	return r.sessionFound(ref, s, n, err)
}

// sessionFound is the answer to a look-up of ref: the session, or why not.
func (r *Relay) sessionFound(ref string, s *store.Session, n int, err error) (*store.Session, *Error) {
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "Relay %q has no session %q. Nothing was done.", r.opts.Name, ref)
	}
	if err != nil {
		return nil, internal("sessionFound: ResolveSession", err)
	}
	if n > 1 {
		return nil, Errorf(CodeInvalidInput, "session %q matches more than one session; give more characters of the id. Nothing was done.", ref)
	}
	if s == nil {
		return nil, Errorf(CodeNotFound, "Relay %q has no session %q. Nothing was done.", r.opts.Name, ref)
	}
	return s, nil
}

func (r *Relay) readSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	last, e := a.boundedInt("last", 5, 1, 50)
	if e != nil {
		return nil, e
	}
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	d, err := r.SessionDetail(ctx, s, last)
	if err != nil {
		return nil, internal("readSession: SessionDetail", err)
	}
	res := newResult(s.ID, fmt.Sprintf("%s, %s", plural(len(d.Messages), "message", "messages"), d.State))
	fields, err := jsonFields(d)
	if err != nil {
		return nil, internal("readSession: jsonFields", err)
	}
	for k, v := range fields {
		res.set(k, v)
	}
	return res, nil
}

// SessionDetail is a session as read_session shows it (also the owner API).
func (r *Relay) SessionDetail(ctx context.Context, s *store.Session, last int) (*relay.SessionDetail, error) {
	// Pending questions first: a turn writes its partial reply before it raises
	// a question, so a question seen here comes with the reply written before it.
	qs, err := r.pendingQuestions(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	vs, err := r.views(ctx, []*store.Session{s})
	if err != nil {
		return nil, err
	}
	v := vs[0]
	// listItem's fields, then the detail's.
	m := &relay.SessionDetail{ID: v.s.ID, Title: v.s.Title, Provider: v.s.Provider, Model: v.s.Model, State: v.state, Cwd: v.s.Cwd,
		LastActivityAt: tsPtr(v.s.LastActivityAt), MessageCount: v.count, Mode: v.s.Mode, Archived: v.s.Archived,
		MayCreateSessions: v.s.MayCreateSessions, StartedBy: v.s.StartedBy}
	if v.watched {
		m.Watched = &v.watched
	}
	msgs, err := r.st.LastMessages(ctx, s.ID, last)
	if err != nil {
		return nil, err
	}
	m.Messages = make([]relay.Message, 0, len(msgs))
	for _, msg := range msgs {
		m.Messages = append(m.Messages, relay.Message{ID: msg.ID, Role: msg.Role, Text: msg.Text, CreatedAt: tsPtr(msg.CreatedAt), From: msg.From})
	}
	if v.curTurn != "" {
		if t, err := r.st.GetTurn(ctx, v.curTurn); err == nil && t.Partial != "" {
			m.InFlight = &t.Partial
		}
	}
	m.PendingQuestions = qs
	st, err := r.settings(ctx)
	if err != nil {
		return nil, err
	}
	m.Tasks = []*relay.Task{}
	for _, t := range v.tasks {
		m.Tasks = append(m.Tasks, r.tasks.taskView(ctx, t, st.QuietTaskMinutes))
	}
	if v.group != nil {
		members, err := r.grp.groupMembers(ctx, v.group, s.ID, 50)
		if err != nil {
			return nil, err
		}
		m.Group = r.grp.groupRef(ctx, v)
		m.Group.Members = members
	}
	m.Repo, m.Branch, m.Effort = s.Repo, s.Branch, s.Effort
	return m, nil
}

func (r *Relay) pendingQuestions(ctx context.Context, sid string) ([]relay.PendingQuestion, error) {
	qs, err := r.st.PendingQuestions(ctx, sid)
	if err != nil {
		return nil, err
	}
	out := []relay.PendingQuestion{}
	for _, q := range qs {
		out = append(out, relay.PendingQuestion{ID: q.ID, Kind: q.Kind, Question: q.Question, Options: nonNil(q.Options)})
	}
	asks, err := r.st.AsksIn(ctx, sid)
	if err != nil {
		return nil, err
	}
	for _, ak := range asks {
		out = append(out, relay.PendingQuestion{ID: ak.ID, Kind: "ask", Question: ak.Question, Options: nonNil(ak.Options)})
	}
	return out, nil
}
