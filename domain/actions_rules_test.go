package domain

// The relay_tool actions on this relay, moved down from relaytest: each
// action's success path and the error codes it can give here, against the
// domain fixture (no HTTP, no MCP, no worker process).

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/store"
)

// R7.2, R7.3: relay_info and usage.
func TestRulesActRelayInfoAndUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	made, err := f.r.OwnerCreateSession(f.ctx, NewSession{Title: "caller"})
	if err != nil {
		t.Fatal(err)
	}
	a := made.ID
	info := map[string]any{"action": "relay_info", "relay": "this"}

	env := f.actOK(a, info)
	if v, _ := env["version"].(string); v == "" {
		t.Errorf("version %v", env["version"])
	}
	want := map[string]any{"ok": true, "summary": "relay_info → desk: 1 provider, modes agent, ask, plan, 0 groups",
		"relay": "desk", "name": "desk", "platform": runtime.GOOS + "/" + runtime.GOARCH, "acceptsAgentPrompts": true,
		"providers": []any{map[string]any{"id": "scripted", "name": "Scripted", "defaultModel": "scripted-1",
			"models": []any{"scripted-1"}, "efforts": []any{"low", "medium", "high"}, "available": true}},
		"defaultCwd": f.r.opts.DefaultCwd, "modes": []any{"agent", "ask", "plan"}, "groups": []any{}}
	sub := map[string]any{}
	for k := range want {
		sub[k] = env[k]
	}
	if diff := cmp.Diff(want, sub); diff != "" {
		t.Errorf("relay_info (-want +got):\n%s", diff)
	}
	if _, ok := env["recentCwds"].([]any); !ok {
		t.Errorf("recentCwds %v, want a list", env["recentCwds"])
	}
	actNoKey(t, "relay_info", env, "groupsNote", "groupsTotal")

	// An empty owner group is not listed; one with a session is, with its count.
	g, err := f.r.CreateGroup(f.ctx, "Release 2.4")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{}, f.actOK(a, info)["groups"]); diff != "" {
		t.Errorf("groups with an empty group (-want +got):\n%s", diff)
	}
	f.session(NewSession{Title: "member", Group: "Release 2.4"})
	env = f.actOK(a, info)
	if diff := cmp.Diff([]any{map[string]any{"id": g.ID, "name": "Release 2.4", "memberCount": float64(1)}}, env["groups"]); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("relay_info → desk: 1 provider, modes agent, ask, plan, 1 group", env["summary"]); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}

	// usage: one tracked-by-us provider, no secrets.
	f.prompt(a, "count me")
	f.run()
	env = f.actOK(a, map[string]any{"action": "usage", "relay": "this"})
	if diff := cmp.Diff("usage → desk: 1 provider, quotas not tracked", env["summary"]); diff != "" {
		t.Errorf("usage summary (-want +got):\n%s", diff)
	}
	provs, _ := env["providers"].([]any)
	if len(provs) != 1 {
		t.Fatalf("providers %v", env["providers"])
	}
	p, _ := provs[0].(map[string]any)
	if diff := cmp.Diff(map[string]any{"id": "scripted", "status": "ok"}, map[string]any{"id": p["id"], "status": p["status"]}); diff != "" {
		t.Errorf("usage provider (-want +got):\n%s", diff)
	}
	actHas(t, "note", p["note"], "not tracked")
	raw, _ := json.Marshal(env)
	if made.Token == "" || strings.Contains(string(raw), made.Token) {
		t.Errorf("usage shows the caller's token (%q): %s", made.Token, raw)
	}
}

