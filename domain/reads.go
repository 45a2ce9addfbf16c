package domain

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// reads are the read side of the tool and of the owner's views (R7.1–R7.4,
// R7.13): list_relays, relay_info, usage, list_sessions, read_session and
// the session list and detail the console and the owner API show. The
// sessions themselves are found and viewed by Relay (sessions.go: target,
// sessionByRef, views), which every action shares.
type reads struct {
	st     readsStore
	log    *slog.Logger
	opts   *Options // the relay's: name, version, limits
	groups *groups
	usage  *usage
	tasks  *tasks
	models *models // the providers, in config order (ids)
	relay  readsHost
}

// readsStore is the store as the reads see it.
type readsStore interface {
	recordStore
	readStore
}

// readsHost is what the reads ask of the rest of the relay: the sessions'
// views and a target (sessions.go), the settings (relay.go),
// the pairings as this conversation sees them (pairing.go).
type readsHost interface {
	views(ctx context.Context, ss []*store.Session) ([]*view, error)
	targets
	settings(ctx context.Context) (store.Settings, error)
	pairedRelays(ctx context.Context, sid string) ([]relayEntry, int, error)
}

// SessionList is the owner's session list (GET /api/v1/sessions).
func (r *Relay) SessionList(ctx context.Context, scope string, limit int) ([]*relay.SessionItem, int, error) {
	items, total, err := r.reads.SessionList(ctx, scope, limit)
	for _, it := range items {
		it.Via = ViaAgentBadge(it.StartedBy, r.opts.Name) // R4.11, R23.9
	}
	return items, total, err
}

// SessionDetail is the owner's view of one session.
func (r *Relay) SessionDetail(ctx context.Context, s *store.Session, last int) (*relay.SessionDetail, error) {
	d, err := r.reads.SessionDetail(ctx, s, last)
	if d != nil {
		d.Via = ViaAgentBadge(d.StartedBy, r.opts.Name) // R4.11, R23.9
	}
	return d, err
}

func (rd *reads) listRelays(ctx context.Context, c *caller, a *args) (*result, *Error) {
	st, err := rd.relay.settings(ctx)
	if err != nil {
		return nil, internal("listRelays: settings", err)
	}
	relays := []relayEntry{}
	unlocked := 0
	if st.AgentSessions {
		relays = append(relays, relayEntry{Name: rd.opts.Name, Self: true, Online: true,
			Version: rd.opts.Version, Permission: "full", Unlocked: true})
		unlocked++
	}
	paired, n, err := rd.relay.pairedRelays(ctx, c.s.ID)
	if err != nil {
		return nil, internal("listRelays: pairedRelays", err)
	}
	relays = append(relays, paired...)
	unlocked += n
	res := newResult("", fmt.Sprintf("%s, %d unlocked", plural(len(relays), "relay", "relays"), unlocked))
	return res.with(&listRelaysResult{Self: relayName{Name: rd.opts.Name}, Relays: relays,
		Limits: relayLimits{MaxWaitSeconds: st.MaxWaitSeconds, MaxActiveSessions: rd.opts.Limits.ActiveSessions}}), nil
}

func (rd *reads) relayInfo(ctx context.Context, c *caller, a *args) (*result, *Error) {
	st, err := rd.relay.settings(ctx)
	if err != nil {
		return nil, internal("relayInfo: settings", err)
	}
	provs := []providerInfo{}
	for _, id := range rd.models.ids() {
		in := rd.models.providers[id].Info()
		pv := providerInfo{ID: in.ID, Name: in.Name, DefaultModel: in.DefaultModel,
			Models: nonNil(in.Models), Efforts: nonNil(in.Efforts), Available: in.Status != provider.StatusUnavailable,
			Repos:   rd.opts.Traits[in.ID].Repos,   // R24.4: repo and branch instead of cwd
			Billing: rd.opts.Traits[in.ID].Billing, // R24.6
		}
		if in.Status == provider.StatusUnavailable { // R17.1: e.g. the agent CLI is not installed
			pv.Status, pv.StatusReason = some(string(in.Status)), some(in.StatusReason)
		}
		provs = append(provs, pv)
	}
	cwds, err := rd.st.RecentCwds(ctx, 10)
	if err != nil {
		return nil, internal("relayInfo: RecentCwds", err)
	}
	res := newResult("", fmt.Sprintf("%s, %s", plural(len(provs), "provider", "providers"), "modes agent, ask, plan"))
	ri := &relayInfoResult{Name: rd.opts.Name, Version: rd.opts.Version, Platform: runtime.GOOS + "/" + runtime.GOARCH,
		AcceptsAgentPrompts: st.AcceptAgentPrompts, Providers: provs, DefaultCwd: rd.opts.DefaultCwd,
		RecentCwds: nonNil(cwds), Modes: modes}
	res.with(ri)
	groups, total, err := rd.groups.groupList(ctx, 50)
	if err != nil {
		rd.log.Warn("relay_info: groups unreadable", "err", err)
		ri.GroupsNote = "Groups cannot be read on this relay right now, so create_session cannot take group here."
	} else {
		ri.Groups = groups
		if total > len(groups) {
			ri.GroupsTotal = total
		}
		res.what += ", " + plural(total, "group", "groups")
	}
	return res, nil
}

