package domain

// The relay_tool actions on this relay, moved down from relaytest: each
// action's success path and the error codes it can give here, against the
// domain fixture (no HTTP, no MCP, no worker process).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// actNoSuchSession is a well-formed session id no fixture relay has.
const actNoSuchSession = "0000000000000000ffffffffffffffff"

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

	env := f.ok(a, info)
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
	if diff := cmp.Diff([]any{}, f.ok(a, info)["groups"]); diff != "" {
		t.Errorf("groups with an empty group (-want +got):\n%s", diff)
	}
	f.session(NewSession{Title: "member", Group: "Release 2.4"})
	env = f.ok(a, info)
	if diff := cmp.Diff([]any{map[string]any{"id": g.ID, "name": "Release 2.4", "memberCount": float64(1)}}, env["groups"]); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("relay_info → desk: 1 provider, modes agent, ask, plan, 1 group", env["summary"]); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}

	// usage: one tracked-by-us provider, no secrets.
	f.prompt(a, "count me")
	f.run()
	env = f.ok(a, map[string]any{"action": "usage", "relay": "this"})
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
	env := f.ok(a, info)
	if v, ok := env["groups"]; !ok || v != nil {
		t.Errorf("groups = %v (present %v), want null", v, ok)
	}
	actHas(t, "groupsNote", env["groupsNote"], "create_session", "group")
	if err := rdb.Del(f.ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{}, f.ok(a, info)["groups"]); diff != "" {
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
	env := f.ok(a, map[string]any{"action": "relay_info", "relay": "this"})
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
	f.ok(a, upd(b, "t3"))
	f.ok(a, map[string]any{"action": "update_session", "relay": "this", "session": c, "effort": "high"})
	if f.actStored(b).Title != "t3" || f.actStored(c).Effort != "high" {
		t.Fatalf("covered updates not applied: %q %q", f.actStored(b).Title, f.actStored(c).Effort)
	}
	// Once per conversation: another conversation still asks.
	f.actFail(d, upd(b, "t4"), CodeNoActiveTurn)
}

// R5.2.6: loop protection with a limit of 3: the 4th prompt asks; the owner writing resets
// the count; allowing the card resets it too.
func TestRulesActLoopProtection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) { l.AgentPromptsBeforeCard = 3 }})
	actAuto(f)
	a := f.session(NewSession{Title: "chatty"})
	b := f.session(NewSession{Title: "listener"})
	send := func(text string) map[string]any {
		return map[string]any{"action": "send", "relay": "this", "session": b, "text": text, "wait_seconds": 0}
	}
	for i := 1; i <= 3; i++ {
		f.ok(a, send(fmt.Sprintf("o%d", i)))
	}
	f.actFail(a, send("o4"), CodeNoActiveTurn) // the 4th needs a card

	// The owner writes in the conversation: the count starts again.
	f.actTurn(f.prompt(a, "carry on"))
	for i := 1; i <= 3; i++ {
		f.ok(a, send(fmt.Sprintf("r%d", i)))
	}
	f.actFail(a, send("r4"), CodeNoActiveTurn)

	// In a turn (its script is the owner writing, so the count is 0 again): p4 asks; allowing
	// it resets the count, so the next card comes at p7 (p5 would ask without the reset).
	steps := []map[string]any{}
	for i := 1; i <= 7; i++ {
		steps = append(steps, actTool(send(fmt.Sprintf("p%d", i))))
	}
	tid := f.prompt(a, script(steps...))
	c := f.actDecide(a, "send", b, "allow")
	if l := strings.Join(c.Lines, "\n"); !strings.Contains(l, ": p4") || !strings.Contains(l, "Loop protection") {
		t.Fatalf("first loop card:\n%s", l)
	}
	c = f.actDecide(a, "send", b, "deny")
	if l := strings.Join(c.Lines, "\n"); !strings.Contains(l, ": p7") {
		t.Fatalf("second loop card is not for p7 (allowing must reset the count):\n%s", l)
	}
	res := f.actResults(tid, 7)
	for i := 0; i < 6; i++ {
		actWant(t, fmt.Sprintf("p%d", i+1), res[i], "")
	}
	actWant(t, "p7", res[6], CodePermission, "Nothing was sent.")

	want := []string{"o1", "o2", "o3", "r1", "r2", "r3", "p1", "p2", "p3", "p4", "p5", "p6"}
	for i, w := range want {
		want[i] = agentLine("chatty", "scripted-1") + "\n" + w // R18.15
	}
	var got []string
	for _, m := range f.history(b, "agent") {
		got = append(got, m.Text)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("prompts that reached the listener (-want +got):\n%s", diff)
	}
}

// R7.15: stop.
func TestRulesActStop(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "sleeper"})
	mid := f.prompt(b, script(map[string]any{"reply": "so far"}, map[string]any{"sleep_ms": 600000}, map[string]any{"reply": " never"}))
	next := f.prompt(b, "after")
	f.actTurn(mid, store.TurnRunning)

	stop := map[string]any{"action": "stop", "relay": "this", "session": b}
	env := f.ok(a, stop)
	if diff := cmp.Diff([]any{true, "stop → desk session " + b[:8] + ": stop requested"}, []any{env["stopRequested"], env["summary"]}); diff != "" {
		t.Errorf("stop (-want +got):\n%s", diff)
	}
	actNoKey(t, "stop", env, "note")
	if tr := f.actTurn(mid); tr.Status != store.TurnStopped {
		t.Errorf("turn status %s, want stopped", tr.Status)
	}
	// The prompt queued behind it runs next.
	if tr := f.actTurn(next); tr.Reply != "echo: after" {
		t.Errorf("next reply %q (%s)", tr.Reply, tr.Status)
	}

	env = f.ok(a, stop)
	if diff := cmp.Diff([]any{false, "nothing was running", "stop → desk session " + b[:8] + ": nothing was running"},
		[]any{env["stopRequested"], env["note"], env["summary"]}); diff != "" {
		t.Errorf("stop with nothing running (-want +got):\n%s", diff)
	}
	env = f.actFail(a, actWith(stop, map[string]any{"session": a}), CodeSelf)
	actHas(t, "error", env["error"], "Nothing was done.")
	f.actFail(a, actWith(stop, map[string]any{"session": actNoSuchSession}), CodeNotFound)
	f.actFail(a, map[string]any{"action": "stop", "relay": "this"}, CodeInvalidInput)
}

// R7.16: archive.
func TestRulesActArchive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "done with"})
	c := f.session(NewSession{Title: "running"})
	archive := map[string]any{"action": "archive", "relay": "this", "session": b}

	env := f.ok(a, archive)
	if diff := cmp.Diff([]any{true, "archive → desk session " + b[:8] + ": archived"}, []any{env["archived"], env["summary"]}); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}
	env = f.ok(a, map[string]any{"action": "list_sessions", "relay": "this", "scope": "archived"})
	items, _ := env["sessions"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["id"] != b {
		t.Fatalf("archived list %v", items)
	}
	env = f.ok(a, map[string]any{"action": "list_sessions", "relay": "this"})
	for _, it := range env["sessions"].([]any) {
		if it.(map[string]any)["id"] == b {
			t.Errorf("an archived session is listed as active")
		}
	}
	// An archived session takes no prompts; it can still be read.
	before := f.messages(b)
	env = f.actFail(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "hello?", "wait_seconds": 0}, CodeInvalidInput)
	actHas(t, "error", env["error"], "archived", "Nothing was sent.")
	if n := f.messages(b); n != before {
		t.Errorf("messages %d, want %d", n, before)
	}
	f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": b, "last": 5})
	if env = f.ok(a, archive); env["archived"] != true {
		t.Errorf("archived again: %v", env["archived"])
	}

	// Archiving a running session stops its turn.
	mid := f.prompt(c, script(map[string]any{"sleep_ms": 600000}))
	f.actTurn(mid, store.TurnRunning)
	f.ok(a, actWith(archive, map[string]any{"session": c}))
	if tr := f.actTurn(mid); tr.Status != store.TurnStopped {
		t.Errorf("turn of the archived session %s, want stopped", tr.Status)
	}

	env = f.actFail(a, actWith(archive, map[string]any{"session": a}), CodeSelf)
	actHas(t, "error", env["error"], "Nothing was done.")
	f.actFail(a, actWith(archive, map[string]any{"session": actNoSuchSession}), CodeNotFound)
	f.actFail(a, map[string]any{"action": "archive", "relay": "this"}, CodeInvalidInput)
	if n := f.actTotal("active"); n != 1 {
		t.Errorf("active sessions %d, want 1", n)
	}
}

