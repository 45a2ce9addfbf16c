package web

import (
	"strings"
	"testing"

	"github.com/oar/relay"
)

// TestGroupedListOrderR23_7: the groups' blocks (a group's line, its head,
// its members) take the places where their most recent sessions stand, in
// the owner's order of groups; sessions in no group keep their places; an
// owner's group with no active session follows, `group · empty`.
func TestGroupedListOrderR23_7(t *testing.T) {
	in := func(s, gid, role string) *relay.SessionItem {
		return &relay.SessionItem{ID: s, Group: &relay.GroupRef{ID: gid, Name: gid, Role: role}}
	}
	alone := func(s string) *relay.SessionItem { return &relay.SessionItem{ID: s} }
	// Most recent first: b1 (group B's member), x, a1 (A's head), b2 (B's head), y, a2 (A's member).
	sessions := []*relay.SessionItem{in("b1", "B", "member"), alone("x"), in("a1", "A", "head"), in("b2", "B", "head"), alone("y"), in("a2", "A", "member")}
	groups := []*relay.Group{{ID: "A", Name: "A", MemberCount: 2}, {ID: "B", Name: "B", MemberCount: 2}, {ID: "E", Name: "E"}}
	var got []string
	for _, it := range groupedList(sessions, groups) {
		if it.Group != nil {
			got = append(got, "["+it.Group.ID+"]")
		} else {
			got = append(got, it.Row.S.ID+":"+it.Row.Role)
		}
	}
	// A comes first (the owner's order) in B's place, B in A's; x and y stay.
	if want := "[A] a1:head a2:member x: [B] b2:head b1:member y: [E]"; strings.Join(got, " ") != want {
		t.Errorf("the list %q, want %q", strings.Join(got, " "), want)
	}
}