// usageReport is the usage action (R7.3, R7.8): the providers' meters.
func (rd *reads) usageReport(ctx context.Context, c *caller, a *args) (*result, *Error) {
	provs := []*providerUsage{}
	capped := 0
	for _, id := range rd.models.ids() {
		u, err := rd.st.Usage(ctx, id)
		if err != nil {
			return nil, internal("usage: Usage", err)
		}
		pv := &providerUsage{ID: id, Name: rd.models.providers[id].Info().Name, Status: "ok",
			Note:    "quota not tracked: this relay cannot see the provider's limits; it counts the turns and tokens it ran itself",
			Counted: usageCounted{Turns: u["turns"], InputTokens: u["inputTokens"], OutputTokens: u["outputTokens"]}}
		rd.usage.agentUsage(ctx, id, u, pv)            // cost, a usage-limit pause, availability (R17.3)
		hasCap, err := rd.usage.capMeters(ctx, id, pv) // a monthly cap's meters (R7.8)
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
	return newResult("", what).with(&usageResult{Providers: provs}), nil
}

func (rd *reads) listItem(ctx context.Context, v *view) *relay.SessionItem {
	tasks := []*relay.TaskBrief{}
	for _, t := range v.tasks {
		tasks = append(tasks, taskBrief(t))
	}
	return &relay.SessionItem{ID: v.s.ID, Title: v.s.Title, Provider: v.s.Provider, Model: v.s.Model,
		State: v.state, Cwd: v.s.Cwd, LastActivityAt: tsPtr(v.s.LastActivityAt), MessageCount: v.count,
		Tasks: tasks, Group: rd.groups.groupRef(ctx, v), Mode: v.s.Mode, Archived: v.s.Archived,
		MayCreateSessions: v.s.MayCreateSessions, StartedBy: v.s.StartedBy, Watched: v.watched,
		Preview: previewLine(v.s.Preview)}
}

// previewMax is the length of a list item's preview, in characters (R23.1).
const previewMax = 80

// previewLine makes the start of a message's text, as the store keeps it,
// one plain line of at most previewMax characters (R23.1): a machine header
// line ("[relay event · …]", "[Prompt from an agent …]") is left out when
// text follows it, whitespace and control characters become single spaces,
// and a longer line ends with "…". The store's clip may have cut a character
// in two: the broken end is dropped.
func previewLine(s string) string {
	s = strings.ToValidUTF8(s, "")
	if first, rest, ok := strings.Cut(s, "\n"); ok && strings.HasPrefix(first, "[") &&
		strings.HasSuffix(strings.TrimSpace(first), "]") && strings.TrimSpace(rest) != "" {
		s = rest
	}
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if utf8.RuneCountInString(s) <= previewMax {
		return s
	}
	rs := []rune(s)
	return strings.TrimRight(string(rs[:previewMax-1]), " ") + "…"
}

func (rd *reads) listSessions(ctx context.Context, c *caller, a *args) (*result, *Error) {
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
	var items []*relay.SessionItem
	var total int
	var err error
	if c.reach != nil {
		items, total, err = rd.reachList(ctx, c, scope, limit)
	} else {
		items, total, err = rd.SessionList(ctx, scope, limit)
	}
	if err != nil {
		return nil, internal("listSessions: SessionList", err)
	}
	res := newResult("", fmt.Sprintf("%s (%s)", plural(total, "session", "sessions"), scope))
	ls := &listSessionsResult{Sessions: items, Total: total}
	res.with(ls)
	if total > len(items) {
		ls.Truncated = true
		res.what += fmt.Sprintf(", %d shown", len(items))
	}
	return res, nil
}

// Sessions names several sessions (id and title) in one read, in the order
// of ids; a session that does not exist is nil.
func (rd *reads) Sessions(ctx context.Context, ids []string) ([]*relay.SessionRef, error) {
	ss, err := rd.st.GetSessions(ctx, ids)
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
func (rd *reads) SessionList(ctx context.Context, scope string, limit int) ([]*relay.SessionItem, int, error) {
	ids, total, err := rd.st.ListSessionIDs(ctx, scope, limit)
	if err != nil {
		return nil, 0, err
	}
	ss, err := rd.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, 0, err
	}
	vs, err := rd.relay.views(ctx, ss)
	if err != nil {
		return nil, 0, err
	}
	items := make([]*relay.SessionItem, 0, len(vs))
	for _, v := range vs {
		items = append(items, rd.listItem(ctx, v))
	}
	return items, total, nil
}

// reachList is SessionList for a caller that reaches only some sessions
// (R18.35: a paired relay's agent with a "started" peer token): those, and
// their count.
func (rd *reads) reachList(ctx context.Context, c *caller, scope string, limit int) ([]*relay.SessionItem, int, error) {
	ids, _, err := rd.st.ListSessionIDs(ctx, scope, 1<<30)
	if err != nil {
		return nil, 0, err
	}
	ss, err := rd.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, 0, err
	}
	ss = c.reachable(ss)
	total := len(ss)
	vs, err := rd.relay.views(ctx, ss[:min(limit, len(ss))])
	if err != nil {
		return nil, 0, err
	}
	items := make([]*relay.SessionItem, 0, len(vs))
	for _, v := range vs {
		items = append(items, rd.listItem(ctx, v))
	}
	return items, total, nil
}

