package domain

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
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
	ss = slices.DeleteFunc(slices.Clone(ss), func(s *store.Session) bool { return s == nil })
	ids := make([]string, 0, len(ss))
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	extras, err := r.st.SessionExtras(ctx, ids)
	if err != nil {
		return nil, err
	}
	allSubs, err := r.st.AllScopeSubscriptions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*view, 0, len(ss))
	groups := map[string]*store.Group{}
	now := r.now()
	for i, s := range ss {
		x := extras[i]
		v := &view{s: s, curTurn: x.Cur, count: x.Count, watched: x.Named > 0 || scopeWatched(allSubs, s.ID),
			tasks: r.shownTasks(x.Tasks, now), state: stateOf(x)}
		if v.group, err = r.viewGroup(ctx, groups, s.GroupID); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// scopeWatched reports whether a subscription to every session (scope "all")
// watches session sid: one not its own watcher's that does not exclude it.
func scopeWatched(subs []*store.Subscription, sid string) bool {
	return slices.ContainsFunc(subs, func(sub *store.Subscription) bool {
		return sub.Watcher != sid && !slices.Contains(sub.Exclude, sid)
	})
}

// shownTasks are the tasks a session's record shows at now: the running
// ones and those ended less than TaskOutputKept ago.
func (r *Relay) shownTasks(tasks []*store.Task, now time.Time) []*store.Task {
	var out []*store.Task
	for _, t := range tasks {
		if t.Status == "running" || now.Sub(t.EndedAt) < r.opts.Timing.TaskOutputKept {
			out = append(out, t)
		}
	}
	return out
}

// viewGroup is the group gid for a session's record, its Name filled in,
// loaded once per call into groups; nil for no group or one gone.
func (r *Relay) viewGroup(ctx context.Context, groups map[string]*store.Group, gid string) (*store.Group, error) {
	if gid == "" {
		return nil, nil
	}
	if g, ok := groups[gid]; ok {
		return g, nil
	}
	g, err := r.st.GetGroup(ctx, gid)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if g != nil && g.Name == "" {
		g.Name = r.groups.groupName(ctx, g)
	}
	groups[gid] = g
	return g, nil
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

// targets is the lookup of the session a call names (Relay.target), as the
// subsystems' hosts offer it.
type targets interface {
	target(ctx context.Context, a *args, key string) (*store.Session, *Error)
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

// openURL is a session's console page on this relay (R23.8, a result's
// openUrl): PUBLIC_URL/s/ID, nil when the relay knows no public URL.
func (r *Relay) openURL(ctx context.Context, sid string) any {
	if u := r.pageURL(ctx, sid); u != "" {
		return u
	}
	return nil
}

// pageURL is openURL as a string, "" when the relay knows no public URL (an
// owner notice's openUrl, R23.10).
func (r *Relay) pageURL(ctx context.Context, sid string) string {
	base := strings.TrimRight(r.drainer.publicURL(ctx), "/")
	if base == "" || sid == "" {
		return ""
	}
	return base + "/s/" + sid
}

// remoteOpenURL is a paired relay's session page (R23.8), by the public
// URL its hello reports; nil when it reports none.
func remoteOpenURL(p *store.Pairing, session any) any {
	sid, _ := session.(string)
	base := strings.TrimRight(p.PublicURL, "/")
	if base == "" || sid == "" {
		return nil
	}
	return base + "/s/" + url.PathEscape(sid)
}
