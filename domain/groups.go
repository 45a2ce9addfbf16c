package domain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// groups are the session groups (R7.2, R7.9, R7.10, R19.6): what a group
// is called, who is in it, joining and leaving, and the owner's group routes.
// The tool actions find and fill groups through it; it reaches the rest of
// the relay only to tell the console.
type groups struct {
	st    groupsStore
	now   func() time.Time
	opts  *Options // the relay's: its name
	relay groupsHost
}

// groupsStore is the store as the groups see it.
type groupsStore interface {
	recordStore
	groupStore
}

// groupsHost is what the groups ask of the rest of the relay: telling the
// console of a changed session or group list (notify.go).
type groupsHost interface {
	notify(ctx context.Context, what string)
	notifyGroups(ctx context.Context)
}

type groupInfo struct {
	g        *store.Group
	name     string
	members  int
	activity int64
}

// allGroups loads every group with its display name, member count and last activity.
func (gr *groups) allGroups(ctx context.Context) ([]groupInfo, error) {
	gs, err := gr.st.Groups(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]groupInfo, 0, len(gs))
	for _, g := range gs {
		ids, err := gr.st.GroupMembers(ctx, g.ID)
		if err != nil {
			return nil, err
		}
		ss, err := gr.st.GetSessions(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("list the sessions of group %s: %w", g.ID, err)
		}
		gi := groupInfo{g: g, name: g.Name}
		for _, s := range ss {
			if s == nil {
				continue
			}
			gi.members++
			if a := s.LastActivityAt.UnixMilli(); a > gi.activity {
				gi.activity = a
			}
			if gi.name == "" && s.ID == g.Head {
				gi.name = s.Title
			}
		}
		if gi.name == "" {
			gi.name = gr.groupName(ctx, g)
		}
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].activity != out[j].activity {
			return out[i].activity > out[j].activity
		}
		return out[i].g.ID < out[j].g.ID
	})
	return out, nil
}

