package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// notificationStub replaces the browser's Notification before the page's
// scripts run: it records every notification made (window.__notes) and every
// permission request (window.__asked); the permission is kept in
// localStorage as a browser keeps it, and the tab reads as hidden (until
// window.__vis says "visible").
const notificationStub = `(function () {
  window.__notes = []; window.__asked = 0;
  function N(title, opts) { this.title = title; this.body = (opts && opts.body) || ""; window.__notes.push(this); }
  N.prototype.close = function () { this.closed = true; };
  Object.defineProperty(N, "permission", { get: function () { return localStorage.getItem("__perm") || "default"; } });
  N.requestPermission = function () { window.__asked++; localStorage.setItem("__perm", "granted"); return Promise.resolve("granted"); };
  window.Notification = N;
  window.__vis = "hidden";
  Object.defineProperty(document, "visibilityState", { get: function () { return window.__vis; } });
  Object.defineProperty(document, "hidden", { get: function () { return window.__vis === "hidden"; } });
})();`

// noteTitles is the titles of the notifications the page made so far.
func noteTitles(b *browser) []string {
	return eval[[]string](b, `window.__notes.map(function (n) { return n.title; })`)
}

// waitNote waits until the page made a notification with this title and a body holding body.
func waitNote(b *browser, title, body string) {
	b.t.Helper()
	b.waitJS("the notification "+title, fmt.Sprintf(`window.__notes.some(function (n) { return n.title === %q && n.body.indexOf(%q) >= 0; })`, title, body), 15*time.Second)
}

