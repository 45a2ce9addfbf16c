package web

// The sessions list groups sessions as the feature page's sidebar does
// (R19.2): a group's line, its head conversation, then its other members;
// an owner's group with no session is a line of its own (`group · empty`),
// with the same menu (rename, dissolve); sessions in no group stand alone.

import (
	"sort"

	"github.com/oar/relay"
)

// listItem is one line of the sessions list: a group's line or a session.
type listItem struct {
	Group *groupLine
	Row   *sessionRow
}

// groupLine is a group's line in the list.
type groupLine struct {
	ID, Name string
	Members  int // sessions of the group (archived ones too)
	Active   int // of them in the active list
}

// groupedList orders the active sessions (most recent first, as listed) into
// the list's lines: groups take the places where their most recent sessions
// would be, in the owner's order of groups (groups as the domain lists them,
// R23.7), each with its head first; groups with no active session follow the
// sessions.
func groupedList(sessions []*relay.SessionItem, groups []*relay.Group) []listItem {
	return inGroupOrder(byActivity(sessions, groups), groups)
}

// inGroupOrder puts the groups' blocks of out (a group's line and its rows)
// into the places the blocks hold, in the order of groups; a session in no
// group keeps its place.
func inGroupOrder(out []listItem, groups []*relay.Group) []listItem {
	rank := make(map[string]int, len(groups))
	for i, g := range groups {
		rank[g.ID] = i
	}
	var parts [][]listItem // the list in parts: a group's block, or a session alone
	var at []int           // the parts that are groups' blocks
	for _, it := range out {
		if it.Group == nil && it.Row.Role != "" && len(parts) > 0 {
			parts[len(parts)-1] = append(parts[len(parts)-1], it)
			continue
		}
		if it.Group != nil {
			at = append(at, len(parts))
		}
		parts = append(parts, []listItem{it})
	}
	blocks := make([][]listItem, len(at))
	for k, i := range at {
		blocks[k] = parts[i]
	}
	sort.SliceStable(blocks, func(i, j int) bool { return rank[blocks[i][0].Group.ID] < rank[blocks[j][0].Group.ID] })
	for k, i := range at {
		parts[i] = blocks[k]
	}
	res := make([]listItem, 0, len(out))
	for _, p := range parts {
		res = append(res, p...)
	}
	return res
}

// byActivity is the list's lines by activity: a group where its most
// recent session would be.
func byActivity(sessions []*relay.SessionItem, groups []*relay.Group) []listItem {
	info := map[string]*relay.Group{}
	for _, g := range groups {
		info[g.ID] = g
	}
	members := map[string][]*relay.SessionItem{}
	for _, s := range sessions {
		if gid := sessionGroup(s); gid != "" {
			members[gid] = append(members[gid], s)
		}
	}
	var out []listItem
	placed := map[string]bool{}
	for _, s := range sessions {
		gid := sessionGroup(s)
		if gid == "" {
			out = append(out, listItem{Row: &sessionRow{S: s}})
			continue
		}
		if placed[gid] {
			continue
		}
		placed[gid] = true
		out = appendGroupBlock(out, s, info[gid], members[gid])
	}
	for _, g := range groups {
		if placed[g.ID] {
			continue
		}
		out = append(out, listItem{Group: &groupLine{ID: g.ID, Name: g.Name, Members: g.MemberCount}})
	}
	return out
}

// appendGroupBlock appends the block of the group of s, its most recent
// session: the group's line (g: the group as listed, nil if not), then its
// active sessions ms, the head conversation first, the others under it in
// list order.
func appendGroupBlock(out []listItem, s *relay.SessionItem, g *relay.Group, ms []*relay.SessionItem) []listItem {
	line := &groupLine{ID: sessionGroup(s), Active: len(ms), Members: len(ms)}
	if g != nil {
		line.Name = g.Name
		line.Members = g.MemberCount
	}
	if line.Name == "" && s.Group != nil {
		line.Name = s.Group.Name
	}
	out = append(out, listItem{Group: line})
	for _, m := range ms {
		if groupRole(m) == "head" {
			out = append(out, listItem{Row: &sessionRow{S: m, Role: "head"}})
		}
	}
	for _, m := range ms {
		if groupRole(m) != "head" {
			out = append(out, listItem{Row: &sessionRow{S: m, Role: "member"}})
		}
	}
	return out
}

func sessionGroup(s *relay.SessionItem) string {
	if s.Group != nil {
		return s.Group.ID
	}
	return ""
}

func groupRole(s *relay.SessionItem) string {
	if s.Group != nil {
		return s.Group.Role
	}
	return ""
}
