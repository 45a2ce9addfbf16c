package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// browser is one headless Chromium for a test, with what its pages wrote to
// the console and every URL they asked for.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	console  []string // errors and exceptions
	requests []string
}

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but Chromium is not installed (apt-get install -y chromium)")
	}
	t.Skip("Chromium is not installed (apt-get install -y chromium): the browser tests are skipped")
	return ""
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelA()
	})
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, b.event); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return b
}

// event runs on the browser's reading goroutine: keep it short.
func (b *browser) event(ev any) {
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.mu.Lock()
		b.requests = append(b.requests, e.Request.URL)
		b.mu.Unlock()
	}
}

// collectConsole keeps the page's console errors and exceptions.
func (b *browser) collectConsole() {
	go func() {
		for m, err := range chromedp.Console(b.ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.console = append(b.console, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				b.mu.Unlock()
			}
		}
	}()
}

func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(sel))
	if err != nil {
		b.t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return s
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("browser: eval %s: %v", js, err)
	}
	return v
}

// waitJS waits until the expression is truthy and returns how long that took.
func (b *browser) waitJS(what, js string, d time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	for {
		left := d - time.Since(start)
		ctx, cancel := context.WithTimeout(b.ctx, left+2*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(left), chromedp.WithPollingInterval(5*time.Millisecond)))
		cancel()
		if err == nil {
			return time.Since(start)
		}
		// A navigation (a form that opens the new page) ends the poll: poll the new page.
		if (strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context")) && time.Since(start) < d {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText.slice(0, 3000) : document.body.innerText`))
		b.t.Fatalf("browser: waiting for %s: %v\npage: %s", what, err, html)
	}
}

func (b *browser) screenshot(dir, name string, width, height int64) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		b.t.Fatalf("viewport %d: %v", width, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatalf("write %s: %v", p, err)
	}
	return p
}