// R7.2: groups that cannot be read give groups null and a groupsNote.
func TestRulesActRelayInfoGroupsUnreadable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	key := store.KeyBase(f.st.Prefix()) + "groups"
	rdb := f.st.Redis()
	if err := rdb.Del(f.ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(f.ctx, key, "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	info := map[string]any{"action": "relay_info", "relay": "this"}
	env := f.actOK(a, info)
	if v, ok := env["groups"]; !ok || v != nil {
		t.Errorf("groups = %v (present %v), want null", v, ok)
	}
	actHas(t, "groupsNote", env["groupsNote"], "create_session", "group")
	if err := rdb.Del(f.ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{}, f.actOK(a, info)["groups"]); diff != "" {
		t.Errorf("groups once readable (-want +got):\n%s", diff)
	}
}

// R7.2, R7.9: relay_info lists at most 50 groups (most recent activity first,
// groupsTotal when more); an UNKNOWN_GROUP error lists at most 20.
func TestRulesActGroupLists(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	var members []string
	for i := 0; i < 51; i++ {
		g, err := f.r.CreateGroup(f.ctx, fmt.Sprintf("g%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, f.session(NewSession{Title: fmt.Sprintf("s%02d", i), Group: g.ID}))
	}
	f.clk.Advance(time.Second) // the prompt's activity comes after every session's creation
	f.prompt(members[10], "recent")
	f.run()
	env := f.actOK(a, map[string]any{"action": "relay_info", "relay": "this"})
	groups, _ := env["groups"].([]any)
	first, _ := groups[0].(map[string]any)
	type listed struct {
		N       int
		Total   any
		First   any
		Summary any
	}
	if diff := cmp.Diff(listed{50, float64(51), "g10", "relay_info → desk: 1 provider, modes agent, ask, plan, 51 groups"},
		listed{len(groups), env["groupsTotal"], first["name"], env["summary"]}); diff != "" {
		t.Errorf("relay_info groups (-want +got):\n%s", diff)
	}
	env = f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "x", "group": "g99"}, CodeUnknownGroup)
	eg, _ := env["groups"].([]any)
	msg, _ := env["error"].(string)
	if diff := cmp.Diff(listed{N: 20, Total: float64(51), First: 20}, listed{N: len(eg), Total: env["groupsTotal"], First: strings.Count(msg, "(grp_")}); diff != "" {
		t.Errorf("UNKNOWN_GROUP lists (-want +got):\n%s\nerror %q", diff, msg)
	}
	actHas(t, "error", msg, `Relay "desk" has no session group "g99". Groups there: g10 (grp_`, "No session was created.")
	// Issue 13: the cut list ends ", …" and goes on with what was not done (the seed: "…), … No session was created.").
	actHas(t, "error end", msg, "), … No session was created.")
	if strings.Contains(msg, "…. ") {
		t.Errorf("the cut group list ends in \"…. \": %q", msg)
	}
}

// ---- approval cards (R5.1, R5.2): asked from inside a running turn, decided by the test as the owner ----

// actWant checks an envelope's outcome: ok, or the code with the error's fragments.
func actWant(t testing.TB, what string, env map[string]any, code string, has ...string) {
	t.Helper()
	msg, _ := env["error"].(string)
	got := outcome{OK: env["ok"] == true, Code: fmt.Sprint(env["code"]), Has: true}
	if code == "" {
		got.Code = ""
		if env["code"] != nil {
			got.Code = fmt.Sprint(env["code"])
		}
	}
	for _, h := range has {
		got.Has = got.Has && strings.Contains(msg, h)
	}
	if diff := cmp.Diff(outcome{OK: code == "", Code: code, Has: true}, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s\nenvelope %v", what, diff, env)
	}
}

// R5.1, R5.2.1: the owner allows the first create_session; the session is created and runs.
func TestRulesActCardAllowCreatesSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "orchestrator"})
	tid := f.prompt(a, script(actTool(map[string]any{"action": "create_session", "relay": "this",
		"text": "hello child", "title": "child", "wait_seconds": 10})))

	card := f.actCard(a)
	if !strings.HasPrefix(card.ID, "card_") || card.Session != a || card.Action != "create_session" ||
		card.Relay != "desk" || card.Target != nil || card.CreatedAt.IsZero() {
		t.Fatalf("card %+v", card)
	}
	if lines := strings.Join(card.Lines, "\n"); !strings.Contains(lines, `"child"`) || !strings.Contains(lines, "hello child") ||
		!strings.Contains(lines, "Model: scripted-1") {
		t.Fatalf("card lines do not say what will happen:\n%s", lines)
	}
	if n := len(f.actChildren(a)); n != 0 {
		t.Fatalf("%d sessions created before the owner decided", n)
	}
	if _, err := f.r.DecideCard(f.ctx, card.ID, "allow"); err != nil {
		t.Fatal(err)
	}

	res := f.actResults(tid, 1)[0]
	actWant(t, "create_session", res, "")
	if reply, _ := res["reply"].(map[string]any); res["status"] != "done" || reply["text"] != "echo: hello child" || res["title"] != "child" {
		t.Fatalf("create_session result %v", res)
	}
	kids := f.actChildren(a)
	if len(kids) != 1 || kids[0] != res["session"] {
		t.Fatalf("children %v, result session %v", kids, res["session"])
	}
	if left := f.actCards(a); len(left) != 0 {
		t.Fatalf("card still pending after allow: %+v", left)
	}
}