// R7.14: answer_question.
func TestRulesActAnswerQuestion(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "asker"})
	c := f.session(NewSession{Title: "other"})
	mid := f.prompt(b, script(map[string]any{"question": map[string]any{"text": "Which DB?", "options": []string{"pg", "mysql"}}},
		map[string]any{"reply": " chosen"}))
	qid := f.actQuestion(b).ID
	ans := func(extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "answer_question", "relay": "this", "session": b, "question_id": qid, "choices": []string{"pg"}}, extra)
	}

	// An ask's id is FORBIDDEN before anything else (no relay, unknown relay, no session).
	tests := []struct {
		args map[string]any
		code string
		has  string
	}{
		{map[string]any{"action": "answer_question", "question_id": "ask_0123456789abcdef", "answer": "x"}, CodeForbidden, "Nothing was sent."},
		{map[string]any{"action": "answer_question", "relay": "build-box", "question_id": "ask_0123456789abcdef"}, CodeForbidden, "Nothing was sent."},
		{ans(map[string]any{"question_id": "ask_0123456789abcdef"}), CodeForbidden, "Nothing was sent."},
		{ans(map[string]any{"question_id": "card_0123456789abcdef"}), CodeForbidden, "Nothing was sent."},
		{ans(map[string]any{"question_id": "q_00000000000000ff"}), CodeNotFound, "Nothing was sent."},
		{ans(map[string]any{"session": c}), CodeNotFound, ""},
		{ans(map[string]any{"session": actNoSuchSession}), CodeNotFound, ""},
		{ans(map[string]any{"question_id": nil}), CodeInvalidInput, ""},
		{ans(map[string]any{"choices": nil}), CodeInvalidInput, ""},
		{ans(map[string]any{"choices": []string{}, "answer": "  "}), CodeInvalidInput, ""},
		{ans(map[string]any{"choices": []string{"oracle"}}), CodeInvalidInput, `"oracle"`},
		// session may be left out: the question names its session (the seed's example).
		// A wrong session is NOT_FOUND.
		{map[string]any{"action": "answer_question", "relay": "this", "session": c, "question_id": qid, "answer": "pg"}, CodeNotFound, ""},
	}
	for _, tt := range tests {
		actWant(t, fmt.Sprint(tt.args), f.call(a, tt.args), tt.code, tt.has)
	}
	actHas(t, "choices error", f.call(a, ans(map[string]any{"choices": []string{"oracle"}}))["error"], "pg, mysql")
	if tr, err := f.r.Turn(f.ctx, mid); err != nil || tr.Status != store.TurnRunning {
		t.Fatalf("the question's turn moved on: %v %v", tr, err)
	}

	// Its own question: SELF.
	amid := f.prompt(a, script(map[string]any{"question": map[string]any{"text": "Me?"}}))
	aq := f.actQuestion(a).ID
	env := f.actFail(a, map[string]any{"action": "answer_question", "relay": "this", "session": a, "question_id": aq, "answer": "yes"}, CodeSelf)
	actHas(t, "error", env["error"], "Nothing was sent.")
	if _, err := f.r.AnswerQuestion(f.ctx, a, aq, nil, "owner"); err != nil {
		t.Fatal(err)
	}
	f.actTurn(amid)

	// Success: the turn continues with the answer.
	env = f.ok(a, ans(map[string]any{"question_id": qid[:10]}))
	if diff := cmp.Diff([]any{qid, "pg", "answer_question → desk session " + b[:8] + ": answered " + qid},
		[]any{env["question_id"], env["answer"], env["summary"]}); diff != "" {
		t.Errorf("answer_question (-want +got):\n%s", diff)
	}
	if tr := f.actTurn(mid); tr.Status != store.TurnDone || tr.Reply != "pg chosen" {
		t.Errorf("turn %s %q, want done \"pg chosen\"", tr.Status, tr.Reply)
	}
	// Answered once only.
	f.actFail(a, ans(nil), CodeNotFound)

	// A free-text answer.
	mid = f.prompt(c, script(map[string]any{"question": map[string]any{"text": "Name?"}}))
	cq := f.actQuestion(c).ID
	f.ok(a, map[string]any{"action": "answer_question", "relay": "this", "session": c, "question_id": cq, "answer": "Ada"})
	if tr := f.actTurn(mid); tr.Reply != "Ada" {
		t.Errorf("reply %q, want Ada", tr.Reply)
	}
}

// R5.2.3, R5.1: in ask mode every write action needs a card; outside a turn
// there is none (NO_ACTIVE_TURN), a denied card is PERMISSION with nothing done.
func TestRulesActAskModeCards(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "careful", Mode: "ask"})
	b := f.session(NewSession{Title: "target"})
	qmid := f.prompt(b, script(map[string]any{"question": map[string]any{"text": "Go?", "options": []string{"y", "n"}}}))
	qid := f.actQuestion(b).ID

	for _, c := range []struct {
		args    map[string]any
		nothing string
	}{
		{map[string]any{"action": "send", "session": b, "text": "hi", "wait_seconds": 0}, "Nothing was sent."},
		{map[string]any{"action": "answer_question", "session": b, "question_id": qid, "choices": []string{"y"}}, "Nothing was sent."},
		{map[string]any{"action": "stop", "session": b}, "Nothing was done."},
		{map[string]any{"action": "archive", "session": b}, "Nothing was done."},
		{map[string]any{"action": "create_session", "text": "hi"}, "No session was created."},
	} {
		c.args["relay"] = "this"
		actWant(t, fmt.Sprint(c.args["action"]), f.call(a, c.args), CodeNoActiveTurn, c.nothing)
	}
	// Reading needs no card.
	f.ok(a, map[string]any{"action": "list_sessions", "relay": "this"})
	if tr, err := f.r.Turn(f.ctx, qmid); err != nil || tr.Status != store.TurnRunning {
		t.Fatalf("the question's turn moved on: %v %v", tr, err)
	}
	before := f.messages(b)

	// Denied inside a turn: PERMISSION, nothing sent.
	res, card := f.actInTurn(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "hi", "wait_seconds": 0}, "deny")
	if card.Action != "send" || card.Target == nil || *card.Target != b {
		t.Errorf("card %+v, want send on %s", card, b)
	}
	actHas(t, "card.lines", strings.Join(card.Lines, "\n"), "ask mode")
	actWant(t, "denied send", res, CodePermission, "Nothing was sent.")
	if n := f.messages(b); n != before {
		t.Errorf("messages %d, want %d", n, before)
	}

	// Allowed: the answer goes through and the question's turn continues.
	res, card = f.actInTurn(a, map[string]any{"action": "answer_question", "relay": "this", "session": b, "question_id": qid, "choices": []string{"y"}}, "allow")
	if card.Action != "answer_question" {
		t.Errorf("card.action %q", card.Action)
	}
	actWant(t, "allowed answer_question", res, "")
	if tr := f.actTurn(qmid); tr.Reply != "y" {
		t.Errorf("reply %q, want y", tr.Reply)
	}
	res, _ = f.actInTurn(a, map[string]any{"action": "archive", "relay": "this", "session": b}, "allow")
	if res["archived"] != true {
		t.Errorf("archive: %v", res)
	}
}

// R5.2.3: in ask mode every write action asks a card (send, update_session, stop, archive,
// answer_question); reads do not. Deny leaves things as they were.
func TestRulesActAskModeCardsEveryWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "asker", Mode: "ask"})
	b := f.session(NewSession{Title: "target"})
	s := f.session(NewSession{Title: "runner"})
	q := f.session(NewSession{Title: "questioner"})
	sTurn := f.prompt(s, script(map[string]any{"sleep_ms": 600000}, map[string]any{"reply": "slept"}))
	qTurn := f.prompt(q, script(map[string]any{"question": map[string]any{"text": "Pick one", "options": []string{"A", "B"}}}))
	f.actTurn(sTurn, store.TurnRunning)
	qid := f.actQuestion(q).ID

	send := map[string]any{"action": "send", "relay": "this", "session": b, "text": "hi from asker", "wait_seconds": 10}
	update := map[string]any{"action": "update_session", "relay": "this", "session": b, "title": "renamed"}
	stop := map[string]any{"action": "stop", "relay": "this", "session": s}
	archive := map[string]any{"action": "archive", "relay": "this", "session": b}
	answer := map[string]any{"action": "answer_question", "relay": "this", "session": q, "question_id": qid, "choices": []string{"A"}}

	// Outside a turn each needs a card, so each is NO_ACTIVE_TURN and nothing happens.
	for _, args := range []map[string]any{send, update, stop, archive, answer} {
		f.actFail(a, args, CodeNoActiveTurn)
	}
	f.ok(a, map[string]any{"action": "list_sessions", "relay": "this"})
	f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": b})
	if n := f.messages(b); n != 0 {
		t.Fatalf("target has %d messages after refused sends", n)
	}
	if bs := f.actStored(b); bs.Title != "target" || bs.Archived {
		t.Fatalf("target changed without a card: %+v", bs)
	}
	if tr, _ := f.r.Turn(f.ctx, sTurn); tr.Status != store.TurnRunning {
		t.Fatalf("runner turn %s without a card", tr.Status)
	}

	// Inside a turn: one card per write action.
	tid := f.prompt(a, script(actTool(send), actTool(update), actTool(stop), actTool(archive), actTool(answer)))
	f.actDecide(a, "send", b, "allow")
	c := f.actDecide(a, "update_session", b, "allow")
	if l := strings.Join(c.Lines, "\n"); !strings.Contains(l, "Title: renamed") {
		t.Fatalf("update card does not list the change:\n%s", l)
	}
	f.actDecide(a, "stop", s, "allow")
	f.actDecide(a, "archive", b, "deny")
	f.actDecide(a, "answer_question", q, "allow")
	res := f.actResults(tid, 5)

	actWant(t, "send", res[0], "")
	if res[0]["status"] != "done" {
		t.Fatalf("send %v", res[0])
	}
	actWant(t, "update_session", res[1], "")
	if got := f.actStored(b).Title; got != "renamed" {
		t.Fatalf("update_session allowed but title is %q", got)
	}
	actWant(t, "stop", res[2], "")
	if res[2]["stopRequested"] != true {
		t.Fatalf("stop %v", res[2])
	}
	if st := f.actTurn(sTurn).Status; st != store.TurnStopped {
		t.Fatalf("runner turn %s after an allowed stop", st)
	}
	actWant(t, "archive", res[3], CodePermission, "Nothing was done.")
	if f.actStored(b).Archived {
		t.Fatalf("archived although the owner denied it")
	}
	actWant(t, "answer_question", res[4], "")
	if qt := f.actTurn(qTurn); qt.Status != store.TurnDone || !strings.Contains(qt.Reply, "A") {
		t.Fatalf("questioner turn %s %q after the answer", qt.Status, qt.Reply)
	}
}

