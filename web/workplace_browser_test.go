package web_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/store"
)

// The console as the owner's workplace (SPEC §23): the sessions list beside
// the open conversation, one column on a phone, the settings as the seed
// names them, and the badge of a session a paired relay's agent started.
// Each test drives headless Chromium against a real relay on loopback.

// beside reports whether the sessions list (#side) is shown to the left of
// the page (#main), side by side.
const besideJS = `(function(){var s=document.getElementById("side"), m=document.getElementById("main");
	if(!s||!m||getComputedStyle(s).display==="none") return false;
	var a=s.getBoundingClientRect(), b=m.getBoundingClientRect();
	return a.width>0 && a.right<=b.left+1 && a.top<b.bottom && b.top<a.bottom;})()`

// noSidewaysJS: nothing on the page scrolls sideways.
const noSidewaysJS = `document.documentElement.scrollWidth <= window.innerWidth`

// TestConsoleListBesideConversationR23_1: at 1280 px a session's page
// shows the sessions list beside its conversation, the open session marked,
// each row with a one-line preview of its last message; opening another
// session from the list keeps the list; another session's change reaches
// the list live. At 360 px one column: the list hidden on the
// conversation's page, which links back to it; nothing scrolls sideways,
// not even with a long unbroken title and a long line in a message.
func TestConsoleListBesideConversationR23_1(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	b.collectConsole()
	one := r.NewSession(map[string]any{"title": "release notes"})
	two := r.NewSession(map[string]any{"title": "changelog"})
	long := r.NewSession(map[string]any{"title": strings.Repeat("unbroken", 20)})
	r.Message(one.ID, "hello\nfrom the owner")
	r.Message(long.ID, "a line "+strings.Repeat("x", 400))
	waitIdle(t, r, one.ID)
	waitIdle(t, r, long.ID)

	b.signIn(r, "/s/"+one.ID, "#live-msgs")
	b.open(r, "/s/"+one.ID[:8], "#live-msgs") // a page's address may name its session by a prefix
	if !eval[bool](b, besideJS) {
		t.Fatalf("at 1280 px the sessions list is not beside the conversation")
	}
	if cur := eval[string](b, `(document.querySelector("#side [aria-current=page]")||{}).textContent||""`); cur != "release notes" {
		t.Errorf("the open session marked in the list: %q, want release notes", cur)
	}
	if pv := b.text("#side #s-" + one.ID + " .pv"); pv != "echo: hello from the owner" {
		t.Errorf("the row's preview reads %q, want the reply's one line", pv)
	}
	if n := eval[int](b, `document.querySelectorAll("#side #s-`+two.ID+`, #side #s-`+long.ID+`").length`); n != 2 {
		t.Errorf("the list beside the conversation shows %d of the other 2 sessions", n)
	}

	// Another session's reply reaches the list beside, live.
	r.Message(two.ID, "ping")
	b.waitJS("the other session's preview", `(document.querySelector("#side #s-`+two.ID+` .pv")||{}).textContent === "echo: ping"`, 10*time.Second)
	b.notReloaded()
	// Once more, with only the list to refresh: the open session stays marked.
	r.Message(two.ID, "pong")
	b.waitJS("the other session's next preview", `(document.querySelector("#side #s-`+two.ID+` .pv")||{}).textContent === "echo: pong"`, 10*time.Second)
	if cur := eval[string](b, `(document.querySelector("#side [aria-current=page]")||{}).textContent||""`); cur != "release notes" {
		t.Errorf("after the list's live refresh the open session marked: %q, want release notes", cur)
	}

	// Opening another session from the list keeps the list.
	b.do("open changelog", chromedp.Click(`#side #s-`+two.ID+` a.stitle`))
	b.waitJS("changelog's page", `document.body.dataset.session === "`+two.ID+`"`, 10*time.Second)
	if !eval[bool](b, besideJS) {
		t.Errorf("after opening a session from the list, the list is not beside it")
	}

	// "New session" beside a conversation opens the form on the list's page.
	b.do("New session", chromedp.Click(`#side .newlink`))
	b.waitJS("the New session form, open", `document.body.dataset.page === "sessions" && !!document.getElementById("new-session") && document.getElementById("new-session").open`, 10*time.Second)

	// ---- 360 px: one column, a way back, nothing sideways ---------------------
	for _, id := range []string{long.ID, one.ID} {
		b.do("phone", chromedp.EmulateViewport(360, 740), chromedp.Navigate(r.URL+"/s/"+id), chromedp.WaitVisible("#live-msgs"))
		if !eval[bool](b, noSidewaysJS) {
			t.Errorf("at 360 px /s/%s is %d px wide (scrolls sideways)", id, eval[int](b, `document.documentElement.scrollWidth`))
		}
		if eval[bool](b, besideJS) {
			t.Errorf("at 360 px the list stands beside the conversation")
		}
	}
	b.do("back to the list", chromedp.Click(`.back a`))
	b.waitJS("the list", `document.body.dataset.page === "sessions" && !!document.querySelector("#s-`+one.ID+` .pv")`, 10*time.Second)
	if !eval[bool](b, noSidewaysJS) {
		t.Errorf("at 360 px the list is %d px wide (scrolls sideways)", eval[int](b, `document.documentElement.scrollWidth`))
	}
	if eval[bool](b, `getComputedStyle(document.getElementById("side")).display === "none"`) {
		t.Errorf("at 360 px the sessions page hides its list")
	}
	workplaceShots(t, b, r, long.ID)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// workplaceShots takes the README's screenshots of the workplace, a
// conversation beside the list at 1280 px and alone at 360 px
// (RELAY_SCREENSHOTS=docs writes them there); nothing scrolls sideways.
func workplaceShots(t *testing.T, b *browser, r *relaytest.Relay, archive string) {
	t.Helper()
	r.Owner("POST", "/api/v1/sessions/"+archive+"/archive", nil, nil)
	s := r.NewSession(map[string]any{"title": "Release notes v2.3"})
	ctx := context.Background()
	for i, text := range []string{
		"Draft the release notes for v2.3 from the pull requests merged since v2.2.",
		"Here is a draft:\n\n- The console keeps the sessions list beside the conversation.\n- Settings are named as in the app.\n- Faster session lists: each row reads one field for its preview.\n\nShall I add the upgrade notes?",
	} {
		role := []string{"user", "assistant"}[i]
		if err := r.App.Store().AppendMessage(ctx, s.ID, &store.Message{ID: store.NewID(16), Role: role, Text: text, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	r.Message(s.ID, "Yes, add the upgrade notes.")
	waitIdle(t, r, s.ID)
	dir := shotDir(t)
	b.do("the conversation", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.URL+"/s/"+s.ID), chromedp.WaitVisible("#live-msgs"))
	shots := []string{b.screenshot(dir, "console-1280.png", 1280, 800), b.screenshot(dir, "console-360.png", 360, 740)}
	if !eval[bool](b, noSidewaysJS) {
		t.Errorf("at 360 px the conversation scrolls sideways")
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))
	t.Logf("screenshots: %v", shots)
}

// labelIn is the JS that finds the control labelled exactly text and
// returns the legends of the fieldsets around it, innermost first ("" when
// no such label).
func labelIn(text string) string {
	return `(function(){var l=Array.from(document.querySelectorAll("label")).find(function(l){return l.textContent.trim()===` +
		"`" + text + "`" + `});
	if(!l||!l.control) return "";
	var out=[], f=l.closest("fieldset");
	while(f){out.push(f.querySelector("legend").textContent.trim()); f=f.parentElement.closest("fieldset");}
	return out.join(" < ");})()`
}

// TestConsoleSettingsAsTheSeedR23_11: the settings carry the seed's labels
// in its places — "Longest wait per tool call" in minutes under Relays →
// Agent sessions, "Max turn duration" under General, "Accept prompts from
// other relays' agents" under Relays — and the wait typed in minutes is
// saved in seconds.
func TestConsoleSettingsAsTheSeedR23_11(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	b.collectConsole()
	b.signIn(r, "/settings", "#settings-form")
	for text, want := range map[string]string{
		"Longest wait per tool call":               "Agent sessions < Relays",
		"Max turn duration":                        "General",
		"Accept prompts from other relays' agents": "Relays",
	} {
		if got := eval[string](b, labelIn(text)); got != want {
			t.Errorf("the control labelled %q is in %q, want %q", text, got, want)
		}
	}
	var st map[string]any
	r.Owner("GET", "/api/v1/settings", nil, &st)
	shown := eval[string](b, `document.getElementById("set-wait").value`)
	if want := st["max_wait_seconds"].(float64) / 60; shown != strconv.FormatFloat(want, 'f', -1, 64) {
		t.Errorf("the wait shows %q minutes; the relay's is %v s", shown, st["max_wait_seconds"])
	}
	if mm := eval[string](b, `document.getElementById("set-wait").min + "-" + document.getElementById("set-wait").max`); mm != "2-60" {
		t.Errorf("the wait's bounds: %s minutes, want 2-60", mm)
	}
	b.do("wait 7 minutes", chromedp.Clear("#set-wait"), chromedp.SendKeys("#set-wait", "7"), chromedp.Click(`#settings-form button[type=submit]`))
	relaytest.Eventually(t, 5*time.Second, func() bool {
		r.Owner("GET", "/api/v1/settings", nil, &st)
		return st["max_wait_seconds"] == float64(420)
	}, "max_wait_seconds 420 after saving 7 minutes")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// TestConsoleViaRemoteAgentR23_9: a session an agent on a paired relay
// started shows `via agent on RELAY · "title"`, in the list and on its
// page, with no link (that conversation is not on this relay).
func TestConsoleViaRemoteAgentR23_9(t *testing.T) {
	b := newBrowser(t)
	desk := relaytest.Start(t, relaytest.Options{})
	bravo := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pair(t, desk, bravo)
	planner := desk.NewSession(map[string]any{"title": "planner"})
	// The script's text names bravo: the owner's message unlocks it.
	res := mustOK(t, "create_session on bravo", runTool(t, desk, planner, map[string]any{"action": "create_session", "relay": "bravo",
		"text": "hello", "title": "started from desk"}))
	kid, _ := res["session"].(string)
	if kid == "" {
		t.Fatalf("create_session on bravo: %v", res)
	}
	b.collectConsole()
	b.signIn(bravo, "/", "#s-"+kid)
	want := `via agent on ` + desk.Config.Name + ` · "planner"`
	if got := b.text("#s-" + kid + " .via"); got != want {
		t.Errorf("the list's badge reads %q, want %q", got, want)
	}
	b.do("the session's page", chromedp.Navigate(bravo.URL+"/s/"+kid), chromedp.WaitVisible("#live-head"))
	if got := b.text("#live-head .via"); got != want {
		t.Errorf("the page's badge reads %q, want %q", got, want)
	}
	if n := eval[int](b, `document.querySelectorAll("a.via").length`); n != 0 {
		t.Errorf("%d via badges link to a page that does not exist here", n)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}