// R5.1: Deny → REMOTE_RELAY_PERMISSION, nothing created; a denial does not count as the first approval.
func TestRulesActCardDenyCreatesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "orchestrator"})
	tid := f.prompt(a, script(actTool(map[string]any{"action": "create_session", "relay": "this", "text": "hello"})))
	f.actDecide(a, "create_session", "", "deny")
	actWant(t, "denied create_session", f.actResults(tid, 1)[0], CodePermission, "No session was created.")
	if n := f.actTotal("all"); n != 1 {
		t.Fatalf("%d sessions after a denied create_session, want 1", n)
	}
	// Still the first session: the next create_session asks again (outside a turn: NO_ACTIVE_TURN).
	f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "again"}, CodeNoActiveTurn)
}

// R5.1, R5.2.1: a denied first create_session creates nothing (the card's
// action named; asked again next time).
func TestRulesActCreateSessionDenied(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "lead"})
	res, card := f.actInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "nope", "wait_seconds": 0}, "deny")
	if card.Action != "create_session" {
		t.Errorf("card.action %q", card.Action)
	}
	actWant(t, "denied create_session", res, CodePermission, "No session was created.")
	if n := f.actTotal("all"); n != 1 {
		t.Errorf("sessions: %d, want 1", n)
	}
	// The card is asked again next time (still no session was allowed).
	f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "again"}, CodeNoActiveTurn)
}

// R5.1: a card outside a running turn of the calling conversation → REMOTE_RELAY_NO_ACTIVE_TURN.
func TestRulesActCardOutsideTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "orchestrator"})
	env := f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "hello"}, CodeNoActiveTurn)
	actHas(t, "error", env["error"], "No session was created.")
	cards, err := f.st.PendingCards(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 0 || f.actTotal("all") != 1 {
		t.Fatalf("cards %+v / sessions %d after NO_ACTIVE_TURN", cards, f.actTotal("all"))
	}
}

// R5.2.3: plan mode asks too; Deny → nothing sent.
func TestRulesActPlanModeDenySendsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "planner", Mode: "plan"})
	b := f.session(NewSession{Title: "target"})
	tid := f.prompt(a, script(actTool(map[string]any{"action": "send", "relay": "this", "session": b, "text": "do it"})))
	c := f.actDecide(a, "send", b, "deny")
	if l := strings.Join(c.Lines, "\n"); !strings.Contains(l, "plan mode") || !strings.Contains(l, "do it") {
		t.Fatalf("card lines:\n%s", l)
	}
	actWant(t, "denied send", f.actResults(tid, 1)[0], CodePermission, "Nothing was sent.")
	if n := f.messages(b); n != 0 {
		t.Fatalf("target has %d messages after a denied send", n)
	}
}

// R5.2.4: update_session on a session the conversation did not start asks once per
// conversation and relay; Allow covers later such changes there; Deny covers nothing.
func TestRulesActUpdateOthersSessionAsksOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "editor"})
	b := f.session(NewSession{Title: "b"})
	c := f.session(NewSession{Title: "c"})
	d := f.session(NewSession{Title: "other editor"})
	upd := func(sid, title string) map[string]any {
		return map[string]any{"action": "update_session", "relay": "this", "session": sid, "title": title}
	}
	f.actFail(a, upd(b, "x"), CodeNoActiveTurn)

	tid := f.prompt(a, script(actTool(upd(b, "t1"))))
	card := f.actDecide(a, "update_session", b, "deny")
	if l := strings.Join(card.Lines, "\n"); !strings.Contains(l, "Title: t1") {
		t.Fatalf("card does not list the change:\n%s", l)
	}
	actWant(t, "denied update", f.actResults(tid, 1)[0], CodePermission, "Nothing was changed.")
	if got := f.actStored(b).Title; got != "b" {
		t.Fatalf("title %q after a denied update", got)
	}
	f.actFail(a, upd(b, "x"), CodeNoActiveTurn) // a denial covers nothing

	tid = f.prompt(a, script(actTool(upd(b, "t2"))))
	f.actDecide(a, "update_session", b, "allow")
	res := f.actResults(tid, 1)[0]
	actWant(t, "allowed update", res, "")
	if diff := cmp.Diff([]any{"title"}, res["changed"]); diff != "" || f.actStored(b).Title != "t2" {
		t.Fatalf("update result %v, title %q", res, f.actStored(b).Title)
	}
	// Covered now: this conversation, this relay, any session — no card.
	f.actOK(a, upd(b, "t3"))
	f.actOK(a, map[string]any{"action": "update_session", "relay": "this", "session": c, "effort": "high"})
	if f.actStored(b).Title != "t3" || f.actStored(c).Effort != "high" {
		t.Fatalf("covered updates not applied: %q %q", f.actStored(b).Title, f.actStored(c).Effort)
	}
	// Once per conversation: another conversation still asks.
	f.actFail(d, upd(b, "t4"), CodeNoActiveTurn)
}