// R7.7, R7.11, R7.13: send.
func TestRulesActSend(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})
	send := func(extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "send", "relay": "this", "session": b, "wait_seconds": 15}, extra)
	}

	t.Run("done", func(t *testing.T) {
		env := f.ok(a, send(map[string]any{"text": "hello"}))
		mid, _ := env["message_id"].(string)
		if len(mid) < 16 {
			t.Errorf("message_id %v", env["message_id"])
		}
		if v, ok := env["openUrl"]; !ok || v != nil {
			t.Errorf("openUrl = %v (present %v), want null", v, ok)
		}
		want := map[string]any{"ok": true, "status": "done", "reply": map[string]any{"text": "echo: hello", "model": "scripted-1"},
			"session": b, "summary": "send → desk session " + b[:8] + ": done, reply 11 chars"}
		if diff := cmp.Diff(want, env, cmpIgnoreKeys("message_id", "openUrl", "relay")); diff != "" {
			t.Errorf("send (-want +got):\n%s", diff)
		}
		actNoKey(t, "send", env, "note", "turnError", "ignored")
		// A prefix of the target works; the result carries the full id.
		if env = f.ok(a, send(map[string]any{"session": b[:8], "text": "again"})); env["session"] != b {
			t.Errorf("session %v, want %s", env["session"], b)
		}
	})

	t.Run("error", func(t *testing.T) {
		env := f.ok(a, send(map[string]any{"text": script(map[string]any{"reply": "half"}, map[string]any{"error": "boom"})}))
		if diff := cmp.Diff([]any{"error", "boom", "send → desk session " + b[:8] + ": error: boom"},
			[]any{env["status"], env["turnError"], env["summary"]}); diff != "" {
			t.Errorf("send of a failing turn (-want +got):\n%s", diff)
		}
		actNoKey(t, "error send", env, "reply")
	})

	t.Run("question", func(t *testing.T) {
		env := f.ok(a, send(map[string]any{"text": script(map[string]any{"question": map[string]any{"text": "Pick one", "options": []string{"A", "B"}}},
			map[string]any{"reply": " picked"})}))
		qs, _ := env["pendingQuestions"].([]any)
		if len(qs) != 1 {
			t.Fatalf("pendingQuestions %v", env["pendingQuestions"])
		}
		q, _ := qs[0].(map[string]any)
		if diff := cmp.Diff([]any{"question", "send → desk session " + b[:8] + ": waiting on a question",
			map[string]any{"id": q["id"], "kind": "ask_user", "question": "Pick one", "options": []any{"A", "B"}}},
			[]any{env["status"], env["summary"], q}); diff != "" {
			t.Errorf("send of a turn that asks (-want +got):\n%s", diff)
		}
		mid := env["message_id"]
		wait := map[string]any{"action": "wait", "relay": "this", "session": b, "message_id": mid, "wait_seconds": 0}
		if env = f.ok(a, wait); env["status"] != "question" {
			t.Errorf("wait status %v", env["status"])
		}
		f.ok(a, map[string]any{"action": "answer_question", "relay": "this", "session": b, "question_id": q["id"], "choices": []string{"B"}})
		env = f.ok(a, actWith(wait, map[string]any{"wait_seconds": 15}))
		reply, _ := env["reply"].(map[string]any)
		if diff := cmp.Diff([]any{"done", "B picked"}, []any{env["status"], reply["text"]}); diff != "" {
			t.Errorf("wait after the answer (-want +got):\n%s", diff)
		}
	})

	t.Run("queued", func(t *testing.T) {
		busy := f.prompt(b, script(map[string]any{"sleep_ms": 600000}))
		f.actTurn(busy, store.TurnRunning)
		env := f.ok(a, send(map[string]any{"text": "later", "wait_seconds": 0}))
		if diff := cmp.Diff([]any{"queued", "send → desk session " + b[:8] + ": queued"}, []any{env["status"], env["summary"]}); diff != "" {
			t.Errorf("send behind a running turn (-want +got):\n%s", diff)
		}
		actNoKey(t, "queued send", env, "reply", "note")
		mid := env["message_id"]
		if _, err := f.r.OwnerStop(f.ctx, b); err != nil {
			t.Fatal(err)
		}
		f.actTurn(busy)
		env = f.ok(a, map[string]any{"action": "wait", "relay": "this", "session": b, "message_id": mid, "wait_seconds": 15})
		reply, _ := env["reply"].(map[string]any)
		if diff := cmp.Diff([]any{"done", "echo: later"}, []any{env["status"], reply["text"]}); diff != "" {
			t.Errorf("wait for the queued prompt (-want +got):\n%s", diff)
		}
	})

	t.Run("wait capped", func(t *testing.T) {
		env := f.ok(a, send(map[string]any{"text": "cap", "wait_seconds": 100000}))
		max := int(f.r.cards.maxWait(f.ctx) / time.Second)
		if diff := cmp.Diff([]any{"done", fmt.Sprintf(`wait_seconds was capped at %d, the longest wait per call on relay "desk".`, max)},
			[]any{env["status"], env["note"]}); diff != "" {
			t.Errorf("capped send (-want +got):\n%s", diff)
		}
	})

	t.Run("errors", func(t *testing.T) {
		before := f.messages(b)
		tests := []struct {
			args map[string]any
			code string
			has  []string
		}{
			{send(map[string]any{"session": a, "text": "me"}), CodeSelf, []string{"Nothing was sent."}},
			{send(map[string]any{"session": actNoSuchSession, "text": "x"}), CodeNotFound, []string{"Nothing was"}},
			{map[string]any{"action": "send", "relay": "this", "text": "x"}, CodeInvalidInput, []string{"session"}},
			{send(map[string]any{}), CodeInvalidInput, []string{"text is required", "Nothing was sent."}},
			{send(map[string]any{"text": "   "}), CodeInvalidInput, []string{"text is required"}},
			{send(map[string]any{"text": "x", "wait_seconds": -1}), CodeInvalidInput, nil},
			{send(map[string]any{"text": "x", "model": "gpt-9"}), CodeUnknownModel, []string{"Unknown model 'gpt-9'", "Valid ids: scripted-1.", "Nothing was sent."}},
			{send(map[string]any{"text": "x", "effort": "max"}), CodeInvalidInput, []string{`"max"`, "low, medium, high", "Nothing was sent."}},
			{send(map[string]any{"text": "x", "mode": "yolo"}), CodeInvalidInput, []string{"mode", "Nothing was sent."}},
		}
		for _, tt := range tests {
			actWant(t, fmt.Sprint(tt.args), f.call(a, tt.args), tt.code, tt.has...)
		}
		env := f.actFail(a, send(map[string]any{"text": "x", "model": "scripted-2"}), CodeUnknownModel)
		want := map[string]any{"ok": false, "code": CodeUnknownModel,
			"error":       `Unknown model 'scripted-2' for Scripted on relay "desk"; did you mean 'scripted-1'? Valid ids: scripted-1. Nothing was sent.`,
			"suggestions": []any{"scripted-1"}, "models": []any{"scripted-1"}}
		if diff := cmp.Diff(want, env, cmpIgnoreKeys("relay", "retryable")); diff != "" {
			t.Errorf("unknown model (-want +got):\n%s", diff)
		}
		if n := f.messages(b); n != before {
			t.Errorf("failed sends changed the target: %d messages, want %d", n, before)
		}
		s := f.actStored(b)
		if diff := cmp.Diff([]string{"scripted-1", ""}, []string{s.Model, s.Effort}); diff != "" {
			t.Errorf("model and effort (-want +got):\n%s", diff)
		}
	})

	t.Run("settings", func(t *testing.T) {
		env := f.ok(a, send(map[string]any{"text": "tuned", "model": "scripted-1", "effort": "high", "mode": "plan", "provider": "scripted"}))
		if env["status"] != "done" {
			t.Errorf("status %v", env["status"])
		}
		got := f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": b, "last": 1})
		if diff := cmp.Diff([]any{"high", "plan"}, []any{got["effort"], got["mode"]}); diff != "" {
			t.Errorf("settings after the send (-want +got):\n%s", diff)
		}
	})
}

