package web_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/store"
)

// hostileReply is a reply an agent might write to take over the owner's
// console, with a table and a code block the page must still render.
const hostileReply = "Results <img src=x onerror=\"window.__pwned=1\"> and [click me](javascript:window.__pwned=2) " +
	"<script>window.__pwned=3</script>\n\n<div onmouseover=\"window.__pwned=4\">\nhover\n</div>\n\n" +
	"| step | state |\n|:--|--:|\n| build | ~~red~~ **green** |\n\n" +
	"```sh\nmake build && ./relay serve --config relay.yaml --addr 127.0.0.1:8080 # a long line that must scroll inside its block\n```\n"

// shownText is the page's text outside the messages' own words (an agent's
// reply may well say "null"): what the console itself writes.
const shownText = `(() => { const b = document.body.cloneNode(true);
  b.querySelectorAll(".msg .text, .acts, .act, script").forEach(e => e.remove()); return b.innerText; })()`

// checkNoPlaceholders fails when the page shows a Go or JavaScript empty
// value as text (R23.4).
func checkNoPlaceholders(t *testing.T, b *browser, when string) {
	t.Helper()
	text := eval[string](b, shownText)
	all := eval[string](b, `document.body.innerText`)
	for _, bad := range []string{"<nil>", "null", "undefined", "<no value>", "NaN"} {
		if strings.Contains(text, bad) {
			t.Errorf("%s: the page shows %q: %q", when, bad, text)
		}
	}
	if strings.Contains(all, "<nil>") || strings.Contains(all, "undefined") {
		t.Errorf("%s: the page's messages show <nil> or undefined: %q", when, all)
	}
}

// TestConversationInBrowserR23 drives a conversation in headless Chromium
// against a real relay (R23.2–R23.4): a hostile reply runs nothing and
// keeps no handler or script URL while its table and code block render,
// five tool calls fold into "5 tool calls" that opens from the keyboard,
// and a running turn shows "Working…", then its partial reply, never
// <nil>, null or undefined.
func TestConversationInBrowserR23(t *testing.T) {
	b := newBrowser(t)
	b.collectConsole()
	r := relaytest.Start(t, relaytest.Options{})
	u, _ := url.Parse(r.URL)
	s := r.NewSession(map[string]any{"title": "Rendering"})
	b.signIn(r, "/s/"+s.ID, "#composer")
	eval[bool](b, `window.__noReload = true`)

	// R23.2, R23.3: one turn with five relay_tool calls and the hostile reply, live.
	steps := []map[string]any{}
	for range 5 {
		steps = append(steps, map[string]any{"tool": map[string]any{"action": "list_relays", "relay": "this"}})
	}
	steps = append(steps, map[string]any{"reply": hostileReply})
	mid := r.Message(s.ID, relaytest.Script(steps...))
	r.WaitTurn(mid, 30*time.Second, store.TurnDone)
	b.waitJS("the reply's table", `!!document.querySelector("#live-msgs .r-assistant .md table")`, 10*time.Second)
	b.notReloaded()
	checkHostileReply(t, b)
	checkFold(t, b)
	checkRunningTurn(t, b, r, s.ID)

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, req := range b.requests {
		if rq, err := url.Parse(req); err != nil || rq.Host != u.Host {
			t.Errorf("the page contacted %s", req)
		}
	}
}

