package domain

import (
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

// The owner's changes to sessions and groups as a whole (§12: DELETE
// /sessions/{id}, PATCH and DELETE /groups/{id}) as the domain does them,
// moved down from relaytest/owner_routes_test.go (issue 24 step 3): where
// the api answered a status, the domain's error code is checked (404 is
// REMOTE_RELAY_NOT_FOUND, 400 REMOTE_RELAY_INVALID_INPUT).

// r3Code is an owner method's error code ("" for none).
func r3Code(err error) string {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}

// TestRulesOwnerDeleteSession (§12 Deleting): deleting a session stops the
// turn, removes messages, tasks and token, ends schedules (endReason
// deleted), asks and subscriptions that it has or that watch only it.
func TestRulesOwnerDeleteSession(t *testing.T) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "keeper"})
	bd, err := f.r.OwnerCreateSession(f.ctx, NewSession{Title: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	b := bd.ID
	c := f.session(NewSession{Title: "bystander"})
	sub := func(w string, sessions []string, card bool) string {
		decision := ""
		if card {
			decision = "allow"
		}
		env, _ := f.actInTurn(w, map[string]any{"action": "subscribe", "sessions": sessions}, decision)
		if env["ok"] != true {
			t.Fatalf("subscribe %v: %v", sessions, env)
		}
		return env["subscription"].(map[string]any)["id"].(string)
	}

	// a watches b alone, and b and c together; b watches a.
	onlyB := sub(a, []string{b}, true)
	both := sub(a, []string{b, c}, false)
	byB := sub(b, []string{a}, true)
	// Schedules into b and set by b.
	into, _ := f.actInTurn(a, map[string]any{"action": "schedule", "session": b, "every_minutes": 60, "text": "ping b"}, "")
	by, _ := f.actInTurn(b, map[string]any{"action": "schedule", "session": a, "every_minutes": 60, "text": "ping a"}, "")
	// Asks: b's own, and a's about b.
	askB, _ := f.actInTurn(b, map[string]any{"action": "ask", "question": "b asks?"}, "")
	askAboutB, _ := f.actInTurn(a, map[string]any{"action": "ask", "session": b, "question": "about b?"}, "")
	for _, env := range []map[string]any{into, by, askB, askAboutB} {
		if env["ok"] != true {
			t.Fatalf("setup call failed: %v", env)
		}
	}
	// A task with output, a running turn and one queued behind it.
	task := f.prompt(b, script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 passed"}, "exit": 0, "background": true}}))
	if tr := f.actTurn(task); tr.Status != store.TurnDone {
		t.Fatalf("task turn: %s %s", tr.Status, tr.Error)
	}
	running := f.prompt(b, script(map[string]any{"sleep_ms": 60000}))
	f.actTurn(running, store.TurnRunning)
	queued := f.prompt(b, "never runs")

	// The relay knows (and caches) b's token.
	if sid, ok, err := f.r.SessionForToken(f.ctx, bd.Token); err != nil || !ok || sid != b {
		t.Fatalf("b's token before the delete: %q %v %v", sid, ok, err)
	}
	start := time.Now()
	if out, err := f.r.OwnerDeleteSession(f.ctx, b); err != nil || !out.Deleted {
		t.Fatalf("delete %s: %+v %v", b, out, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("delete took %s", d)
	}

	// Gone for the owner and for the agents; its token names no session.
	if _, err := f.r.OwnerSession(f.ctx, b, 0); r3Code(err) != CodeNotFound {
		t.Errorf("a deleted session: %v, want %s", err, CodeNotFound)
	}
	if _, err := f.r.OwnerDeleteSession(f.ctx, b); r3Code(err) != CodeNotFound {
		t.Errorf("delete a deleted session again: %v, want %s", err, CodeNotFound)
	}
	f.actUntil("the deleted session's token to be refused", func() bool {
		_, ok, err := f.r.SessionForToken(f.ctx, bd.Token)
		return err == nil && !ok
	})
	env := f.ok(a, map[string]any{"action": "list_sessions", "relay": "this", "scope": "all"})
	for _, s := range r3List(t, env["sessions"], "sessions") {
		if s.(map[string]any)["id"] == b {
			t.Errorf("list_sessions still lists the deleted session")
		}
	}
	f.actFail(a, map[string]any{"action": "read_session", "relay": "this", "session": b}, "REMOTE_RELAY_NOT_FOUND")

	// Its turns: the running one stopped, the queued one never ran.
	if _, err := f.st.GetTurn(f.ctx, running); err == nil {
		t.Errorf("the running turn's record is still there")
	}
	if _, err := f.st.GetTurn(f.ctx, queued); err == nil {
		t.Errorf("the queued turn's record is still there")
	}

	// Schedules end with endReason deleted (both kinds, as a sees them).
	env = f.ok(a, map[string]any{"action": "list_schedules"})
	ended := map[string]any{}
	for _, x := range r3List(t, env["schedules"], "schedules") {
		s := x.(map[string]any)
		ended[s["id"].(string)] = s["endReason"]
	}
	for _, id := range []string{into["schedule_id"].(string), by["schedule_id"].(string)} {
		if ended[id] != "deleted" {
			t.Errorf("schedule %s: endReason %v, want deleted (%v)", id, ended[id], env["schedules"])
		}
	}
	// Subscriptions: the one watching only b ends; the one watching b and c stays.
	subs := map[string]map[string]any{}
	for _, x := range r3List(t, f.ok(a, map[string]any{"action": "list_subscriptions"})["subscriptions"], "subscriptions") {
		s := x.(map[string]any)
		subs[s["id"].(string)] = s
	}
	if subs[onlyB]["endReason"] != "deleted" {
		t.Errorf("subscription watching only b: %v", subs[onlyB])
	}
	if subs[both]["endReason"] != nil {
		t.Errorf("subscription watching b and c ended: %v", subs[both])
	}
	bs, err := f.st.GetSubscription(f.ctx, byB)
	if err != nil || bs.EndReason != "deleted" {
		t.Errorf("b's own subscription: %v %v", bs, err)
	}
	// Asks end: neither is in the inbox.
	asks, err := f.r.Inbox(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ak := range asks {
		if ak.ID == askB["question_id"] || ak.ID == askAboutB["question_id"] {
			t.Errorf("ask %v still open after its session was deleted", ak)
		}
	}

	// Nothing in Redis still names the session (its messages, tasks, token, indexes).
	rdb, base := f.st.Redis(), store.KeyBase(f.st.Prefix())
	var left []string
	iter := rdb.Scan(f.ctx, 0, base+"*", 1000).Iterator()
	for iter.Next(f.ctx) {
		k := iter.Val()
		if strings.Contains(k, b) && !strings.Contains(k, ":lease:") {
			left = append(left, k)
		}
	}
	for _, k := range []string{"sids", "sessions:active", "sessions:archived", "drains"} {
		if n, _ := rdb.ZScore(f.ctx, base+k, b).Result(); n != 0 {
			left = append(left, k)
		}
		if ok, _ := rdb.SIsMember(f.ctx, base+k, b).Result(); ok {
			left = append(left, k)
		}
		if _, err := rdb.ZRank(f.ctx, base+k, b).Result(); err == nil {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("keys or index entries still naming the deleted session: %v", left)
	}
	// The others go on.
	if got := f.actTurn(f.prompt(c, "still here")); got.Status != store.TurnDone {
		t.Errorf("bystander's turn: %s %s", got.Status, got.Error)
	}
	if _, err := f.r.OwnerDeleteSession(f.ctx, "0000000000000000ffffffffffffffff"); r3Code(err) != CodeNotFound {
		t.Errorf("delete an unknown session: %v", err)
	}
}

// TestRulesOwnerRenameDissolveGroup (§12 Groups): the owner renames a
// group (PATCH /groups/{id}) and dissolves it (DELETE /groups/{id}: members
// stay, ungrouped).
func TestRulesOwnerRenameDissolveGroup(t *testing.T) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	gid := f.actNewGroup("Release 2.4")
	a := f.session(NewSession{Title: "one", Group: gid})
	b := f.session(NewSession{Title: "two", Group: gid})

	if out, err := f.r.RenameGroup(f.ctx, gid, "Release 2.5"); err != nil || out.Name != "Release 2.5" {
		t.Fatalf("rename group: %+v %v", out, err)
	}
	if d, err := f.r.OwnerSession(f.ctx, a, 0); err != nil || d.Group == nil || d.Group.Name != "Release 2.5" || d.Group.ID != gid {
		t.Errorf("session's group after rename: %+v %v", d, err)
	}
	env := f.ok(a, map[string]any{"action": "relay_info", "relay": "this"})
	if gs := r3List(t, env["groups"], "groups"); len(gs) != 1 || gs[0].(map[string]any)["name"] != "Release 2.5" {
		t.Errorf("relay_info groups after rename: %v", env["groups"])
	}
	for _, bad := range []string{"", "none"} {
		if _, err := f.r.RenameGroup(f.ctx, gid, bad); r3Code(err) != CodeInvalidInput {
			t.Errorf("rename group to %q: %v, want %s", bad, err, CodeInvalidInput)
		} else {
			actHas(t, "error", AsError(err).Msg, "Nothing was changed.")
		}
	}
	if _, err := f.r.RenameGroup(f.ctx, "grp_000000000000", "x"); r3Code(err) != CodeNotFound {
		t.Errorf("rename an unknown group: %v", err)
	}

	if out, err := f.r.DissolveGroup(f.ctx, gid); err != nil || !out.Dissolved {
		t.Fatalf("dissolve group: %+v %v", out, err)
	}
	if g := f.actGroup(gid); g != nil {
		t.Errorf("dissolved group still listed: %+v", g)
	}
	for _, s := range []string{a, b} {
		d, err := f.r.OwnerSession(f.ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Group != nil {
			t.Errorf("session %s still grouped: %+v", d.Title, d.Group)
		}
		if d.Archived {
			t.Errorf("session %s archived by dissolving", d.Title)
		}
	}
	env = f.ok(a, map[string]any{"action": "relay_info", "relay": "this"})
	if gs := r3List(t, env["groups"], "groups"); len(gs) != 0 {
		t.Errorf("relay_info groups after dissolving: %v", env["groups"])
	}
	if _, err := f.r.DissolveGroup(f.ctx, gid); r3Code(err) != CodeNotFound {
		t.Errorf("dissolve a dissolved group: %v", err)
	}
}