// R7.10: update_session.
func TestRulesActUpdateSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	folder := f.r.opts.Folders[0]
	a := f.session(NewSession{Title: "lead"})
	b := f.session(NewSession{Title: "worker", Cwd: folder})
	upd := func(extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "update_session", "relay": "this", "session": b}, extra)
	}

	// A call that changes nothing asks nobody.
	env := f.ok(a, upd(map[string]any{"title": "worker", "model": "scripted-1", "mode": "agent"}))
	if diff := cmp.Diff([]any{[]any{}, "update_session → desk session " + b[:8] + ": nothing changed"}, []any{env["changed"], env["summary"]}); diff != "" {
		t.Errorf("no change (-want +got):\n%s", diff)
	}
	settings := actSettings(env)
	for _, k := range []string{"provider", "model", "effort", "mode", "title", "group", "cwd", "auto_compact_window", "thinking_enabled", "thinking_display"} {
		if _, ok := settings[k]; !ok {
			t.Errorf("settings lacks %q: %v", k, settings)
		}
	}
	if settings["title"] != "worker" {
		t.Errorf("settings.title %v", settings["title"])
	}

	// A session this conversation did not start needs a card: outside a turn there is none.
	// Validation first, without a card.
	tests := []struct {
		args map[string]any
		code string
		has  []string
	}{
		{upd(map[string]any{"title": "renamed"}), CodeNoActiveTurn, []string{"Nothing was changed."}},
		{upd(map[string]any{"effort": "extreme"}), CodeInvalidInput, []string{"Nothing was changed."}},
		{upd(map[string]any{"cwd": "/"}), CodeInvalidInput, []string{"may not use the folder", "Nothing was changed."}},
		{upd(map[string]any{"mode": "yolo"}), CodeInvalidInput, nil},
		{upd(map[string]any{"group": "grp_000000000000"}), CodeUnknownGroup, nil},
		{upd(map[string]any{"auto_compact_window": "huge"}), CodeInvalidInput, nil},
		{upd(map[string]any{"thinking_enabled": "maybe"}), CodeInvalidInput, nil},
		{upd(nil), CodeInvalidInput, []string{"at least one setting", "Nothing was changed."}},
		{upd(map[string]any{"may_create_sessions": true}), CodeInvalidInput, []string{"Whether a session may start sessions is the owner's setting alone."}},
		{upd(map[string]any{"mayCreateSessions": true}), CodeInvalidInput, []string{"Whether a session may start sessions is the owner's setting alone."}},
		{upd(map[string]any{"session": a, "title": "me"}), CodeSelf, []string{"Nothing was changed."}},
		{upd(map[string]any{"session": actNoSuchSession, "title": "x"}), CodeNotFound, nil},
		{map[string]any{"action": "update_session", "relay": "this", "title": "x"}, CodeInvalidInput, nil},
	}
	for _, tt := range tests {
		actWant(t, fmt.Sprint(tt.args), f.call(a, tt.args), tt.code, tt.has...)
	}
	env = f.actFail(a, upd(map[string]any{"model": "scripted-2"}), CodeUnknownModel)
	if diff := cmp.Diff(`Unknown model 'scripted-2' for Scripted on relay "desk"; did you mean 'scripted-1'? Valid ids: scripted-1. Nothing was changed.`, env["error"]); diff != "" {
		t.Errorf("unknown model (-want +got):\n%s", diff)
	}
	if s := f.actStored(b); s.Title != "worker" || s.MayCreateSessions {
		t.Errorf("changed by refused calls: title %q, mayCreateSessions %v", s.Title, s.MayCreateSessions)
	}

	// Inside a turn with the card allowed.
	res, card := f.actInTurn(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "title": "renamed", "effort": "high"}, "allow")
	if card.Action != "update_session" || card.Target == nil || *card.Target != b {
		t.Errorf("card %+v, want update_session on %s", card, b)
	}
	actHas(t, "card.lines", strings.Join(card.Lines, "\n"), "Effort: high", "Title: renamed")
	actWant(t, "update_session in a turn", res, "")
	st := actSettings(res)
	if diff := cmp.Diff([]any{[]any{"effort", "title"}, "update_session → desk session " + b[:8] + ": effort, title", "renamed", "high"},
		[]any{res["changed"], res["summary"], st["title"], st["effort"]}); diff != "" {
		t.Errorf("update_session in a turn (-want +got):\n%s", diff)
	}

	// Allow covers later changes by this conversation on this relay: direct calls now.
	env = f.ok(a, upd(map[string]any{"group": "Team X"}))
	gc, _ := env["groupCreated"].(map[string]any)
	if id, _ := gc["id"].(string); !strings.HasPrefix(id, "grp_") {
		t.Errorf("groupCreated.id %v", gc["id"])
	}
	if diff := cmp.Diff([]any{[]any{"group"}, "Team X", map[string]any{"id": gc["id"], "name": "Team X", "role": "head"}},
		[]any{env["changed"], gc["name"], actSettings(env)["group"]}); diff != "" {
		t.Errorf("join a new group (-want +got):\n%s", diff)
	}
	info := f.ok(a, map[string]any{"action": "relay_info", "relay": "this"})
	if diff := cmp.Diff([]any{map[string]any{"id": gc["id"], "name": "Team X", "memberCount": float64(1)}}, info["groups"]); diff != "" {
		t.Errorf("relay_info groups (-want +got):\n%s", diff)
	}
	env = f.ok(a, upd(map[string]any{"group": "none"}))
	if diff := cmp.Diff([]any{[]any{"group"}, nil}, []any{env["changed"], actSettings(env)["group"]}); diff != "" {
		t.Errorf("leave the group (-want +got):\n%s", diff)
	}
	actNoKey(t, "leaving", env, "groupCreated")
	if f.actGroup(gc["id"].(string)) != nil {
		t.Errorf("an agent-made group outlived its last session")
	}
	if env = f.ok(a, upd(map[string]any{"group": "none"})); cmp.Diff([]any{}, env["changed"]) != "" {
		t.Errorf("changed %v, want none", env["changed"])
	}
	ops := f.actNewGroup("Ops")
	env = f.ok(a, upd(map[string]any{"group": "OPS"}))
	if diff := cmp.Diff([]any{[]any{"group"}, map[string]any{"id": ops, "name": "Ops", "role": "member"}}, []any{env["changed"], actSettings(env)["group"]}); diff != "" {
		t.Errorf("join the owner's group (-want +got):\n%s", diff)
	}
	actNoKey(t, "joining", env, "groupCreated")
	f.ok(a, upd(map[string]any{"group": "none"}))
	og := f.actGroup(ops)
	if og == nil {
		t.Fatalf("the owner's group was removed")
	}
	if og.MemberCount != 0 {
		t.Errorf("owner group members %d", og.MemberCount)
	}
	f.actNewGroup("Twin")
	f.actNewGroup("twin")
	env = f.actFail(a, upd(map[string]any{"group": "twin"}), CodeUnknownGroup)
	if msg, _ := env["error"].(string); !strings.HasSuffix(msg, "Pass the id.") {
		t.Errorf("ambiguous group error %q", msg)
	}

	// Thinking and compaction settings; false counts as not given.
	env = f.ok(a, upd(map[string]any{"thinking_enabled": "off"}))
	if diff := cmp.Diff([]any{[]any{"thinking_enabled"}, false}, []any{env["changed"], actSettings(env)["thinking_enabled"]}); diff != "" {
		t.Errorf("thinking off (-want +got):\n%s", diff)
	}
	env = f.ok(a, upd(map[string]any{"thinking_enabled": false, "title": "t2"}))
	if diff := cmp.Diff([]any{[]any{"title"}, false}, []any{env["changed"], actSettings(env)["thinking_enabled"]}); diff != "" {
		t.Errorf("thinking_enabled false (-want +got):\n%s", diff)
	}
	env = f.ok(a, upd(map[string]any{"auto_compact_window": 120000, "thinking_display": "summarized"}))
	if diff := cmp.Diff([]any{[]any{"auto_compact_window", "thinking_display"}, float64(100000)},
		[]any{env["changed"], actSettings(env)["auto_compact_window"]}); diff != "" {
		t.Errorf("compaction (-want +got):\n%s", diff)
	}
	actHas(t, "note", env["note"], "100000")

	// cwd: refused while a turn runs, then moved.
	sub := filepath.Join(folder, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	mid := f.prompt(b, script(map[string]any{"sleep_ms": 600000}))
	f.actTurn(mid, store.TurnRunning)
	env = f.actFail(a, upd(map[string]any{"cwd": sub, "title": "moved"}), CodeBusy)
	actHas(t, "error", env["error"], "The session cannot move to another folder now:", "Nothing was changed.")
	if s := f.actStored(b); s.Cwd != folder || s.Title != "t2" {
		t.Errorf("cwd %q, title %q: changed by a refused call", s.Cwd, s.Title)
	}
	// The same folder is no move.
	if env = f.ok(a, upd(map[string]any{"cwd": folder})); cmp.Diff([]any{}, env["changed"]) != "" {
		t.Errorf("changed %v, want none", env["changed"])
	}
	if _, err := f.r.OwnerStop(f.ctx, b); err != nil {
		t.Fatal(err)
	}
	f.actTurn(mid)
	env = f.ok(a, upd(map[string]any{"cwd": sub}))
	if diff := cmp.Diff([]any{[]any{"cwd"}, false, sub}, []any{env["changed"], env["relaunched"], actSettings(env)["cwd"]}); diff != "" {
		t.Errorf("move (-want +got):\n%s", diff)
	}
	if env["note"] == nil || env["note"] == "" {
		t.Errorf("no note on a folder change")
	}
}

// actByID is the listed item with id, nil when not listed.
func actByID(items any, id string) map[string]any {
	l, _ := items.([]any)
	for _, it := range l {
		if m, ok := it.(map[string]any); ok && m["id"] == id {
			return m
		}
	}
	return nil
}

// R7.4: list_sessions.
func TestRulesActListSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "bee"})
	f.session(NewSession{Title: "cee"})
	f.actNewGroup("Team")
	d := f.session(NewSession{Title: "dee", Group: "team"})
	list := map[string]any{"action": "list_sessions", "relay": "this"}

	env := f.ok(a, list)
	if diff := cmp.Diff([]any{"list_sessions → desk: 4 sessions (active)", float64(4)}, []any{env["summary"], env["total"]}); diff != "" {
		t.Errorf("list_sessions (-want +got):\n%s", diff)
	}
	actNoKey(t, "list_sessions", env, "truncated")

	// Most recent activity first.
	f.clk.Advance(time.Second)
	f.actTurn(f.prompt(b, "wake up"))
	env = f.ok(a, list)
	items, _ := env["sessions"].([]any)
	if len(items) != 4 {
		t.Fatalf("sessions %v", items)
	}
	first, _ := items[0].(map[string]any)
	for _, k := range []string{"id", "title", "provider", "model", "state", "cwd", "lastActivityAt", "messageCount", "tasks", "group"} {
		if _, ok := first[k]; !ok {
			t.Errorf("list item lacks %q: %v", k, first)
		}
	}
	want := map[string]any{"id": b, "title": "bee", "provider": "scripted", "model": "scripted-1", "state": "idle",
		"cwd": f.r.opts.DefaultCwd, "messageCount": float64(2), "tasks": []any{}, "group": nil}
	if diff := cmp.Diff(want, first, cmpIgnoreKeys("lastActivityAt", "mode")); diff != "" {
		t.Errorf("first item (-want +got):\n%s", diff)
	}
	actNoKey(t, "owner session", first, "startedBy", "mayCreateSessions", "watched")
	dv := actByID(items, d)
	if dv == nil {
		t.Fatalf("dee not listed")
	}
	dg, _ := dv["group"].(map[string]any)
	if id, _ := dg["id"].(string); !strings.HasPrefix(id, "grp_") || dg["name"] != "Team" || dg["role"] != "member" {
		t.Errorf("dee's group %v", dv["group"])
	}

	// limit and truncation.
	env = f.ok(a, actWith(list, map[string]any{"limit": 2}))
	if diff := cmp.Diff([]any{2, float64(4), true, "list_sessions → desk: 4 sessions (active), 2 shown"},
		[]any{len(env["sessions"].([]any)), env["total"], env["truncated"], env["summary"]}); diff != "" {
		t.Errorf("limit 2 (-want +got):\n%s", diff)
	}
	for limit, n := range map[int]int{1: 1, 200: 4} {
		if got := len(f.ok(a, actWith(list, map[string]any{"limit": limit}))["sessions"].([]any)); got != n {
			t.Errorf("limit %d: %d sessions, want %d", limit, got, n)
		}
	}
	for _, bad := range []any{0, 201, -1, "many", 3.5, 1000000000} {
		actWant(t, fmt.Sprint("limit ", bad), f.call(a, actWith(list, map[string]any{"limit": bad})), CodeInvalidInput, "limit")
	}

	// scope.
	actWant(t, "scope deleted", f.call(a, actWith(list, map[string]any{"scope": "deleted"})), CodeInvalidInput, "scope")
	archived := actWith(list, map[string]any{"scope": "archived"})
	if env = f.ok(a, archived); env["summary"] != "list_sessions → desk: 0 sessions (archived)" {
		t.Errorf("summary %v", env["summary"])
	}
	if _, err := f.r.OwnerArchive(f.ctx, d); err != nil {
		t.Fatal(err)
	}
	items, _ = f.ok(a, archived)["sessions"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["id"] != d {
		t.Errorf("archived sessions %v", items)
	}
	for scope, n := range map[string]float64{"active": 3, "all": 4} {
		if got := f.ok(a, actWith(list, map[string]any{"scope": scope, "limit": 200}))["total"]; got != n {
			t.Errorf("%s total %v, want %v", scope, got, n)
		}
	}

	// A running turn shows as running_turn.
	c := f.session(NewSession{Title: "busy"})
	mid := f.prompt(c, script(map[string]any{"sleep_ms": 600000}))
	f.actTurn(mid, store.TurnRunning)
	if st := actByID(f.ok(a, list)["sessions"], c)["state"]; st != "running_turn" {
		t.Errorf("busy state %v", st)
	}
	if _, err := f.r.OwnerStop(f.ctx, c); err != nil {
		t.Fatal(err)
	}
	if tr := f.actTurn(mid); tr.Status != store.TurnStopped {
		t.Errorf("turn %s, want stopped", tr.Status)
	}
}