// groupList is relay_info's groups: only groups with sessions, most recent first (R7.2).
func (gr *groups) groupList(ctx context.Context, max int) ([]groupBrief, int, error) {
	all, err := gr.allGroups(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := []groupBrief{}
	total := 0
	for _, gi := range all {
		if gi.members == 0 {
			continue
		}
		total++
		if len(out) < max {
			out = append(out, groupBrief{ID: gi.g.ID, Name: gi.name, MemberCount: gi.members})
		}
	}
	return out, total, nil
}

// findGroup resolves a group id or name (any case) for create_session and
// update_session; nothing suffix says what was not done.
func (gr *groups) findGroup(ctx context.Context, ref, nothing string) (*store.Group, *Error) {
	all, err := gr.allGroups(ctx)
	if err != nil {
		return nil, internal("findGroup: allGroups", err)
	}
	var hits []groupInfo
	for _, gi := range all {
		if strings.HasPrefix(ref, "grp_") && gi.g.ID == ref {
			return gi.g, nil
		}
		if strings.EqualFold(gi.name, ref) {
			hits = append(hits, gi)
		}
	}
	if len(hits) == 1 {
		return hits[0].g, nil
	}
	list := func(gs []groupInfo) (string, []groupBrief) {
		var parts []string
		var items []groupBrief
		for i, gi := range gs {
			if i >= 20 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", gi.name, gi.g.ID))
			items = append(items, groupBrief{ID: gi.g.ID, Name: gi.name, MemberCount: gi.members})
		}
		if items == nil {
			items = []groupBrief{}
		}
		return strings.Join(parts, ", "), items
	}
	if len(hits) > 1 {
		txt, items := list(hits)
		e := Errorf(CodeUnknownGroup, "Relay %q has more than one session group named %q: %s. %s Pass the id.", gr.opts.Name, ref, txt, nothing).
			With("groups", items)
		if len(hits) > len(items) {
			e = e.With("groupsTotal", len(hits))
		}
		return nil, e
	}
	txt, items := list(all)
	if txt == "" {
		txt = "none"
	}
	end := "." // a cut list ends ", …" without a full stop after it (R7.9)
	if len(all) > len(items) {
		txt, end = txt+", …", ""
	}
	e := Errorf(CodeUnknownGroup, "Relay %q has no session group %q. Groups there: %s%s %s", gr.opts.Name, ref, txt, end, nothing).
		With("groups", items)
	if len(all) > len(items) {
		e = e.With("groupsTotal", len(all))
	}
	return nil, e
}

// joinGroup puts s into g (leaving its old group).
func (gr *groups) joinGroup(ctx context.Context, s *store.Session, g *store.Group) error {
	if s.GroupID == g.ID {
		return nil
	}
	if err := gr.leaveGroup(ctx, s); err != nil {
		return fmt.Errorf("move session %s to group %s: %w", id8(s.ID), g.ID, err)
	}
	if err := gr.st.SetGroupMember(ctx, g.ID, s.ID, true); err != nil {
		return err
	}
	s.GroupID = g.ID
	return nil
}

// leaveGroup takes s out of its group; a group an agent made goes with its last session.
func (gr *groups) leaveGroup(ctx context.Context, s *store.Session) error {
	if s.GroupID == "" {
		return nil
	}
	old := s.GroupID
	s.GroupID = ""
	if err := gr.st.SetGroupMember(ctx, old, s.ID, false); err != nil {
		return err
	}
	g, err := gr.st.GetGroup(ctx, old)
	if errors.Is(err, store.ErrNotFound) {
		return nil // already gone
	}
	if err != nil {
		return err
	}
	left, err := gr.st.GroupMembers(ctx, old)
	if err != nil {
		return err
	}
	if len(left) == 0 && !g.OwnerCreated {
		return gr.st.DeleteGroup(ctx, old)
	}
	return nil
}

// newGroup creates a group; name "" means it is called by its head's title.
func (gr *groups) newGroup(ctx context.Context, name, head string, owner bool) (*store.Group, error) {
	g := &store.Group{ID: "grp_" + store.NewID(6), Name: name, Head: head, OwnerCreated: owner, CreatedAt: gr.now()}
	return g, gr.st.SaveGroup(ctx, g)
}

// CreateGroup is the owner's POST /groups.
func (gr *groups) CreateGroup(ctx context.Context, name string) (*relay.GroupCreated, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return nil, Errorf(CodeInvalidInput, "name is required (1 to 200 characters). No group was created.")
	}
	if strings.EqualFold(name, "none") {
		return nil, Errorf(CodeInvalidInput, `A group cannot be named "none": update_session uses it to take a session out of its group. No group was created.`)
	}
	g, err := gr.newGroup(ctx, name, "", true)
	if err != nil {
		return nil, err
	}
	gr.relay.notifyGroups(ctx) // the owner's console shows it, empty (R19.6)
	return &relay.GroupCreated{ID: g.ID, Name: g.Name, MemberCount: 0, OwnerCreated: true, CreatedAt: tsString(g.CreatedAt)}, nil
}

// Groups lists every group for the owner (empty ones too): the named ones
// in the owner's order (R23.7), then the others in activity order.
func (gr *groups) Groups(ctx context.Context) ([]*relay.Group, error) {
	all, err := gr.allGroups(ctx)
	if err != nil {
		return nil, err
	}
	order, err := gr.st.GroupOrder(ctx)
	if err != nil {
		return nil, err
	}
	all = ordered(all, order)
	out := []*relay.Group{}
	for _, gi := range all {
		out = append(out, &relay.Group{ID: gi.g.ID, Name: gi.name, MemberCount: gi.members,
			Head: gi.g.Head, OwnerCreated: gi.g.OwnerCreated})
	}
	return out, nil
}

