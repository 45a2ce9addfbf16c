package web_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/store"
)

// The console's parts the feature page describes (issue 21 items 13–16):
// every change live on an open page, sessions grouped as the sidebar
// groups them, paired relays' asks in the Inbox, and @ offering the paired
// relays' names in the message box. Each test drives headless Chromium
// against real relays on loopback.

// signIn opens path on r's console and signs in with the owner token.
func (b *browser) signIn(r *relaytest.Relay, path, visible string) {
	b.t.Helper()
	b.do("sign in at "+path, chromedp.Navigate(r.URL+path), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", relaytest.OwnerToken), chromedp.Submit("#token"), chromedp.WaitVisible(visible))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
}

// open navigates to path and waits for the stream, so what happens next
// can only reach the page live; __noReload tells a reload apart.
func (b *browser) open(r *relaytest.Relay, path, visible string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(r.URL+path), chromedp.WaitVisible(visible))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	eval[bool](b, `window.__noReload = true`)
}

func (b *browser) notReloaded() {
	b.t.Helper()
	if !eval[bool](b, `window.__noReload === true`) {
		b.t.Fatalf("the page was reloaded; the change must arrive live")
	}
}

// runTool runs one relay_tool call as s in a turn of s, allowing any card
// the call asks meanwhile, and returns its result.
func runTool(t *testing.T, r *relaytest.Relay, s relaytest.Session, tool map[string]any) map[string]any {
	t.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	mid := r.Message(s.ID, relaytest.Script(map[string]any{"tool": tool}))
	var tr *store.Turn
	if !testwait.Poll(60*time.Second, 50*time.Millisecond, func() bool {
		tr = r.Turn(mid)
		if tr.Status == "done" || tr.Status == "error" || tr.Status == "stopped" {
			return true
		}
		for _, c := range r.Cards() {
			if c["session"] == s.ID {
				r.Decide(c["id"].(string), "allow")
			}
		}
		return false
	}) {
		t.Fatalf("turn %s of %s still %s after 60 s", mid, s.ID, tr.Status)
	}
	if tr.Status != "done" {
		t.Fatalf("turn of %s ended %s: %s", s.ID, tr.Status, tr.Error)
	}
	res := relaytest.ToolResults(tr.Reply)
	if len(res) != 1 {
		t.Fatalf("the turn's reply holds %d tool results, want 1: %q", len(res), tr.Reply)
	}
	return res[0]
}

// mustOK fails the test unless res is a successful tool result.
func mustOK(t *testing.T, what string, res map[string]any) map[string]any {
	t.Helper()
	if res["ok"] != true {
		t.Fatalf("%s: %v", what, res)
	}
	return res
}

// waitIdle waits until session sid on r has no turn running or queued.
func waitIdle(t *testing.T, r *relaytest.Relay, sid string) {
	t.Helper()
	relaytest.Eventually(t, 20*time.Second, func() bool { return r.Get(sid)["state"] == "idle" }, "session %s idle", sid)
}

// pair pairs from with to (a peer token made on to), as the owner of from.
func pair(t *testing.T, from, to *relaytest.Relay) {
	t.Helper()
	var tok map[string]any
	if st := to.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	var p map[string]any
	if st := from.Owner("POST", "/api/v1/relays", map[string]any{"url": to.URL, "token": tok["token"]}, &p); st != http.StatusCreated {
		t.Fatalf("pair: %d %v", st, p)
	}
}

// shotDir is where the screenshots the docs show go: RELAY_SCREENSHOTS
// (docs/screenshots when they are made anew), else the test's artifacts.
func shotDir(t *testing.T) string {
	dir := os.Getenv("RELAY_SCREENSHOTS")
	if dir == "" {
		return artifacts(t)
	}
	dir, _ = filepath.Abs(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshots dir: %v", err)
	}
	return dir
}