// R7.5: read_session.
func TestRulesActReadSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})
	read := func(sid string, last any) map[string]any {
		args := map[string]any{"action": "read_session", "relay": "this", "session": sid}
		if last != nil {
			args["last"] = last
		}
		return f.ok(a, args)
	}

	f.actTurn(f.prompt(b, "hi"))
	f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": "hello", "wait_seconds": 15})
	f.actTurn(f.prompt(b, script(map[string]any{"error": "kaput"})))

	env := read(b, 50)
	msgs, _ := env["messages"].([]any)
	var roles, texts []string
	for _, x := range msgs {
		mm, _ := x.(map[string]any)
		r, _ := mm["role"].(string)
		tx, _ := mm["text"].(string)
		roles, texts = append(roles, r), append(texts, tx)
		if mm["id"] == nil || mm["id"] == "" || mm["createdAt"] == nil || mm["createdAt"] == "" {
			t.Errorf("message lacks id or createdAt: %v", mm)
		}
	}
	if diff := cmp.Diff([]string{"user", "assistant", "agent", "assistant", "user", "event"}, roles); diff != "" {
		t.Fatalf("roles (-want +got):\n%s", diff)
	}
	// R18.15: the agent's prompt starts with its line; the scripted agent answers the text after it.
	if diff := cmp.Diff([]string{"hi", "echo: hi", agentLine("caller", "scripted-1") + "\nhello", "echo: hello"}, texts[:4]); diff != "" {
		t.Errorf("texts (-want +got):\n%s", diff)
	}
	actHas(t, "event text", texts[5], "kaput")
	agentMsg, _ := msgs[2].(map[string]any)
	if diff := cmp.Diff(map[string]any{"relay": "desk", "session": a, "title": "caller", "model": "scripted-1"}, agentMsg["from"]); diff != "" {
		t.Errorf("from (-want +got):\n%s", diff)
	}
	actNoKey(t, "owner message", msgs[0].(map[string]any), "from")
	if diff := cmp.Diff([]any{"read_session → desk session " + b[:8] + ": 6 messages, idle", b, "idle", nil, []any{}, []any{}},
		[]any{env["summary"], env["id"], env["state"], env["inFlight"], env["pendingQuestions"], env["tasks"]}); diff != "" {
		t.Errorf("read_session (-want +got):\n%s", diff)
	}

	// last: default 5, oldest first; last 2; bounds.
	env = read(b, nil)
	if ms := env["messages"].([]any); len(ms) != 5 || ms[0].(map[string]any)["text"] != "echo: hi" {
		t.Errorf("default messages %v", ms)
	}
	two := read(b, 2)["messages"].([]any)
	if diff := cmp.Diff([]any{"user", "event"}, []any{two[0].(map[string]any)["role"], two[1].(map[string]any)["role"]}); diff != "" {
		t.Errorf("last 2 roles (-want +got):\n%s", diff)
	}
	read(b, 1)
	for _, bad := range []any{0, 51, -3, "abc", 1000000000} {
		actWant(t, fmt.Sprint("last ", bad), f.call(a, map[string]any{"action": "read_session", "relay": "this", "session": b, "last": bad}), CodeInvalidInput, "last")
	}

	// Ids: a prefix of 8 works and the result carries the full id.
	if env = read(b[:8], nil); env["id"] != b {
		t.Errorf("id from prefix %v", env["id"])
	}
	f.actFail(a, map[string]any{"action": "read_session", "relay": "this", "session": b[:7]}, CodeInvalidInput)
	actWant(t, "unknown session", f.call(a, map[string]any{"action": "read_session", "relay": "this", "session": actNoSuchSession}), CodeNotFound, "desk")
	actWant(t, "no session", f.call(a, map[string]any{"action": "read_session", "relay": "this"}), CodeInvalidInput, "session")
	// Reading itself is allowed.
	read(a, nil)

	// A turn waiting on a question: state, inFlight, pendingQuestions.
	c := f.session(NewSession{Title: "asker"})
	qmid := f.prompt(c, script(map[string]any{"reply": "thinking… "},
		map[string]any{"question": map[string]any{"text": "Deploy now?", "options": []string{"yes", "no"}}}))
	f.actQuestion(c)
	env = read(c, 5)
	qs, _ := env["pendingQuestions"].([]any)
	if len(qs) != 1 {
		t.Fatalf("pendingQuestions %v", env["pendingQuestions"])
	}
	q, _ := qs[0].(map[string]any)
	if id, _ := q["id"].(string); !strings.HasPrefix(id, "q_") {
		t.Errorf("question id %v", q["id"])
	}
	if diff := cmp.Diff([]any{map[string]any{"id": q["id"], "kind": "ask_user", "question": "Deploy now?", "options": []any{"yes", "no"}}, "running_turn", "thinking… "},
		[]any{q, env["state"], env["inFlight"]}); diff != "" {
		t.Errorf("a turn on a question (-want +got):\n%s", diff)
	}
	if _, err := f.r.AnswerQuestion(f.ctx, c, q["id"].(string), []string{"yes"}, ""); err != nil {
		t.Fatal(err)
	}
	if tr := f.actTurn(qmid); tr.Status != store.TurnDone || tr.Reply != "thinking… yes" {
		t.Errorf("turn %s %q, want done \"thinking… yes\"", tr.Status, tr.Reply)
	}

	// Group members.
	f.actNewGroup("Crew")
	g1 := f.session(NewSession{Title: "crew one", Group: "Crew"})
	g2 := f.session(NewSession{Title: "crew two", Group: "crew"})
	g, _ := read(g1, 5)["group"].(map[string]any)
	if id, _ := g["id"].(string); !strings.HasPrefix(id, "grp_") {
		t.Errorf("group id %v", g["id"])
	}
	if diff := cmp.Diff(map[string]any{"id": g["id"], "name": "Crew", "role": "member",
		"members": []any{map[string]any{"id": g2, "title": "crew two", "role": "member", "state": "idle", "archived": false}}},
		g); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}

	// Tasks with health while running.
	d := f.session(NewSession{Title: "builder"})
	f.actTurn(f.prompt(d, script(map[string]any{"task": map[string]any{"description": "slow build", "lines": []string{"never yet"},
		"line_ms": 600000, "exit": 0, "background": true}}, map[string]any{"reply": "started"})))
	env = read(d, 5)
	tasks, _ := env["tasks"].([]any)
	if len(tasks) != 1 {
		t.Fatalf("tasks %v", env["tasks"])
	}
	task, _ := tasks[0].(map[string]any)
	if id, _ := task["taskId"].(string); id == "" {
		t.Errorf("taskId %v", task)
	}
	want := map[string]any{"description": "slow build", "type": "local_bash", "status": "running", "output": true, // the seed's type
		"health": map[string]any{"minutesSinceOutput": float64(0), "quiet": false, "quietAfterMinutes": float64(10)}}
	sub := map[string]any{}
	for k := range want {
		sub[k] = task[k]
	}
	if diff := cmp.Diff([]any{"background_only", want}, []any{env["state"], sub}); diff != "" {
		t.Errorf("a running task (-want +got):\n%s", diff)
	}
}

// actTask waits until sid's only task (read_session's) has status and returns it.
func (f *fixture) actTask(caller, sid, status string) map[string]any {
	f.t.Helper()
	var task map[string]any
	f.actUntil("the task of "+sid+" "+status, func() bool {
		tasks, _ := f.ok(caller, map[string]any{"action": "read_session", "relay": "this", "session": sid, "last": 5})["tasks"].([]any)
		if len(tasks) == 1 {
			task, _ = tasks[0].(map[string]any)
			return task["status"] == status
		}
		return false
	})
	return task
}