// checkHostileReply: the reply ran nothing, kept no handler, script or
// script URL, shows the HTML it wrote as text, and its table and code
// block render (R23.2).
func checkHostileReply(t *testing.T, b *browser) {
	t.Helper()
	if n := eval[int](b, `window.__pwned === undefined ? 0 : window.__pwned`); n != 0 {
		t.Fatalf("the reply ran script: window.__pwned = %d", n)
	}
	for what, js := range map[string]string{
		"script elements":           `document.querySelectorAll("#live-msgs script").length`,
		"event-handler attributes":  `[...document.querySelectorAll("#live-msgs *")].filter(e => [...e.attributes].some(a => a.name.startsWith("on"))).length`,
		"javascript: or data: URLs": `[...document.querySelectorAll("#live-msgs [href], #live-msgs [src]")].filter(e => /^\s*(javascript|data):/i.test(e.getAttribute("href") || e.getAttribute("src"))).length`,
		"img elements":              `document.querySelectorAll("#live-msgs img").length`,
		"links without noopener":    `[...document.querySelectorAll("#live-msgs a")].filter(a => a.rel !== "noopener noreferrer").length`,
	} {
		if n := eval[int](b, js); n != 0 {
			t.Errorf("%d %s in the conversation", n, what)
		}
	}
	reply := eval[string](b, `document.querySelector("#live-msgs .r-assistant .md").innerText`)
	for _, want := range []string{`<img src=x onerror="window.__pwned=1">`, "click me", "<script>window.__pwned=3</script>"} {
		if !strings.Contains(reply, want) {
			t.Errorf("the reply does not show %q as text: %q", want, reply)
		}
	}
	b.do("click the javascript: link", chromedp.Click(`#live-msgs .r-assistant .md a`))
	if n := eval[int](b, `window.__pwned === undefined ? 0 : window.__pwned`); n != 0 {
		t.Fatalf("the link ran script: window.__pwned = %d", n)
	}
	if got := eval[string](b, `[...document.querySelectorAll("#live-msgs .md td")].map(td => td.innerText).join("|")`); got != "build|red green" {
		t.Errorf("table cells %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#live-msgs .r-assistant .md del, #live-msgs .r-assistant .md strong").length`); n != 2 {
		t.Errorf("%d del/strong in the table, want 2", n)
	}
	if code := eval[string](b, `document.querySelector("#live-msgs .md pre code.language-sh").innerText`); !strings.Contains(code, "make build && ./relay serve") {
		t.Errorf("code block %q", code)
	}
}

// checkFold: five tool calls are one line, "5 tool calls", that opens in
// place from the keyboard (R23.3); at 360 px the code block scrolls inside
// itself, the page does not.
func checkFold(t *testing.T, b *browser) {
	t.Helper()
	fold := `#live-msgs .fold details`
	if sum := b.text(fold + " summary"); strings.TrimSpace(sum) != "5 tool calls" {
		t.Errorf("fold summary %q, want \"5 tool calls\"", sum)
	}
	if eval[bool](b, `document.querySelector("`+fold+`").open`) || eval[int](b, `document.querySelectorAll("#live-msgs .act-item").length`) != 0 {
		t.Errorf("the five calls are not folded")
	}
	b.do("open the fold with Enter", chromedp.Focus(fold+" summary"), chromedp.KeyEvent(kb.Enter))
	b.waitJS("the fold open", `document.querySelector("`+fold+`").open`, 5*time.Second)
	if got := eval[[]string](b, `[...document.querySelectorAll("`+fold+` .act")].filter(e => e.getClientRects().length > 0).map(e => e.textContent.replace(/\s+/g, " ").trim())`); len(got) != 5 || !strings.HasPrefix(got[0], "🛰️ list_relays → desk") {
		t.Errorf("tool-call lines visible in the open fold: %q, want 5 of \"🛰️ list_relays → desk …\"", got)
	}
	checkNoPlaceholders(t, b, "after the reply")

	// At 360 px the code block scrolls inside itself, the page does not.
	dir := shotDir(t)
	shots := []string{b.screenshot(dir, "console-markdown-1280.png", 1280, 900), b.screenshot(dir, "console-markdown-360.png", 360, 740)}
	t.Logf("screenshots: %v", shots)
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the conversation is %d px wide (scrolls sideways)", w)
	}
	if !eval[bool](b, `(p => p.scrollWidth > p.clientWidth && getComputedStyle(p).overflowX === "auto")(document.querySelector("#live-msgs .md pre"))`) {
		t.Errorf("the code block does not scroll inside itself at 360 px")
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))
}

// checkRunningTurn: a running turn shows "Working…" before any output, then
// its partial reply (R23.4).
func checkRunningTurn(t *testing.T, b *browser, r *relaytest.Relay, sid string) {
	t.Helper()
	run := relaytest.Script(map[string]any{"sleep_ms": 4000}, map[string]any{"reply": "partial **so far**"},
		map[string]any{"sleep_ms": 400}, map[string]any{"sleep_ms": 60000})
	r.Message(sid, run)
	b.waitJS("Working…", `!!document.querySelector("#live-msgs .partial") && document.querySelector("#live-msgs .partial").innerText.includes("Working…")`, 10*time.Second)
	checkNoPlaceholders(t, b, "a running turn without output")
	b.waitJS("the partial reply", `!!document.querySelector("#live-msgs .partial strong") && document.querySelector("#live-msgs .partial").innerText.includes("partial so far")`, 15*time.Second)
	if strings.Contains(b.text("#live-msgs .partial"), "Working…") {
		t.Errorf("the partial reply still says Working…")
	}
	checkNoPlaceholders(t, b, "a running turn with a partial reply")
	b.notReloaded()
	if st := r.Owner("POST", "/api/v1/sessions/"+sid+"/stop", nil, nil); st >= 300 {
		t.Fatalf("stop: %d", st)
	}
	b.waitJS("the turn stopped", `!document.querySelector("#live-msgs .partial")`, 15*time.Second)
	checkNoPlaceholders(t, b, "a stopped turn")
}