// ordered puts the named groups of order first, in its order; the rest keep
// theirs (activity).
func ordered(all []groupInfo, order []string) []groupInfo {
	place := make(map[string]int, len(order))
	for i, id := range order {
		place[id] = i
	}
	rank := func(gi groupInfo) int {
		if i, ok := place[gi.g.ID]; ok && gi.g.Name != "" {
			return i
		}
		return len(order)
	}
	sort.SliceStable(all, func(i, j int) bool { return rank(all[i]) < rank(all[j]) })
	return all
}

// SetGroupOrder is the owner's PUT /groups/order (R23.7): ids, each a
// group of this relay, once; the answer is the list in its new order.
func (gr *groups) SetGroupOrder(ctx context.Context, ids []string) ([]*relay.Group, error) {
	const nothing = "Nothing was changed."
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, Errorf(CodeInvalidInput, "ids names group %q twice. %s", id, nothing)
		}
		seen[id] = true
		if _, err := gr.groupByID(ctx, id, nothing); err != nil {
			return nil, err
		}
	}
	if err := gr.st.SetGroupOrder(ctx, ids); err != nil {
		return nil, err
	}
	gr.relay.notifyGroups(ctx) // the owner's console (R19.6)
	return gr.Groups(ctx)
}

// moveTo puts s into the group ref names for the owner's PATCH /sessions
// (R23.7): "" or "none" takes it out; a group id must exist; a name finds
// its group (R7.10's rules) or, new, makes an owner's group of that name.
// It checks only (the returned func makes the change), so a refused patch
// changes nothing.
func (gr *groups) moveTo(ctx context.Context, s *store.Session, ref string) (func() error, *Error) {
	ref = strings.TrimSpace(ref)
	if ref == "" || strings.EqualFold(ref, "none") {
		return func() error { return gr.leaveGroup(ctx, s) }, nil
	}
	if len(ref) > 200 {
		return nil, Errorf(CodeInvalidInput, "group may have at most 200 characters. %s", nothingChanged)
	}
	g, e := gr.findGroup(ctx, ref, nothingChanged)
	if e == nil {
		return func() error { return gr.joinGroup(ctx, s, g) }, nil
	}
	if strings.HasPrefix(ref, "grp_") || strings.Contains(e.Msg, "more than one") {
		return nil, e
	}
	return func() error {
		g, err := gr.newGroup(ctx, ref, "", true)
		if err != nil {
			return err
		}
		return gr.joinGroup(ctx, s, g)
	}, nil
}

// groupByID loads a group for the owner's routes; nothing says what was not done.
func (gr *groups) groupByID(ctx context.Context, id, nothing string) (*store.Group, error) {
	g, err := gr.st.GetGroup(ctx, strings.TrimSpace(id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "Relay %q has no session group %q. %s", gr.opts.Name, id, nothing)
	}
	return g, err
}

// RenameGroup is the owner's PATCH /groups/{id} (`name`).
func (gr *groups) RenameGroup(ctx context.Context, id, name string) (*relay.Group, error) {
	const nothing = "Nothing was changed."
	g, err := gr.groupByID(ctx, id, nothing)
	if err != nil {
		return nil, err
	}
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return nil, Errorf(CodeInvalidInput, "name is required (1 to 200 characters). %s", nothing)
	}
	if strings.EqualFold(name, "none") {
		return nil, Errorf(CodeInvalidInput, `A group cannot be named "none": update_session uses it to take a session out of its group. %s`, nothing)
	}
	g.Name = name
	if err := gr.st.SaveGroup(ctx, g); err != nil {
		return nil, fmt.Errorf("rename group %s: %w", g.ID, err)
	}
	members, err := gr.st.GroupMembers(ctx, g.ID)
	if err != nil {
		return nil, fmt.Errorf("rename group %s: %w", g.ID, err)
	}
	for _, sid := range members {
		gr.relay.notify(ctx, "session:"+sid) // the owner's console (R19.6)
	}
	gr.relay.notifyGroups(ctx) // an empty group has no member to announce it
	return &relay.Group{ID: g.ID, Name: g.Name, MemberCount: len(members), Head: g.Head, OwnerCreated: g.OwnerCreated}, nil
}