// R7.6: read_task_output.
func TestRulesActReadTaskOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "tester"})
	c := f.session(NewSession{Title: "pytester"})

	lines := []string{
		"\x1b[1m=== RUN   TestA\x1b[0m",
		"--- PASS: TestA (0.00s)",
		"=== RUN   TestB",
		"retrying",
		"retrying",
		"retrying",
		"Authorization: Bearer x",
		"    b_test.go:9: \x1b[31mboom\x1b[0m",
		"--- FAIL: TestB (0.01s)",
		"FAIL",
		"FAIL\texample.com/pkg\t0.012s",
	}
	f.actTurn(f.prompt(b, script(map[string]any{"task": map[string]any{"description": "go test ./...", "lines": lines,
		"line_ms": 1, "exit": 1, "background": true}}, map[string]any{"reply": "running tests"})))
	task := f.actTask(a, b, "failed")
	tid, _ := task["taskId"].(string)
	counts := map[string]any{"runner": "go test", "passed": float64(1), "failed": float64(1), "skipped": float64(0), "final": true}
	if diff := cmp.Diff([]any{counts, true}, []any{task["counts"], task["output"]}); diff != "" {
		t.Errorf("read_session's task (-want +got):\n%s", diff)
	}
	actNoKey(t, "ended task", task, "health")

	out := map[string]any{"action": "read_task_output", "relay": "this", "session": b, "task_id": tid}
	env := f.ok(a, out)
	wantTail := []any{
		"=== RUN   TestA",
		"--- PASS: TestA (0.00s)",
		"=== RUN   TestB",
		"retrying [×3]",
		"Authorization: ***",
		"    b_test.go:9: boom",
		"--- FAIL: TestB (0.01s)",
		"FAIL",
		"FAIL\texample.com/pkg\t0.012s",
	}
	if diff := cmp.Diff([]any{wantTail, counts}, []any{env["tail"], env["counts"]}); diff != "" {
		t.Errorf("read_task_output (-want +got):\n%s", diff)
	}
	if strings.Contains(fmt.Sprint(env["tail"]), "Bearer x") {
		t.Errorf("the credential is not masked: %v", env["tail"])
	}
	actNoKey(t, "read_task_output", env, "truncated", "stall")
	tk, _ := env["task"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"id": tid, "description": "go test ./...", "type": "local_bash", "status": "failed", "exitCode": float64(1)},
		tk, cmpIgnoreKeys("startedAt", "endedAt", "lastOutputAt")); diff != "" {
		t.Errorf("task (-want +got):\n%s", diff)
	}
	if s, _ := tk["startedAt"].(string); s == "" {
		t.Errorf("startedAt %v", tk["startedAt"])
	}
	sum, _ := env["summary"].(string)
	prefix := "read_task_output → desk session " + b[:8] + " task " + tid[:8] + ": 9 lines, failed, last output "
	if !strings.HasPrefix(sum, prefix) || !strings.HasSuffix(sum, ", 1 passed, 1 failed") {
		t.Errorf("summary %q, want %q… , 1 passed, 1 failed", sum, prefix)
	}

	// A prefix of the task id works; the result carries the full id.
	env = f.ok(a, actWith(out, map[string]any{"session": b[:8], "task_id": tid[:8]}))
	if id := env["task"].(map[string]any)["id"]; id != tid {
		t.Errorf("task.id from prefix %v", id)
	}

	// lines counts folded lines.
	env = f.ok(a, actWith(out, map[string]any{"lines": 6}))
	if diff := cmp.Diff([]any{wantTail[3:], true}, []any{env["tail"], env["truncated"]}); diff != "" {
		t.Errorf("tail of 6 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantTail[8:], f.ok(a, actWith(out, map[string]any{"lines": 1}))["tail"]); diff != "" {
		t.Errorf("tail of 1 (-want +got):\n%s", diff)
	}
	f.ok(a, actWith(out, map[string]any{"lines": 500}))
	for _, bad := range []any{0, 501, "all", 1000000000} {
		actWant(t, fmt.Sprint("lines ", bad), f.call(a, actWith(out, map[string]any{"lines": bad})), CodeInvalidInput, "lines")
	}

	// Not found: unknown task, another session's task, unknown session; task_id missing.
	actWant(t, "unknown task", f.call(a, actWith(out, map[string]any{"task_id": "ffffffffffff"})), CodeNotFound, "Nothing was done.")
	f.actFail(a, actWith(out, map[string]any{"session": c}), CodeNotFound)
	f.actFail(a, actWith(out, map[string]any{"session": actNoSuchSession}), CodeNotFound)
	actWant(t, "no task_id", f.call(a, map[string]any{"action": "read_task_output", "relay": "this", "session": b}), CodeInvalidInput, "task_id")

	// pytest summary.
	f.actTurn(f.prompt(c, script(map[string]any{"task": map[string]any{"description": "pytest", "lines": []string{
		"tests/test_a.py ..F.s                                         [100%]",
		"=========== 2 failed, 5 passed, 1 skipped in 1.20s ===========",
	}, "line_ms": 1, "exit": 1, "background": false}})))
	ptid, _ := f.actTask(a, c, "failed")["taskId"].(string)
	env = f.ok(a, actWith(out, map[string]any{"session": c, "task_id": ptid}))
	if diff := cmp.Diff(map[string]any{"runner": "pytest", "passed": float64(5), "failed": float64(2), "skipped": float64(1), "final": true}, env["counts"]); diff != "" {
		t.Errorf("pytest counts (-want +got):\n%s", diff)
	}
	actHas(t, "summary", env["summary"], ", 5 passed, 2 failed")

	// A running task: stall, no counts.
	d := f.session(NewSession{Title: "slow"})
	f.actTurn(f.prompt(d, script(map[string]any{"task": map[string]any{"description": "watcher", "lines": []string{"late"},
		"line_ms": 600000, "background": true}})))
	rtid, _ := f.actTask(a, d, "running")["taskId"].(string)
	env = f.ok(a, actWith(out, map[string]any{"session": d, "task_id": rtid}))
	rt, _ := env["task"].(map[string]any)
	stall, _ := env["stall"].(map[string]any)
	if diff := cmp.Diff([]any{[]any{}, "running", nil, map[string]any{"minutes": float64(0), "quiet": false, "quietAfterMinutes": float64(10)},
		"read_task_output → desk session " + d[:8] + " task " + rtid[:8] + ": 0 lines, running"},
		[]any{env["tail"], rt["status"], rt["exitCode"], stall, env["summary"]}, cmpIgnoreKeys("since")); diff != "" {
		t.Errorf("a running task (-want +got):\n%s", diff)
	}
	if s, _ := stall["since"].(string); s == "" {
		t.Errorf("stall.since %v", stall["since"])
	}
	actNoKey(t, "running task", env, "counts")
}

// R7.6: a task that ended longer ago than the output is kept is NOT_FOUND
// (the relay's timing.task_output_kept, on the simulated clock).
func TestRulesActReadTaskOutputGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "tester"})
	f.actTurn(f.prompt(b, script(map[string]any{"task": map[string]any{"description": "echo", "lines": []string{"one"},
		"exit": 0, "background": false}})))
	tasks, err := f.st.Tasks(f.ctx, b)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("tasks %v %v", tasks, err)
	}
	tid := tasks[0].ID
	args := map[string]any{"action": "read_task_output", "relay": "this", "session": b, "task_id": tid}
	env := f.ok(a, args)
	tk, _ := env["task"].(map[string]any)
	if diff := cmp.Diff([]any{[]any{"one"}, "done", float64(0)}, []any{env["tail"], tk["status"], tk["exitCode"]}); diff != "" {
		t.Errorf("read_task_output (-want +got):\n%s", diff)
	}
	actHas(t, "summary", env["summary"], "task "+tid[:8]+": 1 line, done")
	keep := f.r.opts.Timing.TaskOutputKept
	f.clk.Advance(keep - time.Second)
	f.ok(a, args)
	f.clk.Advance(time.Second)
	env = f.actFail(a, args, CodeNotFound)
	actHas(t, "error", env["error"], "Nothing was done.")
}