func groupsOf(t *testing.T, r *relaytest.Relay) map[string]map[string]any {
	t.Helper()
	var out struct {
		Groups []map[string]any `json:"groups"`
	}
	if st := r.Owner("GET", "/api/v1/groups", nil, &out); st != http.StatusOK {
		t.Fatalf("GET /api/v1/groups: %d", st)
	}
	m := map[string]map[string]any{}
	for _, g := range out.Groups {
		m[g["id"].(string)] = g
	}
	return m
}

func groupID(t *testing.T, r *relaytest.Relay, sid string) string {
	t.Helper()
	g, _ := r.Get(sid)["group"].(map[string]any)
	id, _ := g["id"].(string)
	if id == "" {
		t.Fatalf("session %s is in no group: %v", sid, r.Get(sid))
	}
	return id
}

// TestConsoleLiveChanges (R19.6, issue 21 item 13): a change made elsewhere
// shows at once on an open page without a reload: an agent's update_session
// (title, group), its subscribe and unsubscribe (the `watched` badge), a
// schedule set into the session and cancelled (the ⏰ chip), and groups the
// owner makes, renames and dissolves (an empty one is announced by no session).
func TestConsoleLiveChanges(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	b.collectConsole()
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	child := mustOK(t, "create_session", runTool(t, r, orch, map[string]any{"action": "create_session", "text": "hello", "title": "child"}))
	kid, _ := child["session"].(string)
	watcher := r.NewSession(map[string]any{"title": "watcher"})
	// The watcher's first subscription asks the owner once; the later ones do not.
	mustOK(t, "first subscribe", runTool(t, r, watcher, map[string]any{"action": "subscribe", "sessions": []any{orch.ID}}))
	waitIdle(t, r, kid)
	waitIdle(t, r, orch.ID)

	// The child's own page hears only its own session's changes.
	b.signIn(r, "/s/"+kid, "#live-msgs")
	b.open(r, "/s/"+kid, "#live-msgs")

	// ---- update_session by the agent that started it -------------------------
	mustOK(t, "update_session", runTool(t, r, orch, map[string]any{"action": "update_session", "session": kid, "title": "child, renamed by its agent", "group": "Release 2.4"}))
	b.waitJS("the new title", `document.querySelector("#live-head h1").textContent === "child, renamed by its agent"`, 5*time.Second)
	b.waitJS("the new group", `document.querySelector("#live-head").innerText.includes("group: Release 2.4")`, 5*time.Second)

	// ---- subscribe / unsubscribe: the watched badge ---------------------------
	if eval[bool](b, `document.querySelector("#live-head .badges").innerText.includes("watched")`) {
		t.Fatalf("the child shows watched before anyone watches it")
	}
	sub := mustOK(t, "subscribe", runTool(t, r, watcher, map[string]any{"action": "subscribe", "sessions": []any{kid}}))
	subID := subscriptionID(t, sub)
	b.waitJS("the watched badge", `document.querySelector("#live-head .badges").innerText.includes("watched")`, 5*time.Second)
	mustOK(t, "unsubscribe", runTool(t, r, watcher, map[string]any{"action": "unsubscribe", "subscription_id": subID}))
	b.waitJS("the watched badge to go", `!document.querySelector("#live-head .badges").innerText.includes("watched")`, 5*time.Second)

	// ---- a schedule into it, then cancelled by the owner elsewhere --------------
	sch := mustOK(t, "schedule", runTool(t, r, watcher, map[string]any{"action": "schedule", "session": kid, "title": "hourly look", "text": "look at the build", "every_minutes": 60}))
	schID, _ := sch["schedule_id"].(string)
	b.waitJS("the ⏰ chip", `!!document.querySelector("#clocks") && document.querySelector("#clocks").innerText.includes("1 schedule")`, 5*time.Second)
	if st := r.Owner("DELETE", "/api/v1/schedules/"+schID, nil, nil); st != http.StatusOK {
		t.Fatalf("cancel the schedule: %d", st)
	}
	b.waitJS("the ⏰ chip to go", `!document.querySelector("#clocks")`, 5*time.Second)
	b.notReloaded()

	// ---- groups the owner makes, renames and dissolves: the sessions list -----
	b.open(r, "/", "#live-sessions")
	var g map[string]any
	if st := r.Owner("POST", "/api/v1/groups", map[string]any{"name": "Empty shelf"}, &g); st != http.StatusCreated {
		t.Fatalf("POST /groups: %d %v", st, g)
	}
	gid, _ := g["id"].(string)
	row := "#g-" + gid
	b.waitJS("the new empty group", `!!document.querySelector("`+row+`") && document.querySelector("`+row+`").innerText.includes("group · empty")`, 5*time.Second)
	if st := r.Owner("PATCH", "/api/v1/groups/"+gid, map[string]any{"name": "Full shelf"}, nil); st != http.StatusOK {
		t.Fatalf("PATCH /groups: %d", st)
	}
	b.waitJS("the new name", `document.querySelector("`+row+` .gname").textContent === "Full shelf"`, 5*time.Second)
	if st := r.Owner("DELETE", "/api/v1/groups/"+gid, nil, nil); st != http.StatusOK {
		t.Fatalf("DELETE /groups: %d", st)
	}
	b.waitJS("the dissolved group to go", `!document.querySelector("`+row+`")`, 5*time.Second)
	b.notReloaded()
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// TestConsoleGroupedSessions (R19.2, issue 21 item 14): the sessions list
// groups sessions as the feature page's sidebar does: a group's members under
// its head conversation (a group nobody named carries the head's title), an
// owner's group an agent emptied as `group · empty`, sessions in no group on
// their own; each group's menu renames and dissolves it.
func TestConsoleGroupedSessions(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	b.collectConsole()
	head := r.NewSession(map[string]any{"title": "Release train"})
	c1 := mustOK(t, "create_session", runTool(t, r, head, map[string]any{"action": "create_session", "text": "hello", "title": "Build the release notes"}))
	kid1, _ := c1["session"].(string)
	c2 := mustOK(t, "create_session", runTool(t, r, head, map[string]any{"action": "create_session", "text": "hello", "title": "Check the changelog"}))
	kid2, _ := c2["session"].(string)
	loner := r.NewSession(map[string]any{"title": "Loner"})
	train := groupID(t, r, kid1)
	if groupID(t, r, head.ID) != train || groupID(t, r, kid2) != train {
		t.Fatalf("the head and its sessions are not in one group: %v / %v", r.Get(head.ID)["group"], r.Get(kid2)["group"])
	}
	// Two groups of the owner's: the agent moves a session into "Hotfix" and
	// on into "Release 2.4", so "Hotfix" is emptied and stays.
	var hot, rel map[string]any
	r.Owner("POST", "/api/v1/groups", map[string]any{"name": "Hotfix"}, &hot)
	r.Owner("POST", "/api/v1/groups", map[string]any{"name": "Release 2.4"}, &rel)
	hotID, relID := hot["id"].(string), rel["id"].(string)
	mustOK(t, "update_session into Hotfix", runTool(t, r, head, map[string]any{"action": "update_session", "session": kid2, "group": "Hotfix"}))
	mustOK(t, "update_session into Release 2.4", runTool(t, r, head, map[string]any{"action": "update_session", "session": kid2, "group": "Release 2.4"}))
	if gs := groupsOf(t, r); gs[hotID] == nil || gs[hotID]["memberCount"] != float64(0) {
		t.Fatalf("the emptied owner's group: %v", gs[hotID])
	}
	for _, s := range []string{head.ID, kid1, kid2} {
		waitIdle(t, r, s)
	}

	b.signIn(r, "/", "#live-sessions")
	// The list's rows in order: group head lines (g-), session rows (s-), with their role.
	rows := func() []string {
		return eval[[]string](b, `Array.from(document.querySelectorAll("#live-sessions > li")).map(function(li){
			var k = li.classList.contains("ghead") ? "group" : li.classList.contains("head") ? "head" : li.classList.contains("member") ? "member" : "row";
			return k + " " + li.id.replace(/^[gs]-/, "");})`)
	}
	got := rows()
	index := func(want string) int {
		for i, x := range got {
			if x == want {
				return i
			}
		}
		t.Fatalf("the list lacks %q: %v", want, got)
		return -1
	}
	// The unnamed group: its line, its head conversation, then its member.
	if i := index("group " + train); got[i+1] != "head "+head.ID || got[i+2] != "member "+kid1 {
		t.Errorf("the head's group is not its head then its member: %v", got)
	}
	if name := b.text("#g-" + train + " .gname"); name != "Release train" {
		t.Errorf("the group nobody named reads %q, want its head's title", name)
	}
	// The owner's group with the moved session (no head): its member under its line.
	if i := index("group " + relID); got[i+1] != "member "+kid2 {
		t.Errorf("Release 2.4 is not followed by its member: %v", got)
	}
	// The emptied one: its line says so, and no member follows it.
	if i := index("group " + hotID); i+1 < len(got) && strings.HasPrefix(got[i+1], "member ") {
		t.Errorf("the emptied group has a member row: %v", got)
	}
	if line := b.text("#g-" + hotID); !strings.Contains(line, "Hotfix") || !strings.Contains(line, "group · empty") {
		t.Errorf("the emptied group's line reads %q, want Hotfix · group · empty", line)
	}
	index("row " + loner.ID)
	if n := strings.Count(strings.Join(got, "|"), " "+head.ID); n != 1 {
		t.Errorf("the head conversation is listed %d times: %v", n, got)
	}

	// Screenshots: the grouped list at 1280 and 360 px.
	dir := shotDir(t)
	shots := []string{b.screenshot(dir, "console-groups-1280.png", 1280, 900), b.screenshot(dir, "console-groups-360.png", 360, 900)}
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the grouped list is %d px wide (scrolls sideways)", w)
	}
	// The menu opened at 360 px stays on the screen.
	b.do("open a menu at 360 px", chromedp.Click("#g-"+hotID+" .gmenu summary"), chromedp.WaitVisible("#g-"+hotID+" .gmenu input[name=name]"))
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px an open group menu makes the page %d px wide", w)
	}
	if right := eval[float64](b, `document.querySelector("#g-`+hotID+` .gmenu-body").getBoundingClientRect().left`); right < 0 {
		t.Errorf("at 360 px the open group menu starts %.0f px left of the screen", right)
	}
	shots = append(shots, b.screenshot(artifacts(t), "console-groups-menu-360.png", 360, 900))
	b.do("close the menu", chromedp.Click("#g-"+hotID+" .gmenu summary"))
	b.do("desktop", chromedp.EmulateViewport(1280, 900))

	// ---- the menu: rename the emptied group -----------------------------------
	menu := "#g-" + hotID + " .gmenu"
	b.do("open Hotfix's menu", chromedp.Click(menu+" summary"), chromedp.WaitVisible(menu+" input[name=name]"))
	if v := eval[string](b, `document.querySelector("`+menu+` input[name=name]").value`); v != "Hotfix" {
		t.Errorf("the rename field starts with %q, want the group's name", v)
	}
	b.do("rename", chromedp.Clear(menu+" input[name=name]"), chromedp.SendKeys(menu+" input[name=name]", "Hotfix 2.4.1"),
		chromedp.Click(menu+" button[type=submit]"))
	b.waitJS("the new name", `document.querySelector("#g-`+hotID+` .gname").textContent === "Hotfix 2.4.1"`, 5*time.Second)
	if gs := groupsOf(t, r); gs[hotID]["name"] != "Hotfix 2.4.1" {
		t.Errorf("after Rename the API says %v", gs[hotID])
	}

	// ---- the menu: dissolve the head's group (after a confirm) ----------------
	eval[bool](b, `(function(){window.__asked=""; window.confirm=function(m){window.__asked=m; return true}; return true})()`)
	menu = "#g-" + train + " .gmenu"
	b.do("dissolve", chromedp.Click(menu+" summary"), chromedp.WaitVisible(menu+" button.deny"), chromedp.Click(menu+" button.deny"))
	b.waitJS("the group to go", `!document.querySelector("#g-`+train+`")`, 5*time.Second)
	if asked := eval[string](b, `window.__asked`); !strings.Contains(asked, "Release train") {
		t.Errorf("Dissolve asked %q, want a confirm naming the group", asked)
	}
	if gs := groupsOf(t, r); gs[train] != nil {
		t.Errorf("after Dissolve the API still lists %v", gs[train])
	}
	b.waitJS("its sessions on their own", `document.querySelector("#s-`+kid1+`").classList.contains("member") === false`, 5*time.Second)
	if r.Get(kid1)["group"] != nil || r.Get(head.ID)["group"] != nil {
		t.Errorf("after Dissolve the members keep a group: %v / %v", r.Get(kid1)["group"], r.Get(head.ID)["group"])
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("screenshots: %v", shots)
}

