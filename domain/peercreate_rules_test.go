package domain

import (
	"strings"
	"testing"
)

// Sessions started on a paired relay, and paired relays too old for an
// action (R7.9, R7.2, R13.3), with linked fixtures; moved down from
// relaytest/peer_seed_create_test.go.

// TestPeerCreateJoinsNoGroup (R7.9): a session an agent of another relay
// starts here joins no group: the result's group is null, no group is
// founded here, and the calling relay's stand-in conversation is never a
// group's head, a member or a session record. With group it joins the
// named group as a member.
func TestPeerCreateJoinsNoGroup(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	rel, err := b.r.CreateGroup(b.ctx, "Release 2.4")
	if err != nil {
		t.Fatalf("owner group on bravo: %v", err)
	}
	sa := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
	res := a.runAllow(sa,
		onRelay("bravo", "create_session", map[string]any{"text": "first remote child", "wait_seconds": 20}),
		onRelay("bravo", "create_session", map[string]any{"text": "second remote child", "wait_seconds": 20}),
		onRelay("bravo", "create_session", map[string]any{"text": "grouped remote child", "group": "release 2.4", "wait_seconds": 20}))
	for i, r := range res[:2] {
		if linkCode(r) != "ok" {
			t.Fatalf("create_session %d on bravo: %v", i, r)
		}
		if g, ok := r["group"]; !ok || g != nil {
			t.Errorf("create_session %d on bravo without group: group %v (present %v), want null", i, g, ok)
		}
	}
	if linkCode(res[2]) != "ok" {
		t.Fatalf("create_session with group on bravo: %v", res[2])
	}
	if g, _ := res[2]["group"].(map[string]any); g["id"] != rel.ID || g["name"] != "Release 2.4" || g["role"] != "member" {
		t.Errorf("create_session with group on bravo: group %v, want Release 2.4 (%v) as member", res[2]["group"], rel.ID)
	}

	stand := "peer:alpha:" + sa
	gs, err := b.st.Groups(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].ID != rel.ID {
		var desc []string
		for _, g := range gs {
			desc = append(desc, g.ID+" head="+g.Head)
		}
		t.Errorf("bravo's groups: %v, want only the owner's %v", desc, rel.ID)
	}
	for _, g := range gs {
		if strings.HasPrefix(g.Head, "peer:") {
			t.Errorf("group %s is headed by the stand-in %s", g.ID, g.Head)
		}
		ms, err := b.st.GroupMembers(b.ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if strings.HasPrefix(m, "peer:") {
				t.Errorf("group %s has the stand-in %s as a member", g.ID, m)
			}
		}
		if g.ID == rel.ID && len(ms) != 1 {
			t.Errorf("Release 2.4 has %d members, want 1 (the grouped child): %v", len(ms), ms)
		}
	}
	if _, err := b.st.GetSession(b.ctx, stand); err == nil {
		t.Errorf("the stand-in %s was stored as a session on bravo", stand)
	}
	for _, r := range res[:2] {
		id, _ := r["session"].(string)
		if g := b.detail(id)["group"]; g != nil {
			t.Errorf("bravo's session %s is in group %v, want none", id, g)
		}
	}
	// The caller's own relay founds nothing either: the children live elsewhere.
	if g := a.detail(sa)["group"]; g != nil {
		t.Errorf("the caller on alpha is in group %v after starting sessions on bravo", g)
	}
}

