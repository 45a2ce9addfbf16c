package relaytest

// The owner routes of SPEC §12 that change sessions and groups as a whole:
// DELETE /sessions/{id}, PATCH and DELETE /groups/{id}.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

// §12 Deleting: DELETE /sessions/{id} stops the turn, removes messages,
// tasks and token, ends schedules (endReason deleted), asks and
// subscriptions that it has or that watch only it.
func TestOwnerDeleteSession(t *testing.T) {
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "keeper"})
	b := r.NewSession(map[string]any{"title": "doomed"})
	c := r.NewSession(map[string]any{"title": "bystander"})

	// a watches b alone, and b and c together; b watches a.
	onlyB := ev2Sub(t, r, a, map[string]any{"sessions": []string{b.ID}}, true)["id"].(string)
	both := ev2Sub(t, r, a, map[string]any{"sessions": []string{b.ID, c.ID}}, false)["id"].(string)
	byB := ev2Sub(t, r, b, map[string]any{"sessions": []string{a.ID}}, true)["id"].(string)
	// Schedules into b and set by b.
	into, _ := r.InTurn(a, map[string]any{"action": "schedule", "session": b.ID, "every_minutes": 60, "text": "ping b"}, "")
	by, _ := r.InTurn(b, map[string]any{"action": "schedule", "session": a.ID, "every_minutes": 60, "text": "ping a"}, "")
	// Asks: b's own, and a's about b.
	askB, _ := r.InTurn(b, map[string]any{"action": "ask", "question": "b asks?"}, "")
	askAboutB, _ := r.InTurn(a, map[string]any{"action": "ask", "session": b.ID, "question": "about b?"}, "")
	for _, env := range []map[string]any{into, by, askB, askAboutB} {
		if env["ok"] != true {
			t.Fatalf("setup call failed: %v", env)
		}
	}
	// A task with output, a running turn and one queued behind it.
	task := r.Message(b.ID, Script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 passed"}, "exit": 0, "background": true}}))
	r.WaitTurn(task, 20*time.Second, "done")
	running := r.Message(b.ID, Script(map[string]any{"sleep_ms": 60000}))
	r.WaitTurn(running, 20*time.Second, "running")
	queued := r.Message(b.ID, "never runs")

	var out map[string]any
	start := time.Now()
	if st := r.Owner("DELETE", "/api/v1/sessions/"+b.ID, nil, &out); st != http.StatusOK || out["deleted"] != true {
		t.Fatalf("DELETE /sessions/%s: status %d %v", b.ID, st, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("delete took %s", d)
	}

	// Gone for the owner and for the agents; its token answers 401.
	if st := r.Owner("GET", "/api/v1/sessions/"+b.ID, nil, nil); st != http.StatusNotFound {
		t.Errorf("GET a deleted session: status %d, want 404", st)
	}
	if st := r.Owner("DELETE", "/api/v1/sessions/"+b.ID, nil, nil); st != http.StatusNotFound {
		t.Errorf("DELETE a deleted session again: status %d, want 404", st)
	}
	Eventually(t, 2*time.Second, func() bool { return rawMCPStatus(t, r.URL, b.Token) == http.StatusUnauthorized },
		"the deleted session's token to be refused")
	ma := r.Connect(a.Token, nil)
	env := ma.MustOK(map[string]any{"action": "list_sessions", "relay": "this", "scope": "all"})
	for _, s := range list(t, env["sessions"], "sessions") {
		if obj(t, s, "session")["id"] == b.ID {
			t.Errorf("list_sessions still lists the deleted session")
		}
	}
	ma.MustFail(map[string]any{"action": "read_session", "relay": "this", "session": b.ID}, codeNotFound)

	// Its turns: the running one stopped, the queued one never ran.
	if _, err := r.App.Store().GetTurn(context.Background(), running); err == nil {
		t.Errorf("the running turn's record is still there")
	}
	if _, err := r.App.Store().GetTurn(context.Background(), queued); err == nil {
		t.Errorf("the queued turn's record is still there")
	}

	// Schedules end with endReason deleted (both kinds, as a sees them).
	env = ma.MustOK(map[string]any{"action": "list_schedules"})
	ended := map[string]any{}
	for _, x := range list(t, env["schedules"], "schedules") {
		s := obj(t, x, "schedule")
		ended[s["id"].(string)] = s["endReason"]
	}
	for _, id := range []string{into["schedule_id"].(string), by["schedule_id"].(string)} {
		if ended[id] != "deleted" {
			t.Errorf("schedule %s: endReason %v, want deleted (%v)", id, ended[id], env["schedules"])
		}
	}
	// Subscriptions: the one watching only b ends; the one watching b and c stays.
	subs := ev2SubList(t, ma)
	if subs[onlyB]["endReason"] != "deleted" {
		t.Errorf("subscription watching only b: %v", subs[onlyB])
	}
	if subs[both]["endReason"] != nil {
		t.Errorf("subscription watching b and c ended: %v", subs[both])
	}
	sub, err := r.App.Store().GetSubscription(context.Background(), byB)
	if err != nil || sub.EndReason != "deleted" {
		t.Errorf("b's own subscription: %v %v", sub, err)
	}
	// Asks end: neither is in the inbox.
	var inbox struct {
		Asks []map[string]any `json:"asks"`
	}
	r.Owner("GET", "/api/v1/inbox", nil, &inbox)
	for _, ak := range inbox.Asks {
		if ak["id"] == askB["question_id"] || ak["id"] == askAboutB["question_id"] {
			t.Errorf("ask %v still open after its session was deleted", ak)
		}
	}

	// Nothing in Redis still names the session (its messages, tasks, token, indexes).
	rdb := r.App.Store().Redis()
	ctx := context.Background()
	var left []string
	iter := rdb.Scan(ctx, 0, store.KeyBase(r.Redis.Prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.Contains(k, b.ID) && !strings.Contains(k, ":lease:") {
			left = append(left, k)
		}
	}
	for _, k := range []string{"sids", "sessions:active", "sessions:archived", "drains"} {
		if n, _ := rdb.ZScore(ctx, store.KeyBase(r.Redis.Prefix)+k, b.ID).Result(); n != 0 {
			left = append(left, k)
		}
		if ok, _ := rdb.SIsMember(ctx, store.KeyBase(r.Redis.Prefix)+k, b.ID).Result(); ok {
			left = append(left, k)
		}
		if _, err := rdb.ZRank(ctx, store.KeyBase(r.Redis.Prefix)+k, b.ID).Result(); err == nil {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("keys or index entries still naming the deleted session: %v", left)
	}
	// The others go on.
	if got := r.WaitTurn(r.Message(c.ID, "still here"), 20*time.Second, "done", "error"); got.Status != "done" {
		t.Errorf("bystander's turn: %s %s", got.Status, got.Error)
	}
	if st := r.Owner("DELETE", "/api/v1/sessions/"+noSuchSession, nil, nil); st != http.StatusNotFound {
		t.Errorf("DELETE an unknown session: status %d", st)
	}
}

// §12 Groups: PATCH /groups/{id} renames, DELETE /groups/{id} dissolves
// (members stay, ungrouped).
func TestOwnerRenameDissolveGroup(t *testing.T) {
	r := Start(t, Options{})
	var g map[string]any
	if st := r.Owner("POST", "/api/v1/groups", map[string]any{"name": "Release 2.4"}, &g); st != http.StatusCreated {
		t.Fatalf("create group: %d %v", st, g)
	}
	gid := g["id"].(string)
	a := r.NewSession(map[string]any{"title": "one", "group": gid})
	b := r.NewSession(map[string]any{"title": "two", "group": gid})

	var out map[string]any
	if st := r.Owner("PATCH", "/api/v1/groups/"+gid, map[string]any{"name": "Release 2.5"}, &out); st != http.StatusOK || out["name"] != "Release 2.5" {
		t.Fatalf("PATCH /groups: %d %v", st, out)
	}
	if grp := obj(t, r.Get(a.ID)["group"], "group"); grp["name"] != "Release 2.5" || grp["id"] != gid {
		t.Errorf("session's group after rename: %v", grp)
	}
	m := r.Connect(a.Token, nil)
	env := m.MustOK(map[string]any{"action": "relay_info", "relay": "this"})
	if gs := list(t, env["groups"], "groups"); len(gs) != 1 || obj(t, gs[0], "group")["name"] != "Release 2.5" {
		t.Errorf("relay_info groups after rename: %v", env["groups"])
	}
	for _, bad := range []map[string]any{{"name": ""}, {"name": "none"}} {
		if st := r.Owner("PATCH", "/api/v1/groups/"+gid, bad, &out); st != http.StatusBadRequest {
			t.Errorf("PATCH /groups %v: status %d %v", bad, st, out)
		} else {
			wantHas(t, "error", out["error"], "Nothing was changed.")
		}
	}
	if st := r.Owner("PATCH", "/api/v1/groups/grp_000000000000", map[string]any{"name": "x"}, nil); st != http.StatusNotFound {
		t.Errorf("PATCH an unknown group: status %d", st)
	}

	if st := r.Owner("DELETE", "/api/v1/groups/"+gid, nil, &out); st != http.StatusOK || out["dissolved"] != true {
		t.Fatalf("DELETE /groups: %d %v", st, out)
	}
	var gl struct {
		Groups []map[string]any `json:"groups"`
	}
	r.Owner("GET", "/api/v1/groups", nil, &gl)
	for _, x := range gl.Groups {
		if x["id"] == gid {
			t.Errorf("dissolved group still listed: %v", x)
		}
	}
	for _, s := range []Session{a, b} {
		got := r.Get(s.ID)
		if got["group"] != nil {
			t.Errorf("session %s still grouped: %v", s.Title, got["group"])
		}
		if got["archived"] == true {
			t.Errorf("session %s archived by dissolving", s.Title)
		}
	}
	env = m.MustOK(map[string]any{"action": "relay_info", "relay": "this"})
	if gs := list(t, env["groups"], "groups"); len(gs) != 0 {
		t.Errorf("relay_info groups after dissolving: %v", env["groups"])
	}
	if st := r.Owner("DELETE", "/api/v1/groups/"+gid, nil, nil); st != http.StatusNotFound {
		t.Errorf("DELETE a dissolved group: status %d", st)
	}
}