// DissolveGroup is the owner's DELETE /groups/{id}: the group goes, its
// members stay, ungrouped.
func (gr *groups) DissolveGroup(ctx context.Context, id string) (*relay.GroupDissolved, error) {
	g, err := gr.groupByID(ctx, id, "Nothing was dissolved.")
	if err != nil {
		return nil, err
	}
	members, err := gr.st.GroupMembers(ctx, g.ID)
	if err != nil {
		return nil, fmt.Errorf("dissolve group %s: %w", g.ID, err)
	}
	if err := gr.st.DeleteGroup(ctx, g.ID); err != nil {
		return nil, fmt.Errorf("dissolve group %s: %w", g.ID, err)
	}
	for _, sid := range members {
		s, err := gr.st.GetSession(ctx, sid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s.GroupID == g.ID {
			if err := gr.st.SetSessionFields(ctx, sid, map[string]string{"group": ""}); err != nil {
				return nil, fmt.Errorf("take session %s out of dissolved group %s: %w", id8(sid), g.ID, err)
			}
		}
		gr.relay.notify(ctx, "session:"+sid) // the owner's console (R19.6)
	}
	gr.relay.notifyGroups(ctx) // an empty group has no member to announce it
	return &relay.GroupDissolved{ID: g.ID, Dissolved: true, Ungrouped: members}, nil
}

// groupRefOf is session sid's group g as a result shows it, nil for none.
func (gr *groups) groupRefOf(ctx context.Context, g *store.Group, sid string) *groupRef {
	if g == nil {
		return nil
	}
	role := "member"
	if g.Head == sid {
		role = "head"
	}
	return &groupRef{ID: g.ID, Name: gr.groupName(ctx, g), Role: role}
}

func (gr *groups) groupName(ctx context.Context, g *store.Group) string {
	if g.Name != "" {
		return g.Name
	}
	if h, err := gr.st.GetSession(ctx, g.Head); err == nil {
		return h.Title
	}
	return g.ID
}

func (gr *groups) groupRef(ctx context.Context, v *view) *relay.GroupRef {
	if v.group == nil {
		return nil
	}
	role := "member"
	if v.group.Head == v.s.ID {
		role = "head"
	}
	return &relay.GroupRef{ID: v.group.ID, Name: gr.groupName(ctx, v.group), Role: role}
}

func (gr *groups) groupMembers(ctx context.Context, g *store.Group, except string, max int) ([]relay.GroupMember, error) {
	ids, err := gr.st.GroupMembers(ctx, g.ID)
	if err != nil {
		return nil, err
	}
	ss, err := gr.st.GetSessions(ctx, ids)
	if err != nil {
		return nil, err
	}
	sort.Slice(ss, func(i, j int) bool {
		if ss[i] == nil || ss[j] == nil {
			return ss[j] == nil
		}
		return ss[i].CreatedAt.Before(ss[j].CreatedAt)
	})
	var shown []*store.Session
	for _, m := range ss {
		if m == nil || m.ID == except {
			continue
		}
		if len(shown) >= max {
			break
		}
		shown = append(shown, m)
	}
	mids := make([]string, len(shown))
	for i, m := range shown {
		mids[i] = m.ID
	}
	extras, err := gr.st.SessionExtras(ctx, mids)
	if err != nil {
		return nil, err
	}
	out := []relay.GroupMember{}
	for i, m := range shown {
		state := stateOf(extras[i]) // the R7.4 values (R7.5)
		role := "member"
		if m.ID == g.Head {
			role = "head"
		}
		out = append(out, relay.GroupMember{ID: m.ID, Title: m.Title, Role: role, State: state, Archived: m.Archived})
	}
	return out, nil
}