func artifacts(t *testing.T) string {
	dir := os.Getenv("RELAY_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir, _ = filepath.Abs(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

// TestConsoleInBrowser drives the console in headless Chromium against a real
// relay: sign-in, a session started in the page, live replies, cards decided
// in the page, an ask answered in the Inbox, Unsubscribe and Cancel, screen
// sizes, console errors, the origins contacted, and a relay restart (R19).
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	rd := relaytest.NewRedis(t)
	r := relaytest.Start(t, relaytest.Options{Redis: rd})
	u, _ := url.Parse(r.URL)
	b.collectConsole()
	dir := artifacts(t)

	// ---- sign-in: only the sign-in shows; a wrong token is refused -----------
	b.do("open the console", chromedp.Navigate(r.URL+"/"), chromedp.WaitVisible("#token"))
	if n := eval[int](b, `document.querySelectorAll("#live-sessions, nav").length`); n != 0 {
		t.Fatalf("before sign-in the page shows more than the sign-in (%d elements)", n)
	}
	b.do("wrong token", chromedp.SendKeys("#token", "not-the-owner-token"), chromedp.Submit("#token"), chromedp.WaitVisible(".error"))
	if msg := b.text(".error"); !strings.Contains(msg, "not this relay's owner token") {
		t.Fatalf("wrong token: page says %q", msg)
	}
	if n := eval[int](b, `document.querySelectorAll("#live-sessions").length`); n != 0 {
		t.Fatalf("a wrong token signed in")
	}
	b.do("sign in", chromedp.SendKeys("#token", relaytest.OwnerToken), chromedp.Submit("#token"), chromedp.WaitVisible("#live-sessions"))

	// First page load: transferred bytes of a signed-in sessions page with an empty cache.
	if _, err := chromedp.Call(b.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatalf("disable cache: %v", err)
	}
	b.do("first load", chromedp.Navigate(r.URL+"/"), chromedp.WaitVisible("#live-sessions"))
	b.waitJS("the stream to open", `document.body.dataset.stream === "open"`, 5*time.Second)
	bytes := eval[float64](b, `(function(){var n=performance.getEntriesByType("navigation")[0].transferSize;
		performance.getEntriesByType("resource").forEach(function(e){if(!/\/api\/v1\/stream/.test(e.name)) n+=e.transferSize;}); return n;})()`)
	fmt.Printf("console: first page load transferred %.0f bytes (document, CSS, JS, icon; cache off)\n", bytes)
	t.Logf("first page load: %.0f bytes", bytes)
	if _, err := chromedp.Call(b.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: false}); err != nil {
		t.Fatalf("enable cache: %v", err)
	}

	// ---- a session created in the page runs a scripted turn -----------------
	b.do("new session form", chromedp.Click("#new-session summary"), chromedp.WaitVisible("#ns-text"),
		chromedp.SendKeys("#ns-title", "from the console"), chromedp.SendKeys("#ns-text", "hello"),
		chromedp.Click(`#new-session button[type=submit]`))
	b.waitJS("the conversation page", `document.body.dataset.page === "session"`, 10*time.Second)
	b.waitJS("the reply", `(document.querySelector("#live-msgs") || {innerText: ""}).innerText.includes("echo: hello")`, 10*time.Second)
	sid := eval[string](b, `document.body.dataset.session`)
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	eval[bool](b, `window.__noReload = true`)
	b.do("write in the box", chromedp.SendKeys("#msg", "hello again"), chromedp.Click(`#composer button[type=submit]`))
	b.waitJS("the reply to the box", `document.querySelector("#live-msgs").innerText.includes("echo: hello again")`, 10*time.Second)
	// Latency of a change made elsewhere (owner API) until the page shows it.
	start := time.Now()
	r.Message(sid, "ping from the API")
	b.waitJS("a reply written elsewhere", `document.querySelector("#live-msgs").innerText.includes("echo: ping from the API")`, 10*time.Second)
	latency := time.Since(start)
	if !eval[bool](b, `window.__noReload === true`) {
		t.Fatalf("the page was reloaded; replies must arrive live")
	}
	fmt.Printf("console: SSE update latency %d ms (owner message via the API → turn → reply shown in the page)\n", latency.Milliseconds())
	t.Logf("SSE update latency: %s", latency)
	// The running turn's partial reply, then a task with the end of its output.
	r.Message(sid, relaytest.Script(map[string]any{"reply": "first part"}, map[string]any{"sleep_ms": 1500}, map[string]any{"reply": " and the rest"}))
	b.waitJS("the partial reply", `!!document.querySelector("#live-msgs .partial") && document.querySelector("#live-msgs .partial").innerText.includes("first part")`, 5*time.Second)
	b.waitJS("the whole reply", `!document.querySelector("#live-msgs .partial") && document.querySelector("#live-msgs").innerText.includes("first part and the rest")`, 10*time.Second)
	r.Message(sid, relaytest.Script(map[string]any{"task": map[string]any{"description": "go test ./...", "lines": []any{"ok  pkg/a", "ok  pkg/b"}, "exit": 0}}))
	b.waitJS("the task and its tail", `document.querySelector("#live-tasks").innerText.includes("go test ./...") && document.querySelector("#live-tasks").innerText.includes("ok  pkg/b")`, 10*time.Second)

	// ---- an agent's create_session card: shown within 1 s, Allow unblocks ----
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	b.do("open the orchestrator", chromedp.Navigate(r.URL+"/s/"+orch.ID), chromedp.WaitVisible("#live-msgs"))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	call := map[string]any{"action": "create_session", "relay": "this", "text": "hello", "title": "child of the orchestrator"}
	start = time.Now()
	mid := r.Message(orch.ID, relaytest.Script(map[string]any{"tool": call}))
	b.waitJS("the card in the conversation", `!!document.querySelector("#live-cards .card button.allow")`, 5*time.Second)
	cardLatency := time.Since(start)
	fmt.Printf("console: a create_session card showed %d ms after the call\n", cardLatency.Milliseconds())
	if cardLatency > time.Second {
		t.Errorf("the card showed %s after the call, want within 1 s", cardLatency)
	}
	if lines := b.text("#live-cards .card .lines"); lines == "" {
		t.Errorf("the card shows no lines")
	}
	cardShot := b.screenshot(dir, "console-card-1280.png", 1280, 800)
	b.do("Allow", chromedp.Click("#live-cards .card button.allow"))
	turn := r.WaitTurn(mid, 20*time.Second, "done", "error", "stopped")
	res := relaytest.ToolResults(turn.Reply)
	if len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("create_session after Allow: %v (turn %s %s)", res, turn.Status, turn.Reply)
	}
	b.waitJS("the card to go", `!document.querySelector("#live-cards .card")`, 5*time.Second)

	// ---- Deny, from the global "Waiting for you" list ------------------------
	orch2 := r.NewSession(map[string]any{"title": "second orchestrator"})
	b.do("open Waiting for you", chromedp.Navigate(r.URL+"/waiting"), chromedp.WaitVisible("#live-waiting"))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	start = time.Now()
	mid = r.Message(orch2.ID, relaytest.Script(map[string]any{"tool": call}))
	b.waitJS("the card in Waiting for you", `!!document.querySelector("#live-waiting .card button.deny")`, 5*time.Second)
	if d := time.Since(start); d > time.Second {
		t.Errorf("the card showed in Waiting for you %s after the call, want within 1 s", d)
	}
	if nav := b.text("#live-nav"); !strings.Contains(nav, "Waiting for you 1") {
		t.Errorf("the navigation does not count the card: %q", nav)
	}
	b.do("Deny", chromedp.Click("#live-waiting .card button.deny"))
	turn = r.WaitTurn(mid, 20*time.Second, "done", "error", "stopped")
	res = relaytest.ToolResults(turn.Reply)
	if len(res) != 1 || res[0]["ok"] != false || res[0]["code"] != "REMOTE_RELAY_PERMISSION" {
		t.Fatalf("create_session after Deny: %v", res)
	}
	b.waitJS("the list to empty", `!document.querySelector("#live-waiting .card")`, 5*time.Second)

	// ---- a question card (ask_user) answered with one of its options ----------
	mid = r.Message(orch2.ID, relaytest.Script(map[string]any{"question": map[string]any{"text": "Which database?", "options": []any{"postgres", "sqlite"}}}))
	b.waitJS("the question card", `!!document.querySelector("#live-waiting .q")`, 5*time.Second)
	b.do("choose sqlite", chromedp.Click(`#live-waiting .q button[data-json*="sqlite"]`))
	turn = r.WaitTurn(mid, 20*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || !strings.Contains(turn.Reply, "sqlite") {
		t.Fatalf("the question's turn: %s %q, want the answer sqlite", turn.Status, turn.Reply)
	}
	b.waitJS("the question to go", `!document.querySelector("#live-waiting .q")`, 5*time.Second)

	// ---- an ask answered in the Inbox reaches the agent -----------------------
	asker := r.NewSession(map[string]any{"title": "asker"})
	ask, _ := r.InTurn(asker, map[string]any{"action": "ask", "question": "Ship the release today?", "options": []any{"yes", "no"}}, "")
	qid, _ := ask["question_id"].(string)
	if qid == "" {
		t.Fatalf("ask: %v", ask)
	}
	b.do("open the Inbox", chromedp.Navigate(r.URL+"/inbox"), chromedp.WaitVisible("#a-"+qid))
	b.do("answer", chromedp.Click(`#a-`+qid+` input[value="yes"]`), chromedp.SendKeys("#aa-"+qid, "yes, after the tests"),
		chromedp.Click(`#a-`+qid+` button[type=submit]`))
	b.waitJS("the ask to leave the Inbox", `!document.querySelector("#a-`+qid+`")`, 5*time.Second)
	relaytest.Eventually(t, 15*time.Second, func() bool {
		for _, e := range r.EventTexts(asker.ID) {
			if strings.Contains(e, "question_answered "+qid) && strings.Contains(e, "yes, after the tests") {
				return true
			}
		}
		return false
	}, "question_answered in the asking conversation")

	// ---- Unsubscribe and Cancel ------------------------------------------------
	watcher := r.NewSession(map[string]any{"title": "watcher"})
	sub, _ := r.InTurn(watcher, map[string]any{"action": "subscribe", "sessions": []any{orch.ID}}, "allow")
	subID := subscriptionID(t, sub)
	sch, _ := r.InTurn(watcher, map[string]any{"action": "schedule", "title": "nightly check", "text": "check the build", "every_minutes": 60}, "")
	schID, _ := sch["schedule_id"].(string)
	if schID == "" {
		t.Fatalf("schedule: %v", sch)
	}
	b.do("sessions list", chromedp.Navigate(r.URL+"/"), chromedp.WaitVisible("#s-"+watcher.ID))
	if row := b.text("#s-" + orch.ID); !strings.Contains(row, "watched") {
		t.Errorf("the watched session has no watched badge: %q", row)
	}
	if row := b.text("#s-" + watcher.ID); !strings.Contains(row, "⏰") {
		t.Errorf("the session with a schedule has no ⏰ badge: %q", row)
	}
	kids := eval[[]string](b, `Array.from(document.querySelectorAll(".srow .via")).map(function(e){return e.textContent})`)
	if len(kids) == 0 || !strings.Contains(strings.Join(kids, "|"), `via agent · "orchestrator"`) {
		t.Errorf("the started session has no via agent badge: %v", kids)
	}
	// Screenshots: the list and a conversation, at 360 px and 1280 px.
	shots := []string{b.screenshot(dir, "console-sessions-1280.png", 1280, 900), b.screenshot(dir, "console-sessions-360.png", 360, 740)}
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the sessions page is %d px wide (scrolls sideways)", w)
	}
	b.do("the watcher", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(r.URL+"/s/"+watcher.ID), chromedp.WaitVisible("#watching"))
	if chip := b.text("#watching summary"); chip != "watching 1 session" {
		t.Errorf("chip reads %q, want %q", chip, "watching 1 session")
	}
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	shots = append(shots, b.screenshot(dir, "console-conversation-1280.png", 1280, 900), b.screenshot(dir, "console-conversation-360.png", 360, 740))
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the conversation is %d px wide (scrolls sideways)", w)
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))
	b.do("Unsubscribe", chromedp.Click("#watching summary"), chromedp.WaitVisible("#sub-"+subID+" button"), chromedp.Click("#sub-"+subID+" button"))
	b.waitJS("the subscription to go", `!document.querySelector("#sub-`+subID+`")`, 5*time.Second)
	if active := activeSubscriptions(r, watcher.ID); active != 0 {
		t.Errorf("after Unsubscribe %d subscriptions are active", active)
	}
	b.do("Cancel", chromedp.Click("#clocks summary"), chromedp.WaitVisible("#sch-"+schID+" button"), chromedp.Click("#sch-"+schID+" button"))
	b.waitJS("the schedule to go", `!document.querySelector("#sch-`+schID+`")`, 5*time.Second)
	var scheds struct {
		Schedules []map[string]any `json:"schedules"`
	}
	r.Owner("GET", "/api/v1/schedules", nil, &scheds)
	for _, s := range scheds.Schedules {
		if s["id"] == schID {
			t.Errorf("after Cancel the schedule is still active: %v", s)
		}
	}

	// ---- Settings, saved in the page ------------------------------------------
	b.do("Settings", chromedp.Navigate(r.URL+"/settings"), chromedp.WaitVisible("#set-quiet"),
		chromedp.Clear("#set-quiet"), chromedp.SendKeys("#set-quiet", "17"), chromedp.Click(`#settings-form button[type=submit]`))
	relaytest.Eventually(t, 5*time.Second, func() bool {
		var st map[string]any
		r.Owner("GET", "/api/v1/settings", nil, &st)
		return st["quiet_task_minutes"] == float64(17)
	}, "quiet_task_minutes 17 after saving the settings page")

	// ---- only this origin; no console errors ---------------------------------
	b.mu.Lock()
	for _, req := range b.requests {
		ru, err := url.Parse(req)
		if err != nil || (ru.Scheme != "data" && ru.Host != u.Host) {
			t.Errorf("the console contacted %q; only %s is allowed", req, u.Host)
		}
	}
	nreq := len(b.requests)
	b.mu.Unlock()
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("%d requests, all to %s; screenshots: %v", nreq, u.Host, append(shots, cardShot))
	if p := os.Getenv("RELAY_CONSOLE_PNG"); p != "" {
		if err := copyFile(cardShot, p); err != nil {
			t.Errorf("copy the screenshot to %s: %v", p, err)
		}
	}

	// ---- a relay restart: the page reconnects by itself ----------------------
	b.do("the first session", chromedp.Navigate(r.URL+"/s/"+sid), chromedp.WaitVisible("#live-msgs"))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	eval[bool](b, `window.__noReload = true`)
	r.Stop()
	b.waitJS("the stream to notice", `document.body.dataset.stream === "closed"`, 10*time.Second)
	r2 := relaytest.Start(t, relaytest.Options{Redis: rd, Config: func(c *config.Config) { c.Addr = u.Host }})
	b.waitJS("the stream to reopen", `document.body.dataset.stream === "open"`, 15*time.Second)
	start = time.Now()
	r2.Message(sid, "after the restart")
	b.waitJS("a reply after the restart", `document.querySelector("#live-msgs").innerText.includes("echo: after the restart")`, 10*time.Second)
	fmt.Printf("console: after a relay restart the page reconnected; update latency %d ms\n", time.Since(start).Milliseconds())
	if !eval[bool](b, `window.__noReload === true`) {
		t.Errorf("the page reloaded across the restart")
	}
}

func subscriptionID(t *testing.T, res map[string]any) string {
	t.Helper()
	if s, ok := res["subscription"].(map[string]any); ok {
		if id, _ := s["id"].(string); id != "" {
			return id
		}
	}
	t.Fatalf("subscribe: %v", res)
	return ""
}

func activeSubscriptions(r *relaytest.Relay, sid string) int {
	n := 0
	for _, x := range r.Get(sid)["watching"].([]any) {
		if _, ended := x.(map[string]any)["endReason"]; !ended {
			n++
		}
	}
	return n
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