// TestConsoleInboxPairedAsks (R10.3, R19.4, issue 21 item 15): the Inbox
// lists the asks this relay's agents made on a paired relay besides its own,
// marked with that relay, live; answering one there reaches the asking
// agent with via naming the relay it was answered on (this one); one
// answered in the paired relay's own inbox leaves this Inbox at once.
func TestConsoleInboxPairedAsks(t *testing.T) {
	b := newBrowser(t)
	fast := func(c *config.Config) {
		c.Timing.PeerPoll, c.Timing.AskPoll = 200*time.Millisecond, 200*time.Millisecond
	}
	desk := relaytest.Start(t, relaytest.Options{Config: fast})
	bravo := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pair(t, desk, bravo)
	target := bravo.NewSession(map[string]any{"title": "staging on bravo"})
	asker := desk.NewSession(map[string]any{"title": "release planner"})
	local := desk.NewSession(map[string]any{"title": "local asker"})
	b.collectConsole()

	b.signIn(desk, "/inbox", "#live-inbox")
	b.open(desk, "/inbox", "#live-inbox")
	own := mustOK(t, "ask", runTool(t, desk, local, map[string]any{"action": "ask", "question": "Ship today?", "options": []any{"yes", "no"}}))
	ownID := own["question_id"].(string)
	// The script's text names bravo: the owner's message unlocks it.
	far := mustOK(t, "ask on bravo", runTool(t, desk, asker, map[string]any{"action": "ask", "relay": "bravo", "session": target.ID,
		"question": "Deploy bravo's staging now?", "options": []any{"deploy", "wait"}, "recommendation": "deploy"}))
	farID := far["question_id"].(string)
	b.waitJS("both asks", `!!document.querySelector("#a-`+ownID+`") && !!document.querySelector("#a-`+farID+`")`, 5*time.Second)
	card := b.text("#a-" + farID)
	for _, want := range []string{"on bravo", "staging on bravo", "release planner", "Deploy bravo's staging now?", "Recommended: deploy"} {
		if !strings.Contains(card, want) {
			t.Errorf("the paired relay's ask reads %q, lacking %q", card, want)
		}
	}
	if strings.Contains(b.text("#a-"+ownID), "on bravo") {
		t.Errorf("this relay's own ask is marked as bravo's: %q", b.text("#a-"+ownID))
	}
	if nav := b.text("#live-nav"); !strings.Contains(nav, "Inbox 2") {
		t.Errorf("the navigation counts %q, want Inbox 2", nav)
	}
	dir := shotDir(t)
	shots := []string{b.screenshot(dir, "console-inbox-1280.png", 1280, 900), b.screenshot(dir, "console-inbox-360.png", 360, 900)}
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the Inbox is %d px wide (scrolls sideways)", w)
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))

	// ---- answered here, kept there: the agent learns it, via desk ---------------
	sel := "#a-" + farID
	b.do("answer bravo's ask", chromedp.Click(sel+` input[value="deploy"]`), chromedp.SendKeys(sel+" textarea", "deploy after lunch"),
		chromedp.Click(sel+` button[type=submit]`))
	b.waitJS("the answered ask to go", `!document.querySelector("`+sel+`")`, 5*time.Second)
	var inbox struct {
		Asks []map[string]any `json:"asks"`
	}
	bravo.Owner("GET", "/api/v1/inbox", nil, &inbox)
	for _, a := range inbox.Asks {
		if a["id"] == farID {
			t.Errorf("bravo's inbox still holds the ask answered on desk: %v", a)
		}
	}
	relaytest.Eventually(t, 15*time.Second, func() bool {
		for _, e := range desk.EventTexts(asker.ID) {
			if strings.Contains(e, "question_answered "+farID) && strings.Contains(e, "deploy after lunch") && strings.Contains(e, "via desk") {
				return true
			}
		}
		return false
	}, "question_answered %s via desk in the asking conversation (events %v)", farID, desk.EventTexts(asker.ID))

	// ---- answered in bravo's own inbox: it leaves desk's at once ----------------
	next := mustOK(t, "second ask on bravo", runTool(t, desk, asker, map[string]any{"action": "ask", "relay": "bravo", "session": target.ID, "question": "Roll back bravo?"}))
	nextID := next["question_id"].(string)
	b.waitJS("the second ask", `!!document.querySelector("#a-`+nextID+`")`, 5*time.Second)
	if st := bravo.Owner("POST", "/api/v1/inbox/"+nextID, map[string]any{"answer": "no"}, nil); st != http.StatusOK {
		t.Fatalf("answer on bravo: %d", st)
	}
	b.waitJS("the ask answered on bravo to go", `!document.querySelector("#a-`+nextID+`")`, 10*time.Second)
	relaytest.Eventually(t, 15*time.Second, func() bool {
		for _, e := range desk.EventTexts(asker.ID) {
			if strings.Contains(e, "question_answered "+nextID) && strings.Contains(e, "via bravo") {
				return true
			}
		}
		return false
	}, "question_answered %s via bravo", nextID)
	if !eval[bool](b, `!!document.querySelector("#a-`+ownID+`")`) {
		t.Errorf("this relay's own ask left the Inbox")
	}
	b.notReloaded()
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("screenshots: %v", shots)
}