func (rd *reads) readSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	last, e := a.boundedInt("last", 5, 1, 50)
	if e != nil {
		return nil, e
	}
	s, e := rd.relay.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	d, err := rd.SessionDetail(ctx, s, last)
	if err != nil {
		return nil, internal("readSession: SessionDetail", err)
	}
	if c.reach != nil && d.Group != nil && len(d.Group.Members) > 0 {
		// The members it does not reach are not named (R18.35).
		ids := make([]string, len(d.Group.Members))
		for i, m := range d.Group.Members {
			ids[i] = m.ID
		}
		ms, err := rd.st.GetSessions(ctx, ids)
		if err != nil {
			return nil, internal("readSession: GetSessions", err)
		}
		kept := d.Group.Members[:0:0]
		for i, m := range d.Group.Members {
			if ms[i] != nil && c.reach.has(ms[i]) {
				kept = append(kept, m)
			}
		}
		d.Group.Members = kept
	}
	res := newResult(s.ID, fmt.Sprintf("%s, %s", plural(len(d.Messages), "message", "messages"), d.State))
	return res.with(d), nil
}

// SessionDetail is a session as read_session shows it (also the owner API).
func (rd *reads) SessionDetail(ctx context.Context, s *store.Session, last int) (*relay.SessionDetail, error) {
	// Pending questions first: a turn writes its partial reply before it raises
	// a question, so a question seen here comes with the reply written before it.
	qs, err := rd.pendingQuestions(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	vs, err := rd.relay.views(ctx, []*store.Session{s})
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
	msgs, err := rd.st.LastMessages(ctx, s.ID, last)
	if err != nil {
		return nil, err
	}
	m.Messages = make([]relay.Message, 0, len(msgs))
	for _, msg := range msgs {
		m.Messages = append(m.Messages, relay.Message{ID: msg.ID, Role: msg.Role, Text: msg.Text, CreatedAt: tsPtr(msg.CreatedAt), From: msg.From,
			Outcome: msg.Outcome})
	}
	if v.curTurn != "" {
		if t, err := rd.st.GetTurn(ctx, v.curTurn); err == nil && t.Partial != "" {
			m.InFlight = &t.Partial
		}
	}
	m.PendingQuestions = qs
	st, err := rd.relay.settings(ctx)
	if err != nil {
		return nil, err
	}
	m.Tasks = []*relay.Task{}
	for _, t := range v.tasks {
		m.Tasks = append(m.Tasks, rd.tasks.taskView(ctx, t, st.QuietTaskMinutes))
	}
	if v.group != nil {
		members, err := rd.groups.groupMembers(ctx, v.group, s.ID, 50)
		if err != nil {
			return nil, err
		}
		m.Group = rd.groups.groupRef(ctx, v)
		m.Group.Members = members
	}
	m.Repo, m.Branch, m.Effort = s.Repo, s.Branch, s.Effort
	return m, nil
}

func (rd *reads) pendingQuestions(ctx context.Context, sid string) ([]relay.PendingQuestion, error) {
	qs, err := rd.st.PendingQuestions(ctx, sid)
	if err != nil {
		return nil, err
	}
	out := []relay.PendingQuestion{}
	for _, q := range qs {
		out = append(out, relay.PendingQuestion{ID: q.ID, Kind: q.Kind, Question: q.Question, Options: nonNil(q.Options)})
	}
	asks, err := rd.st.AsksIn(ctx, sid)
	if err != nil {
		return nil, err
	}
	for _, ak := range asks {
		out = append(out, relay.PendingQuestion{ID: ak.ID, Kind: "ask", Question: ak.Question, Options: nonNil(ak.Options)})
	}
	return out, nil
}