// R7.9, R6.1, R6.2, R5.1: create_session.
func TestRulesActCreateSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	actAuto(f)
	folder := f.r.opts.Folders[0]
	a := f.session(NewSession{Title: "lead"})
	create := func(extra map[string]any) map[string]any {
		return actWith(map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, extra)
	}
	read := func(sid string) map[string]any {
		return f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": sid, "last": 5})
	}
	listed := func(sid string) map[string]any {
		return actByID(f.ok(a, map[string]any{"action": "list_sessions", "relay": "this", "limit": 200})["sessions"], sid)
	}

	// Validation before any card (R5.3): all of these answer outside a turn.
	g1 := f.actNewGroup("Release 2.4")
	env := f.actFail(a, create(map[string]any{"group": "Relase"}), CodeUnknownGroup)
	if diff := cmp.Diff([]any{`Relay "desk" has no session group "Relase". Groups there: Release 2.4 (` + g1 + `). No session was created.`,
		[]any{map[string]any{"id": g1, "name": "Release 2.4", "memberCount": float64(0)}}}, []any{env["error"], env["groups"]}); diff != "" {
		t.Errorf("unknown group (-want +got):\n%s", diff)
	}
	actNoKey(t, "unknown group", env, "groupsTotal") // the seed: groupsTotal only when more than 20 exist
	env = f.actFail(a, create(map[string]any{"model": "scripted-2"}), CodeUnknownModel)
	if diff := cmp.Diff([]any{`Unknown model 'scripted-2' for Scripted on relay "desk"; did you mean 'scripted-1'? Valid ids: scripted-1. No session was created.`,
		[]any{"scripted-1"}, []any{"scripted-1"}}, []any{env["error"], env["suggestions"], env["models"]}); diff != "" {
		t.Errorf("unknown model (-want +got):\n%s", diff)
	}
	f.actNewGroup("Twin")
	f.actNewGroup("twin")
	tests := []struct {
		args map[string]any
		code string
		has  []string
	}{
		{create(map[string]any{"group": "grp_000000000000"}), CodeUnknownGroup, nil},
		{create(map[string]any{"effort": "extreme"}), CodeInvalidInput, []string{`"extreme"`, "No session was created."}},
		{create(map[string]any{"cwd": "/"}), CodeInvalidInput, []string{"may not use the folder", "No session was created."}},
		{create(map[string]any{"cwd": "relative/dir"}), CodeInvalidInput, nil},
		{create(map[string]any{"cwd": filepath.Join(folder, "missing")}), CodeInvalidInput, nil},
		{create(map[string]any{"provider": "nope"}), CodeInvalidInput, []string{`"nope"`, "No session was created."}},
		{create(map[string]any{"mode": "yolo"}), CodeInvalidInput, nil},
		{create(map[string]any{"text": nil}), CodeInvalidInput, nil},
		{create(map[string]any{"title": strings.Repeat("t", 201)}), CodeInvalidInput, nil},
		{create(map[string]any{"group": "TWIN"}), CodeUnknownGroup, []string{"No session was created."}},
		// The first session in a conversation needs a card, which needs a running turn.
		{create(nil), CodeNoActiveTurn, []string{"No session was created."}},
	}
	for _, tt := range tests {
		actWant(t, fmt.Sprint(tt.args), f.call(a, tt.args), tt.code, tt.has...)
	}
	env = f.call(a, create(map[string]any{"group": "TWIN"}))
	if msg, _ := env["error"].(string); !strings.HasSuffix(msg, "Pass the id.") {
		t.Errorf("ambiguous group error %q does not end with \"Pass the id.\"", msg)
	}
	if gs, _ := env["groups"].([]any); len(gs) != 2 {
		t.Errorf("ambiguous groups %v", env["groups"])
	}
	if n := f.actTotal("all"); n != 1 {
		t.Errorf("sessions %d, want 1", n)
	}

	// Inside a turn: the card, then the session.
	res, card := f.actInTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "say hi", "title": "helper", "wait_seconds": 15}, "allow")
	if !strings.HasPrefix(card.ID, "card_") || card.Action != "create_session" || card.Relay != "desk" || card.Target != nil {
		t.Errorf("card %+v", card)
	}
	actHas(t, "card.lines", strings.Join(card.Lines, "\n"), "helper", "Model: scripted-1")
	actWant(t, "create_session in a turn", res, "")
	helper, _ := res["session"].(string)
	grp, _ := res["group"].(map[string]any)
	leadGroup, _ := grp["id"].(string)
	if !strings.HasPrefix(leadGroup, "grp_") {
		t.Errorf("group id %q", leadGroup)
	}
	want := map[string]any{"status": "done", "reply": map[string]any{"text": "echo: say hi", "model": "scripted-1"}, "provider": "scripted",
		"model": "scripted-1", "mode": "agent", "title": "helper", "group": map[string]any{"id": leadGroup, "name": "lead", "role": "member"},
		"summary": `create_session → desk session ` + helper[:8] + `: "helper", done, reply 12 chars`}
	got := map[string]any{}
	for k := range want {
		got[k] = res[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create_session (-want +got):\n%s", diff)
	}
	actNoKey(t, "create_session", res, "repo", "branch", "groupWarning")
	// The caller founded the group as its head; the new session shows who started it.
	if diff := cmp.Diff(map[string]any{"id": leadGroup, "role": "head"}, read(a)["group"], cmpIgnoreKeys("name", "members")); diff != "" {
		t.Errorf("caller group (-want +got):\n%s", diff)
	}
	hv := listed(helper)
	if hv == nil {
		t.Fatalf("helper not listed")
	}
	if diff := cmp.Diff(map[string]any{"relay": "desk", "session": a, "title": "lead"}, hv["startedBy"]); diff != "" {
		t.Errorf("startedBy (-want +got):\n%s", diff)
	}
	actNoKey(t, "helper", hv, "mayCreateSessions")
	if role := read(helper)["messages"].([]any)[0].(map[string]any)["role"]; role != "agent" {
		t.Errorf("helper's first message role %v", role)
	}

	// Later sessions in this conversation need no card: direct calls work.
	env = f.ok(a, create(map[string]any{"text": "two", "title": "second", "group": "release 2.4", "effort": "high"}))
	if diff := cmp.Diff([]any{map[string]any{"id": g1, "name": "Release 2.4", "role": "member"}, "high"},
		[]any{env["group"], env["effort"]}); diff != "" {
		t.Errorf("second (-want +got):\n%s", diff)
	}
	actNoKey(t, "second", env, "repo", "branch")
	// repo and branch are for providers whose sessions work on a repository (R24.4).
	f.actFail(a, create(map[string]any{"text": "x", "repo": "git@example.com:x.git", "branch": "main"}), CodeInvalidInput)
	env = f.ok(a, create(map[string]any{"text": "three", "group": g1}))
	if diff := cmp.Diff([]any{g1, "three"}, []any{env["group"].(map[string]any)["id"], env["title"]}); diff != "" {
		t.Errorf("group by id, title from text (-want +got):\n%s", diff)
	}
	if id := f.ok(a, create(map[string]any{"text": "four", "group": ""}))["group"].(map[string]any)["id"]; id != leadGroup {
		t.Errorf("an empty group joins %v, want the caller's %s", id, leadGroup)
	}
	// What the agent leaves out follows the caller's session.
	medium := "medium"
	if _, err := f.r.OwnerPatchSession(f.ctx, a, SessionPatch{Effort: &medium}); err != nil {
		t.Fatal(err)
	}
	env = f.ok(a, create(map[string]any{"text": "inherit"}))
	if diff := cmp.Diff([]any{"medium", "scripted-1", "agent"}, []any{env["effort"], env["model"], env["mode"]}); diff != "" {
		t.Errorf("inherited (-want +got):\n%s", diff)
	}
	sub := filepath.Join(folder, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	env = f.ok(a, create(map[string]any{"text": "five", "cwd": sub, "mode": "plan"}))
	if diff := cmp.Diff([]any{"plan", sub}, []any{env["mode"], read(env["session"].(string))["cwd"]}); diff != "" {
		t.Errorf("cwd and mode (-want +got):\n%s", diff)
	}

	// One level (R6.2): a session an agent started cannot start sessions…
	nest := script(actTool(map[string]any{"action": "create_session", "relay": "this", "text": "grandchild", "wait_seconds": 0}))
	env = f.ok(a, create(map[string]any{"text": nest, "title": "nester"}))
	if env["status"] != "done" {
		t.Fatalf("nester: %v", env)
	}
	nester, _ := env["session"].(string)
	inner := f.toolResults(env["message_id"].(string))
	if len(inner) != 1 {
		t.Fatalf("nested create_session: %v", env["reply"])
	}
	actWant(t, "nested create_session", inner[0], CodeForbidden, "No session was created.")
	total := f.actTotal("all")
	// …unless the owner allows it for that conversation.
	yes := true
	if _, err := f.r.OwnerPatchSession(f.ctx, nester, SessionPatch{MayCreateSessions: &yes}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{true, true}, []any{read(nester)["mayCreateSessions"], listed(nester)["mayCreateSessions"]}); diff != "" {
		t.Errorf("mayCreateSessions in read_session, list_sessions (-want +got):\n%s", diff)
	}
	res, card = f.actInTurn(nester, map[string]any{"action": "create_session", "relay": "this", "text": "grandchild",
		"group": "RELEASE 2.4", "wait_seconds": 15}, "allow")
	actWant(t, "create_session by an allowed agent session", res, "")
	actHas(t, "card.lines", strings.Join(card.Lines, "\n"), "Group: Release 2.4 ("+g1+")")
	grand, _ := res["session"].(string)
	if diff := cmp.Diff([]any{map[string]any{"id": g1, "name": "Release 2.4", "role": "member"},
		map[string]any{"relay": "desk", "session": nester, "title": "nester"}, total + 1},
		[]any{res["group"], listed(grand)["startedBy"], f.actTotal("all")}); diff != "" {
		t.Errorf("grandchild (-want +got):\n%s", diff)
	}

	// Four at work (R6.1).
	var busy, busyMsgs []string
	for i := 0; i < 4; i++ {
		env := f.ok(a, create(map[string]any{"text": script(map[string]any{"sleep_ms": 600000}), "title": fmt.Sprintf("busy %d", i), "wait_seconds": 0}))
		busy = append(busy, env["session"].(string))
		busyMsgs = append(busyMsgs, env["message_id"].(string))
	}
	total = f.actTotal("all")
	actWant(t, "a fifth", f.call(a, create(map[string]any{"text": "fifth"})), CodeSessionLimit, "No session was created.")
	if n := f.actTotal("all"); n != total {
		t.Errorf("sessions %d, want %d", n, total)
	}
	// A send to an idle session of the same conversation would make a fifth busy…
	before := f.messages(helper)
	actWant(t, "send to an idle child", f.call(a, map[string]any{"action": "send", "relay": "this", "session": helper, "text": "more", "wait_seconds": 0}),
		CodeSessionLimit, "Nothing was sent.")
	if n := f.messages(helper); n != before {
		t.Errorf("helper messages %d, want %d", n, before)
	}
	// …a prompt to a busy one just queues.
	if st := f.ok(a, map[string]any{"action": "send", "relay": "this", "session": busy[0], "text": "queued", "wait_seconds": 0})["status"]; st != "queued" {
		t.Errorf("send to a busy child: %v", st)
	}
	// When one finishes, the next may start.
	if env = f.ok(a, map[string]any{"action": "stop", "relay": "this", "session": busy[1]}); env["stopRequested"] != true {
		t.Errorf("stop %v", env)
	}
	if st := f.ok(a, map[string]any{"action": "wait", "relay": "this", "session": busy[1], "message_id": busyMsgs[1], "wait_seconds": 15})["status"]; st != "stopped" {
		t.Errorf("stopped status %v", st)
	}
	if st := f.ok(a, create(map[string]any{"text": "fifth", "wait_seconds": 15}))["status"]; st != "done" {
		t.Errorf("fifth %v", st)
	}
	for _, s := range []string{busy[0], busy[2], busy[3]} {
		if _, err := f.r.OwnerStop(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

// R5.2.1: the first create_session asks once per conversation; later ones ask nothing;
// a session the conversation started can be updated without a card (R7.10).
func TestRulesActFirstCreateAsksOncePerConversation(t *testing.T) {
	t.Parallel()
	met := newActMetrics()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, metrics: met})
	actAuto(f)
	a := f.session(NewSession{Title: "orchestrator"})
	other := f.session(NewSession{Title: "other"})
	create := func(text string) map[string]any {
		return actTool(map[string]any{"action": "create_session", "relay": "this", "text": text, "wait_seconds": 10})
	}
	tid := f.prompt(a, script(create("one"), create("two")))
	f.actDecide(a, "create_session", "", "allow")
	res := f.actResults(tid, 2)
	actWant(t, "first create_session", res[0], "")
	actWant(t, "second create_session", res[1], "")
	if got := met.card("asked"); got != 1 {
		t.Fatalf("%v cards asked for two create_session calls, want 1", got)
	}
	// Outside a turn too: no card is needed any more.
	env := f.ok(a, map[string]any{"action": "create_session", "relay": "this", "text": "three", "wait_seconds": 10})
	if env["status"] != "done" {
		t.Fatalf("third create_session %v", env)
	}
	if n := len(f.actChildren(a)); n != 3 {
		t.Fatalf("%d children, want 3", n)
	}
	// Its own child: update_session needs no card.
	f.ok(a, map[string]any{"action": "update_session", "relay": "this", "session": env["session"], "title": "renamed"})
	// Per conversation: another conversation's first create_session still asks.
	f.actFail(other, map[string]any{"action": "create_session", "relay": "this", "text": "x"}, CodeNoActiveTurn)
}

// R3.1–R3.6, R4.3: the envelope, relay naming, unknown and empty arguments,
// wrong types and sizes (relaytest keeps the MCP layer's part: the legacy
// tool name, arguments that are not an object).
func TestRulesActEnvelope(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	a := f.session(NewSession{Title: "caller"})
	b := f.session(NewSession{Title: "target"})

	t.Run("list_relays", func(t *testing.T) {
		env := f.ok(a, map[string]any{"action": "list_relays"})
		actNoKey(t, "list_relays", env, "relay", "ignored")
		relays, _ := env["relays"].([]any)
		if len(relays) != 1 {
			t.Fatalf("relays %v", env["relays"])
		}
		self, _ := relays[0].(map[string]any)
		limits, _ := env["limits"].(map[string]any)
		if diff := cmp.Diff([]any{"list_relays: 1 relay, 1 unlocked", map[string]any{"name": "desk"}, "desk", true, float64(4)},
			[]any{env["summary"], env["self"], self["name"], self["self"], limits["maxActiveSessions"]}); diff != "" {
			t.Errorf("list_relays (-want +got):\n%s", diff)
		}
		if n, _ := limits["maxWaitSeconds"].(float64); n <= 0 {
			t.Errorf("maxWaitSeconds %v", limits["maxWaitSeconds"])
		}
	})

	t.Run("relay names", func(t *testing.T) {
		for _, name := range []string{"this", "This", "desk", "DESK"} {
			env := f.ok(a, map[string]any{"action": "usage", "relay": name})
			if diff := cmp.Diff([]any{"desk", "usage → desk: 1 provider, quotas not tracked"}, []any{env["relay"], env["summary"]}); diff != "" {
				t.Errorf("relay %s (-want +got):\n%s", name, diff)
			}
		}
		for _, args := range []map[string]any{
			{"action": "usage"},
			{"action": "usage", "relay": ""},
			{"action": "usage", "relay": nil},
			{"action": "read_session", "session": b},
		} {
			env := f.actFail(a, args, CodeInvalidInput)
			if diff := cmp.Diff(`relay is required; use "this" for this relay. Nothing was done.`, env["error"]); diff != "" {
				t.Errorf("%v (-want +got):\n%s", args, diff)
			}
		}
		env := f.actFail(a, map[string]any{"action": "read_session", "relay": "build-box", "session": b}, CodeUnknownRelay)
		actHas(t, "error", env["error"], `"build-box"`, "list_relays")
		f.actFail(a, map[string]any{"action": "send", "relay": "desk2", "session": b, "text": "x"}, CodeUnknownRelay)
		if n := f.messages(b); n != 0 {
			t.Errorf("a send to an unknown relay queued something here: %d messages", n)
		}
	})

	t.Run("unknown and malformed action", func(t *testing.T) {
		env := f.actFail(a, map[string]any{"action": "fly", "relay": "this"}, CodeInvalidInput)
		actHas(t, "error", env["error"], `Unknown action "fly"`, "list_relays", "read_session")
		env = f.actFail(a, map[string]any{"relay": "this"}, CodeInvalidInput)
		actHas(t, "error", env["error"], "action is required")
		f.actFail(a, map[string]any{"action": 5, "relay": "this"}, CodeInvalidInput)
		f.actFail(a, map[string]any{"action": "", "relay": "this"}, CodeInvalidInput)
	})

	t.Run("ignored", func(t *testing.T) {
		actNoKey(t, "usage", f.ok(a, map[string]any{"action": "usage", "relay": "this"}), "ignored")
		// 25 unknown arguments in a given order: the first 20 are listed, in that order.
		var sb strings.Builder
		sb.WriteString(`{"action":"list_sessions","relay":"this"`)
		var want []any
		for i := 25; i >= 1; i-- {
			k := fmt.Sprintf("x%02d", i)
			fmt.Fprintf(&sb, `,%q:%d`, k, i)
			if len(want) < 20 {
				want = append(want, k)
			}
		}
		sb.WriteString(`,"limit":1}`)
		env, isErr := f.actRaw(a, sb.String())
		if isErr || env["ok"] != true {
			t.Fatalf("list_sessions: %v", env)
		}
		if diff := cmp.Diff(want, env["ignored"]); diff != "" {
			t.Errorf("ignored (-want +got):\n%s", diff)
		}
		if n := len(env["sessions"].([]any)); n != 1 {
			t.Errorf("list_sessions did not run with its own arguments: %d sessions", n)
		}
	})

	t.Run("empty values are absent", func(t *testing.T) {
		env := f.ok(a, map[string]any{"action": "list_sessions", "relay": "this", "scope": "", "limit": nil,
			"foo": nil, "bar": "", "baz": false, "qux": []any{}})
		actNoKey(t, "list_sessions", env, "ignored")
		if env["summary"] != "list_sessions → desk: 2 sessions (active)" {
			t.Errorf("summary %v", env["summary"])
		}
		env = f.ok(a, map[string]any{"action": "read_session", "relay": "this", "session": b, "last": nil, "x": false})
		actNoKey(t, "read_session", env, "ignored")
		// create_session and update_session do not reject empty unknown arguments (R3.5).
		env = f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "session": "", "foo": nil}, CodeNoActiveTurn)
		actHas(t, "error", env["error"], "No session was created.")
		env = f.ok(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "title": "target",
			"text": "", "foo": []any{}, "thinking_enabled": false})
		if diff := cmp.Diff([]any{}, env["changed"]); diff != "" {
			t.Errorf("changed (-want +got):\n%s", diff)
		}
		actNoKey(t, "update_session", env, "ignored")
		// thinking_enabled false alone is no setting.
		env = f.actFail(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "thinking_enabled": false}, CodeInvalidInput)
		actHas(t, "error", env["error"], "at least one setting", "Nothing was changed.")
	})

	t.Run("R3.5 create_session and update_session", func(t *testing.T) {
		env := f.actFail(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "session": b}, CodeInvalidInput)
		if diff := cmp.Diff("create_session does not take: session. Its arguments: relay, text, provider, model, cwd, repo, branch, mode, effort, title, group, wait_seconds. Nothing was created.", env["error"]); diff != "" {
			t.Errorf("create_session with session (-want +got):\n%s", diff)
		}
		env, isErr := f.actRaw(a, `{"action":"create_session","relay":"this","zeta":1,"text":"hi","alpha":true,"mid":"x"}`)
		if !isErr || env["code"] != CodeInvalidInput {
			t.Errorf("create_session with unknown arguments: %v", env)
		}
		actHas(t, "error", env["error"], "create_session does not take: zeta, alpha, mid. Its arguments: ")
		env = f.actFail(a, map[string]any{"action": "update_session", "relay": "this", "session": b, "text": "x"}, CodeInvalidInput)
		if diff := cmp.Diff("update_session does not take: text. Its arguments: relay, session, model, effort, mode, title, group, cwd, auto_compact_window, thinking_enabled, thinking_display. Nothing was changed.", env["error"]); diff != "" {
			t.Errorf("update_session with text (-want +got):\n%s", diff)
		}
		env, isErr = f.actRaw(a, `{"action":"update_session","relay":"this","session":"`+b+`","title":"new","wait_seconds":3,"provider":"scripted"}`)
		if !isErr || env["code"] != CodeInvalidInput {
			t.Errorf("update_session with unknown arguments: %v", env)
		}
		actHas(t, "error", env["error"], "update_session does not take: wait_seconds, provider. Its arguments: ", "Nothing was changed.")
		// Shapes come before the relay: even an unknown relay answers INVALID_INPUT here.
		f.actFail(a, map[string]any{"action": "create_session", "relay": "build-box", "text": "hi", "session": b}, CodeInvalidInput)
		if n := f.actTotal("all"); n != 2 {
			t.Errorf("sessions: %d, want 2", n)
		}
		if got := f.actStored(b).Title; got != "target" {
			t.Errorf("title changed to %q", got)
		}
	})

	t.Run("wrong types and sizes", func(t *testing.T) {
		before := f.messages(b)
		big := strings.Repeat("x", 1<<20+1)
		tests := []struct {
			args map[string]any
			has  string
		}{
			{map[string]any{"action": "send", "relay": "this", "session": b, "text": 5, "wait_seconds": 0}, "text must be a string"},
			{map[string]any{"action": "send", "relay": "this", "session": b, "text": map[string]any{"a": 1}}, "text"},
			{map[string]any{"action": "send", "relay": "this", "session": b, "text": "hi", "wait_seconds": "soon"}, "wait_seconds"},
			{map[string]any{"action": "read_session", "relay": "this", "session": b, "last": "abc"}, "last must be a whole number"},
			{map[string]any{"action": "read_session", "relay": "this", "session": b, "last": 1000000000}, "last must be between 1 and 50"},
			{map[string]any{"action": "read_session", "relay": "this", "session": b, "last": 2.5}, ""},
			{map[string]any{"action": "read_session", "relay": "this", "session": 12345678}, ""},
			{map[string]any{"action": "send", "relay": "this", "session": b, "text": big, "wait_seconds": 0}, "Nothing was sent."},
			{map[string]any{"action": "create_session", "relay": "this", "text": big}, "No session was created."},
			{map[string]any{"action": "create_session", "relay": "this", "text": 7}, "text must be a string"},
		}
		for _, tt := range tests {
			name := fmt.Sprint(tt.args)
			if len(name) > 200 {
				name = name[:200]
			}
			actWant(t, name, f.call(a, tt.args), CodeInvalidInput, tt.has)
		}
		if n := f.messages(b); n != before {
			t.Errorf("messages of the target: %d, want %d", n, before)
		}
		if n := f.actTotal("all"); n != 2 {
			t.Errorf("sessions: %d, want 2", n)
		}
		// Exactly 1 MiB is allowed.
		env := f.ok(a, map[string]any{"action": "send", "relay": "this", "session": b, "text": strings.Repeat("y", 1<<20), "wait_seconds": 0})
		if id, _ := env["message_id"].(string); id == "" {
			t.Errorf("send of 1 MiB: %v", env["summary"])
		}
	})
}