// TestConsoleMentionRelays (R4.4, R19.3, issue 21 item 16): typing @ in the
// message box offers the paired relays' names, narrowed as one types; the
// keyboard (arrows, Enter, Escape) and a click choose one, and the message
// sent with the inserted mentions unlocks those relays in the conversation.
func TestConsoleMentionRelays(t *testing.T) {
	b := newBrowser(t)
	desk := relaytest.Start(t, relaytest.Options{})
	bravo := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pair(t, desk, bravo)
	for _, name := range []string{"build-box", "charlie"} {
		// Offline pairings (nothing listens there), named by the owner.
		if st := desk.Owner("POST", "/api/v1/relays", map[string]any{"url": "http://127.0.0.1:1", "token": "rpt_" + name, "name": name}, nil); st != http.StatusCreated {
			t.Fatalf("pair %s: %d", name, st)
		}
	}
	s := desk.NewSession(map[string]any{"title": "planner"})
	b.collectConsole()
	b.signIn(desk, "/s/"+s.ID, "#msg")

	options := func() string {
		return strings.Join(eval[[]string](b, `(function(){var l=document.querySelector("#mention-list");
			if (!l || l.hidden) return [];
			return Array.from(l.querySelectorAll("[role=option]")).map(function(o){return o.textContent + (o.getAttribute("aria-selected")==="true" ? "*" : "")})})()`), ",")
	}
	b.do("type @", chromedp.Click("#msg"), chromedp.SendKeys("#msg", "Please ask @"))
	b.waitJS("the relay names", `!!document.querySelector("#mention-list") && !document.querySelector("#mention-list").hidden`, 5*time.Second)
	if got := options(); got != "bravo*,build-box,charlie" {
		t.Errorf("@ offers %q, want the three paired relays, the first chosen", got)
	}
	shot := b.screenshot(artifacts(t), "console-mention-1280.png", 1280, 900)
	if v := eval[string](b, `document.querySelector("#msg").getAttribute("aria-expanded")`); v != "true" {
		t.Errorf("the box's aria-expanded is %q while the names show", v)
	}
	b.do("narrow", chromedp.SendKeys("#msg", "b"))
	if got := options(); got != "bravo*,build-box" {
		t.Errorf("@b offers %q", got)
	}
	b.do("arrow down", chromedp.SendKeys("#msg", kb.ArrowDown))
	if got := options(); got != "bravo,build-box*" {
		t.Errorf("after ArrowDown: %q", got)
	}
	b.do("Escape", chromedp.SendKeys("#msg", kb.Escape))
	if got := options(); got != "" {
		t.Errorf("after Escape the names still show: %q", got)
	}
	if v := eval[string](b, `document.querySelector("#msg").value`); v != "Please ask @b" {
		t.Errorf("Escape changed the text to %q", v)
	}
	b.do("type on", chromedp.SendKeys("#msg", "r"))
	if got := options(); got != "bravo*" {
		t.Errorf("@br offers %q", got)
	}
	b.do("Enter", chromedp.SendKeys("#msg", kb.Enter))
	if v := eval[string](b, `document.querySelector("#msg").value`); v != "Please ask @bravo " {
		t.Errorf("Enter made the text %q, want the mention inserted", v)
	}
	if got := options(); got != "" {
		t.Errorf("after choosing, the names still show: %q", got)
	}
	b.do("type more", chromedp.SendKeys("#msg", "and @bu"))
	b.waitJS("build-box offered", `!document.querySelector("#mention-list").hidden`, 5*time.Second)
	b.do("click build-box", chromedp.Click(`#mention-list [role=option]`))
	if v := eval[string](b, `document.querySelector("#msg").value`); v != "Please ask @bravo and @build-box " {
		t.Errorf("the click made the text %q", v)
	}
	if f := eval[string](b, `document.activeElement ? document.activeElement.id : ""`); f != "msg" {
		t.Errorf("after the click the focus is on %q, want the message box", f)
	}
	// No @ after a word (an e-mail address): nothing is offered.
	b.do("an e-mail address", chromedp.SendKeys("#msg", "to ops@b"))
	if got := options(); got != "" {
		t.Errorf("an e-mail address offers %q", got)
	}
	b.do("send", chromedp.Click(`#composer button[type=submit]`))
	b.waitJS("the reply", `document.querySelector("#live-msgs").innerText.includes("echo: Please ask @bravo and @build-box to ops@b")`, 10*time.Second)
	waitIdle(t, desk, s.ID)

	// The mentions unlocked bravo and build-box in the conversation; charlie stays locked.
	res := mustOK(t, "list_relays", runTool(t, desk, s, map[string]any{"action": "list_relays", "relay": nil}))
	unlocked := map[string]any{}
	list, _ := res["relays"].([]any)
	for _, x := range list {
		m := x.(map[string]any)
		unlocked[fmt.Sprint(m["name"])] = m["unlocked"]
	}
	if unlocked["bravo"] != true || unlocked["build-box"] != true || unlocked["charlie"] != false {
		t.Errorf("after the message, unlocked: %v (list_relays %v)", unlocked, res)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("screenshot: %s", shot)
}