// TestConversationFoldStaysOpenR23_3: a fold the owner opened stays open
// while the running turn adds calls to it (the live refresh replaces its
// element): 4 calls fold, the owner opens them, a question holds the turn,
// its answer lets a fifth call come, and "5 tool calls" is still open.
func TestConversationFoldStaysOpenR23_3(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	s := r.NewSession(map[string]any{"title": "Folding"})
	b.signIn(r, "/s/"+s.ID, "#composer")
	eval[bool](b, `window.__noReload = true`)
	call := map[string]any{"tool": map[string]any{"action": "list_relays", "relay": "this"}}
	r.Message(s.ID, relaytest.Script(call, call, call, call,
		map[string]any{"question": map[string]any{"text": "go on?", "options": []string{"yes"}}}, call, map[string]any{"sleep_ms": 60000}))
	fold := `#live-msgs .fold details`
	b.waitJS("4 tool calls", `!!document.querySelector("`+fold+`") && document.querySelector("`+fold+` summary").textContent.trim() === "4 tool calls"`, 15*time.Second)
	b.do("open the fold with Space", chromedp.Focus(fold+" summary"), chromedp.KeyEvent(" "))
	b.waitJS("the fold open", `document.querySelector("`+fold+`").open`, 5*time.Second)
	var qid string
	relaytest.Eventually(t, 15*time.Second, func() bool {
		qs, _ := r.Get(s.ID)["pendingQuestions"].([]any)
		if len(qs) == 1 {
			qid, _ = qs[0].(map[string]any)["id"].(string)
		}
		return qid != ""
	}, "the turn's question")
	if st := r.Owner("POST", "/api/v1/sessions/"+s.ID+"/questions/"+qid, map[string]any{"answer": "yes"}, nil); st != 200 {
		t.Fatalf("answer: %d", st)
	}
	b.waitJS("5 tool calls", `document.querySelector("`+fold+` summary").textContent.trim() === "5 tool calls"`, 15*time.Second)
	b.notReloaded()
	if !eval[bool](b, `document.querySelector("`+fold+`").open`) {
		t.Errorf("the fold the owner opened closed when a call was added to it")
	}
	if st := r.Owner("POST", "/api/v1/sessions/"+s.ID+"/stop", nil, nil); st >= 300 {
		t.Fatalf("stop: %d", st)
	}
	checkNoPlaceholders(t, b, "a stopped turn")
}

// TestConversationPromptHeaderR23_2: a prompt another conversation's agent
// sent shows the relay's `[Prompt from an agent …]` line as the message's
// small header, and the prompt itself as Markdown, inert.
func TestConversationPromptHeaderR23_2(t *testing.T) {
	b := newBrowser(t)
	b.collectConsole()
	r := relaytest.Start(t, relaytest.Options{})
	from := r.NewSession(map[string]any{"title": "Lead"})
	to := r.NewSession(map[string]any{"title": "Worker"})
	mustOK(t, "send", runTool(t, r, from, map[string]any{"action": "send", "session": to.ID,
		"text": "Please **check** <img src=x onerror=\"window.__pwned=1\">"}))
	waitIdle(t, r, to.ID)
	b.signIn(r, "/s/"+to.ID, "#composer")
	msg := `#live-msgs .r-agent`
	if head := b.text(msg + " .mhead"); !strings.HasPrefix(head, `[Prompt from an agent on this relay · session "Lead" · `) {
		t.Errorf("the prompt's header %q", head)
	}
	if body := b.text(msg + " .md"); strings.Contains(body, "[Prompt from") || !strings.Contains(body, `Please check <img src=x onerror="window.__pwned=1">`) {
		t.Errorf("the prompt's body %q", body)
	}
	if n := eval[int](b, `document.querySelectorAll("#live-msgs .r-agent .md strong, #live-msgs .r-agent .md img").length`); n != 1 {
		t.Errorf("%d strong/img in the prompt, want the one strong", n)
	}
	if n := eval[int](b, `window.__pwned === undefined ? 0 : window.__pwned`); n != 0 {
		t.Fatalf("the prompt ran script: window.__pwned = %d", n)
	}
	checkNoPlaceholders(t, b, "a prompt from an agent")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}