// TestPeerOlderRelayRefusals (R13.3, R7.6, R7.8, R7.9, R7.10, R7.2): a
// paired relay whose hello lacks what an action needs is refused with
// REMOTE_RELAY_UNSUPPORTED before anything is sent: read_task_output,
// update_session, send with provider (the billing switch) and create_session
// with group (the seed's sentence); relay_info there has groups null and a
// groupsNote. What it does serve still reaches it.
func TestPeerOlderRelayRefusals(t *testing.T) {
	n := newPeerNet(t)
	a, b := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{})
	b.setHello(func(h *Hello) {
		h.Version, h.Features = "0.9.11", []string{"call", "events", "asks", "inbox", "exclude"}
	})
	if p, err := a.r.Pair(a.ctx, PairRequest{URL: b.url, Token: b.token()}); err != nil || p.Name != "bravo" {
		t.Fatalf("pair the older bravo: %+v %v", p, err)
	}
	rel, err := b.r.CreateGroup(b.ctx, "Release 2.4")
	if err != nil {
		t.Fatalf("owner group on bravo: %v", err)
	}
	sb := b.newSession(NewSession{Title: "target"})
	sa := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
	res := a.runAllow(sa,
		onRelay("bravo", "read_task_output", map[string]any{"session": sb, "task_id": "zzzzzzzzzzzz"}),
		onRelay("bravo", "update_session", map[string]any{"session": sb, "title": "renamed by alpha"}),
		onRelay("bravo", "send", map[string]any{"session": sb, "text": "on other billing", "provider": "scripted", "wait_seconds": 5}),
		onRelay("bravo", "create_session", map[string]any{"text": "grouped child", "group": "Release 2.4", "wait_seconds": 5}),
		onRelay("bravo", "relay_info", nil),
		onRelay("bravo", "create_session", map[string]any{"text": "plain child", "wait_seconds": 20}),
		onRelay("bravo", "send", map[string]any{"session": sb, "text": "plain send", "wait_seconds": 20}))
	for i, action := range []string{"read_task_output", "update_session", "send", "create_session"} {
		r := res[i]
		if linkCode(r) != "REMOTE_RELAY_UNSUPPORTED" {
			t.Errorf("%s on the older bravo: %s (%s), want REMOTE_RELAY_UNSUPPORTED", action, linkCode(r), linkErr(r))
			continue
		}
		if e := linkErr(r); !strings.Contains(e, `"bravo"`) || !strings.Contains(e, "0.9.11") {
			t.Errorf("%s on the older bravo: the error should name the relay and its version: %q", action, e)
		}
	}
	if e := linkErr(res[2]); !strings.Contains(e, "Nothing was sent.") || !strings.Contains(e, "provider") {
		t.Errorf("the billing switch on the older bravo: %q", e)
	}
	if e := linkErr(res[3]); !strings.HasPrefix(e, "The target relay doesn't support groups on create_session yet: ") || !strings.HasSuffix(e, "No session was created.") {
		t.Errorf("create_session with group on the older bravo: %q", e)
	}
	info := res[4]
	if linkCode(info) != "ok" {
		t.Fatalf("relay_info on the older bravo: %v", info)
	}
	if g, ok := info["groups"]; !ok || g != nil {
		t.Errorf("relay_info on the older bravo: groups %v (present %v), want null", g, ok)
	}
	if n, _ := info["groupsNote"].(string); !strings.Contains(n, "create_session") || !strings.Contains(n, "group") || !strings.Contains(n, "0.9.11") {
		t.Errorf("relay_info on the older bravo: groupsNote %q", n)
	}
	if _, ok := info["groupsTotal"]; ok {
		t.Errorf("relay_info on the older bravo: groupsTotal %v with groups null", info["groupsTotal"])
	}
	if linkCode(res[5]) != "ok" || linkCode(res[6]) != "ok" {
		t.Errorf("what the older bravo serves: create_session %v, send %v", res[5], res[6])
	}
	// Nothing of the refused calls reached bravo.
	for action, want := range map[string]int{"read_task_output": 0, "update_session": 0, "relay_info": 1, "create_session": 1, "send": 1} {
		if n := b.count(action); n != want {
			t.Errorf("bravo got %d %s calls, want %d (refused calls are never sent)", n, action, want)
		}
	}
	b.quiet()
	if got := b.detail(sb); got["title"] != "target" || got["provider"] != "scripted" {
		t.Errorf("bravo's session changed: title %v provider %v", got["title"], got["provider"])
	}
	if n := len(b.history(sb, "agent")); n != 1 {
		t.Errorf("bravo's session holds %d agent prompts, want 1 (the plain send)", n)
	}
	if ms, err := b.st.GroupMembers(b.ctx, rel.ID); err != nil || len(ms) != 0 {
		t.Errorf("Release 2.4 on bravo: members %v (%v), want none", ms, err)
	}
}