// TestNotificationsInBrowser (R23.10): the console asks for permission only
// from its "Turn on notifications" control, never on load; with permission
// and the tab hidden it shows "Approval needed · TITLE" for a card,
// "Question · TITLE" for an ask (also one put on the paired relay) and a
// question card, "Reply ready · TITLE" for an owner's turn
// and "Turn failed · TITLE" for a turn error — and nothing for a turn a
// paired relay's agent started (a second real relay, bravo); clicking a
// notification opens its session.
func TestNotificationsInBrowser(t *testing.T) {
	b := newBrowser(t)
	desk := relaytest.Start(t, relaytest.Options{})
	bravo := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pair(t, bravo, desk)
	chat := desk.NewSession(map[string]any{"title": "owner chat"})
	orch := desk.NewSession(map[string]any{"title": "card asker"})
	asker := desk.NewSession(map[string]any{"title": "asker"})
	target := desk.NewSession(map[string]any{"title": "peer target"})
	b.collectConsole()

	b.do("a blank page", chromedp.Navigate("about:blank"))
	if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: notificationStub}); err != nil {
		t.Fatalf("install the Notification stub: %v", err)
	}
	b.signIn(desk, "/", "#live-sessions")

	// ---- permission only from the visible control ---------------------------
	if n := eval[int](b, `window.__asked`); n != 0 {
		t.Fatalf("the console asked for notification permission on load (%d times)", n)
	}
	if got := eval[string](b, `(function(){var c=document.getElementById("notify-on"); return c && !c.hidden && c.offsetParent !== null ? c.textContent.trim() : "";})()`); got != "Turn on notifications" {
		t.Fatalf("the visible notification control reads %q, want \"Turn on notifications\"", got)
	}
	shot := b.screenshot(artifacts(t), "console-notify-360.png", 360, 800)
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("with the notification control the page is %d px wide at 360 px (%s)", w, shot)
	}
	b.do("desktop width", chromedp.EmulateViewport(1280, 900))
	b.do("Turn on notifications", chromedp.Click("#notify-on"))
	b.waitJS("the permission asked once and the control gone", `window.__asked === 1 && Notification.permission === "granted" && document.getElementById("notify-on").hidden`, 5*time.Second)

	// ---- a reply to the owner's message, a turn error ---------------------------
	desk.Message(chat.ID, "hello")
	waitNote(b, "Reply ready · owner chat", "echo: hello")
	desk.Message(chat.ID, relaytest.Script(map[string]any{"error": "the model is gone"}))
	waitNote(b, "Turn failed · owner chat", "the model is gone")

	// ---- a card, then an ask ------------------------------------------------
	mid := desk.Message(orch.ID, relaytest.Script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "hi", "title": "child"}}))
	card := desk.WaitCard(orch.ID)
	waitNote(b, "Approval needed · card asker", "create_session")
	desk.Decide(card["id"].(string), "deny")
	desk.WaitTurn(mid, 20*time.Second, "done", "error", "stopped")
	if res, _ := desk.InTurn(asker, map[string]any{"action": "ask", "question": "Ship it today?"}, ""); res["ok"] != true {
		t.Fatalf("ask: %v", res)
	}
	waitNote(b, "Question · asker", "Ship it today?")
	// An ask this relay's agent put on the paired relay waits for this owner too.
	pair(t, desk, bravo)
	desk.Message(asker.ID, "please work with @bravo")
	there := bravo.NewSession(map[string]any{"title": "bravo work"})
	if res, _ := desk.InTurn(asker, map[string]any{"action": "ask", "relay": "bravo", "session": there.ID, "question": "Deploy bravo tonight?"}, ""); res["ok"] != true {
		t.Fatalf("ask on bravo: %v", res)
	}
	waitNote(b, "Question · asker", "Deploy bravo tonight?")

	// A question card (ask_user) of a running turn waits for the owner too.
	quiz := desk.NewSession(map[string]any{"title": "quiz"})
	desk.Message(quiz.ID, relaytest.Script(map[string]any{"question": map[string]any{"text": "Which database?", "options": []any{"postgres", "sqlite"}}}))
	waitNote(b, "Question · quiz", "Which database?")

	// ---- a turn a paired relay's agent started: no notification ---------------
	caller := bravo.NewSession(map[string]any{"title": "remote caller"})
	bravo.Message(caller.ID, "please work with @desk")
	res, _ := bravo.InTurn(caller, map[string]any{"action": "send", "relay": "desk", "session": target.ID, "text": "from bravo's agent", "wait_seconds": 20}, "")
	if res["ok"] != true {
		t.Fatalf("bravo's send to desk: %v", res)
	}
	// The owner's next message in the same session ends after the agent's
	// turn there: once its notification is shown, the agent's turn had its chance.
	desk.Message(target.ID, "the owner again")
	waitNote(b, "Reply ready · peer target", "echo: the owner again")
	for _, n := range eval[[]map[string]string](b, `window.__notes.map(function (n) { return {title: n.title, body: n.body}; })`) {
		if strings.HasSuffix(n["title"], "· peer target") && !strings.Contains(n["body"], "the owner again") {
			t.Errorf("a notification for the turn bravo's agent started: %v", n)
		}
	}
	titles := noteTitles(b)
	t.Logf("notifications: %q", titles)
	for _, title := range titles {
		if !strings.Contains(title, " · ") {
			t.Errorf("a notification titled %q; every title is \"KIND · SESSION TITLE\"", title)
		}
	}

	// ---- a visible tab shows none ---------------------------------------------------
	before := eval[int](b, `window.__vis = "visible"; window.__got = 0;
		window.relayStream.addEventListener("notice", function () { window.__got++; }); window.__notes.length`)
	desk.Message(chat.ID, "while you look")
	b.waitJS("the reply's notice on the stream", `window.__got >= 1`, 15*time.Second)
	if after := eval[int](b, `window.__notes.length`); after != before {
		t.Errorf("a notification while the tab is visible: %q", noteTitles(b)[before:])
	}
	eval[bool](b, `window.__vis = "hidden"; true`)

	// ---- clicking a notification opens its session -------------------------------
	eval[bool](b, `(function(){var n=window.__notes.filter(function(n){return n.title==="Approval needed · card asker";})[0]; n.onclick(); return true;})()`)
	b.waitJS("the card's session page", fmt.Sprintf(`location.pathname === "/s/%s"`, orch.ID), 10*time.Second)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}
