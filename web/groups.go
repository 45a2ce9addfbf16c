package web

// The sessions list groups sessions as the feature page's sidebar does
// (R19.2): a group's line, its head conversation, then its other members;
// an owner's group with no session is a line of its own (`group · empty`),
// with the same menu (rename, dissolve); sessions in no group stand alone.

import "github.com/oar/relay"

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
// the list's lines: a group comes where its most recent session would, with
// its head first; groups with no active session follow the sessions.
func groupedList(sessions []*relay.SessionItem, groups []*relay.Group) []listItem {
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
		ms := members[gid]
		line := &groupLine{ID: gid, Active: len(ms), Members: len(ms)}
		if g := info[gid]; g != nil {
			line.Name = g.Name
			line.Members = g.MemberCount
		}
		if line.Name == "" && s.Group != nil {
			line.Name = s.Group.Name
		}
		out = append(out, listItem{Group: line})
		// The head conversation first, the others under it in list order.
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
	}
	for _, g := range groups {
		if placed[g.ID] {
			continue
		}
		out = append(out, listItem{Group: &groupLine{ID: g.ID, Name: g.Name, Members: g.MemberCount}})
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
