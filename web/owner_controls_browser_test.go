package web_test

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// The owner's controls of SPEC §23 driven in headless Chromium against a
// real relay: an external session made in the page with its token shown
// once (R23.5), New token, Kill session (R23.6), Move to group and a
// group's Move up / Move down (R23.7). Exact labels are contract: the
// tests find the controls by them.

// clickText clicks the first visible element matching sel whose text is
// exactly text (a control found by its label).
func (b *browser) clickText(sel, text string) {
	b.t.Helper()
	js := `(function(){var e=Array.from(document.querySelectorAll(` + "`" + sel + "`" + `)).find(function(e){return e.textContent.trim()===` +
		"`" + text + "`" + ` && e.getClientRects().length>0}); if(!e) return false; e.click(); return true;})()`
	if !eval[bool](b, js) {
		b.t.Fatalf("no visible %s reading %q", sel, text)
	}
}

// acceptConfirms answers every confirm() of the page with OK.
func (b *browser) acceptConfirms() {
	eval[bool](b, `(function(){window.confirm=function(){return true}; return true})()`)
}

// TestConsoleExternalSessionR23_5: the New session form offers "Your own
// MCP client"; creating one shows its token once with the settings of
// Claude Code, Codex and Gemini CLI (the relay's URL and the token filled
// in) and Copy; the token works on /mcp. The session's page has "New
// token": a new token shown once, the old one refused at once.
func TestConsoleExternalSessionR23_5(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	b.collectConsole()
	b.signIn(r, "/", "#live-sessions")
	b.do("New session", chromedp.Click("#new-session summary"), chromedp.WaitVisible("#ns-provider"))
	if got := eval[string](b, `(Array.from(document.querySelectorAll("#ns-provider option")).find(function(o){return o.value==="external"})||{}).textContent||""`); got != "Your own MCP client" {
		t.Fatalf("the provider external is offered as %q, want \"Your own MCP client\"", got)
	}
	eval[bool](b, `(function(){var s=document.getElementById("ns-provider"); s.value="external"; s.dispatchEvent(new Event("change",{bubbles:true})); return true})()`)
	if eval[bool](b, `document.getElementById("ns-text").getClientRects().length > 0 || document.getElementById("ns-model").getClientRects().length > 0`) {
		t.Errorf("an external session's form still offers a model or a first message")
	}
	b.do("create it", chromedp.SendKeys("#ns-title", "my terminal"), chromedp.Click(`#new-session button[type=submit]`))
	b.waitJS("the token", `!document.getElementById("ext-out").hidden && document.getElementById("ext-token").value !== ""`, 10*time.Second)
	tok := eval[string](b, `document.getElementById("ext-token").value`)
	mcpURL := r.URL + "/mcp"
	for _, c := range []struct{ id, want string }{
		{"ext-claude", `claude mcp add --transport http relay ` + mcpURL + ` --header "Authorization: Bearer ` + tok + `"`},
		{"ext-codex", "[mcp_servers.relay]\nurl = \"" + mcpURL + "\"\nhttp_headers = { \"Authorization\" = \"Bearer " + tok + "\" }"},
		{"ext-gemini", `"httpUrl": "` + mcpURL + `",`},
		{"ext-gemini", `"Authorization": "Bearer ` + tok + `"`},
	} {
		if got := b.text("#" + c.id); !strings.Contains(got, c.want) {
			t.Errorf("%s reads %q, want %q in it", c.id, got, c.want)
		}
	}
	if n := eval[int](b, `Array.from(document.querySelectorAll("#ext-out button")).filter(function(e){return e.textContent.trim()==="Copy"}).length`); n != 3 {
		t.Errorf("%d Copy buttons beside the settings, want 3", n)
	}
	b.do("phone", chromedp.EmulateViewport(360, 740))
	if !eval[bool](b, noSidewaysJS) {
		t.Errorf("at 360 px the MCP client settings make the page %d px wide", eval[int](b, `document.documentElement.scrollWidth`))
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))
	b.clickText("#ext-out button", "Copy")
	b.waitJS("the copy's answer", `document.getElementById("status").textContent !== ""`, 5*time.Second)
	if st := r.MCPStatus(tok); st != http.StatusOK {
		t.Fatalf("the token shown in the page: /mcp answers %d", st)
	}
	sid := eval[string](b, `document.querySelector("#ext-out a[href^='/s/']").getAttribute("href").slice(3)`)
	if got := r.Get(sid); got["provider"] != "external" || got["title"] != "my terminal" {
		t.Fatalf("the session made: %v", got)
	}

	// ---- New token on the session's page --------------------------------------
	b.do("open the session", chromedp.Click("#ext-out a[href^='/s/']"))
	b.waitJS("the session's page", `document.body.dataset.session === "`+sid+`"`, 10*time.Second)
	b.acceptConfirms()
	b.clickText("button", "New token")
	b.waitJS("the new token", `!!document.getElementById("nt-out") && !document.getElementById("nt-out").hidden && document.getElementById("nt-token").value !== ""`, 10*time.Second)
	tok2 := eval[string](b, `document.getElementById("nt-token").value`)
	if tok2 == tok {
		t.Fatalf("New token showed the old token")
	}
	if got := b.text("#nt-claude"); !strings.Contains(got, "Bearer "+tok2) {
		t.Errorf("the new token's Claude Code settings read %q", got)
	}
	if st := r.MCPStatus(tok); st != http.StatusUnauthorized {
		t.Errorf("the old token after New token: /mcp answers %d, want 401", st)
	}
	if st := r.MCPStatus(tok2); st != http.StatusOK {
		t.Errorf("the new token: /mcp answers %d, want 200", st)
	}
	// Shown once: the page loaded again shows no token.
	b.do("reload", chromedp.Navigate(r.URL+"/s/"+sid), chromedp.WaitVisible("#live-head"))
	if eval[bool](b, `!!document.getElementById("nt-out") && (!document.getElementById("nt-out").hidden || document.getElementById("nt-token").value !== "")`) {
		t.Errorf("the token shows again after a reload")
	}
	if strings.Contains(eval[string](b, `document.documentElement.outerHTML`), tok2) {
		t.Errorf("the page's HTML holds the token")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// hangScript is an exec agent whose turn hangs (its pid written to
// $TEST_DIR/sh.pid) until killed; any other prompt is answered.
const hangScript = `#!/bin/sh
prompt=$(cat)
case "$prompt" in
hang*)
	echo $$ > "$TEST_DIR/sh.pid"
	sleep 120 &
	wait
	echo "not killed"
	;;
*)
	echo "got: $prompt"
	;;
esac
`

// TestConsoleKillSessionR23_6: "Kill session" on a session's page ends its
// running turn's process (the turn ends stopped); the next message runs.
func TestConsoleKillSessionR23_6(t *testing.T) {
	b := newBrowser(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(script, []byte(hangScript), 0o755); err != nil {
		t.Fatal(err)
	}
	r := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "sh", Name: "Shell", Type: config.TypeExec,
			Command: []string{"/bin/sh", script}, Models: []string{"sh-1"}, DefaultModel: "sh-1", Env: map[string]string{"TEST_DIR": dir}})
	}})
	s := r.NewSession(map[string]any{"provider": "sh", "title": "shell"})
	b.collectConsole()
	b.signIn(r, "/s/"+s.ID, "#live-msgs")
	tid := r.Message(s.ID, "hang here")
	relaytest.Eventually(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "sh.pid")); return err == nil }, "the turn's process")
	b.acceptConfirms()
	b.clickText("button", "Kill session")
	if tr := r.WaitTurn(tid, 30*time.Second, "done", "error", "stopped"); tr.Status != "stopped" {
		t.Fatalf("the killed turn ended %s (%q), want stopped", tr.Status, tr.Error)
	}
	b.waitJS("the page to say so", `document.getElementById("status").textContent.indexOf("Kill session") === 0`, 5*time.Second)
	if tr := r.WaitTurn(r.Message(s.ID, "again"), 30*time.Second, "done", "error", "stopped"); tr.Status != "done" || !strings.HasPrefix(tr.Reply, "got: again") {
		t.Fatalf("the turn after Kill session: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}

// groupOrder is GET /api/v1/groups's ids, in its order.
func groupOrder(t *testing.T, r *relaytest.Relay) []string {
	t.Helper()
	var out struct {
		Groups []map[string]any `json:"groups"`
	}
	if st := r.Owner("GET", "/api/v1/groups", nil, &out); st != http.StatusOK {
		t.Fatalf("GET /api/v1/groups: %d", st)
	}
	var ids []string
	for _, g := range out.Groups {
		ids = append(ids, g["id"].(string))
	}
	return ids
}

// sideGroups is the order of the groups' lines in the sessions list.
func sideGroups(b *browser) []string {
	return eval[[]string](b, `Array.from(document.querySelectorAll("#live-sessions [data-group]")).map(function(e){return e.dataset.group})`)
}

// TestConsoleMoveGroupsR23_7: "Move to group" on a session's page puts it
// into a group (a new name makes one; empty takes it out); a group's menu
// has "Move up" and "Move down", which change GET /api/v1/groups's order
// and the list's.
func TestConsoleMoveGroupsR23_7(t *testing.T) {
	b := newBrowser(t)
	r := relaytest.Start(t, relaytest.Options{})
	alpha := r.NewSession(map[string]any{"title": "alpha work"})
	beta := r.NewSession(map[string]any{"title": "beta work"})
	b.collectConsole()
	b.signIn(r, "/s/"+alpha.ID, "#live-head")
	move := func(s relaytest.Session, group string) {
		t.Helper()
		b.do("open "+s.ID, chromedp.Navigate(r.URL+"/s/"+s.ID), chromedp.WaitVisible("#live-head"))
		b.clickText("#live-head summary", "Move to group")
		b.do("group "+group, chromedp.Clear("#mv-group"), chromedp.SendKeys("#mv-group", group))
		b.clickText("#live-head button", "Move")
	}
	move(alpha, "Alpha")
	relaytest.Eventually(t, 5*time.Second, func() bool {
		g, _ := r.Get(alpha.ID)["group"].(map[string]any)
		return g != nil && g["name"] == "Alpha"
	},
		"alpha in the new group Alpha")
	b.waitJS("the header to show it", `document.getElementById("live-head").textContent.indexOf("group: Alpha") >= 0`, 5*time.Second)
	move(beta, "Beta")
	relaytest.Eventually(t, 5*time.Second, func() bool { g, _ := r.Get(beta.ID)["group"].(map[string]any); return g != nil && g["name"] == "Beta" },
		"beta in the new group Beta")
	ga, gb := groupID(t, r, alpha.ID), groupID(t, r, beta.ID)

	b.do("the list", chromedp.Navigate(r.URL+"/"), chromedp.WaitVisible("#g-"+ga))
	before := sideGroups(b)
	if len(before) != 2 || !strings.Contains(strings.Join(before, " "), ga) || !strings.Contains(strings.Join(before, " "), gb) {
		t.Fatalf("the list's groups: %v", before)
	}
	first := before[0]
	b.clickText("#g-"+first+" summary", "⋯")
	b.clickText("#g-"+first+" button", "Move down")
	want := []string{before[1], before[0]}
	relaytest.Eventually(t, 5*time.Second, func() bool { return reflect.DeepEqual(groupOrder(t, r), want) }, "GET /api/v1/groups in the order %v", want)
	b.waitJS("the list in the new order", `Array.from(document.querySelectorAll("#live-sessions [data-group]")).map(function(e){return e.dataset.group}).join() === "`+strings.Join(want, ",")+`"`, 5*time.Second)
	b.clickText("#g-"+first+" summary", "⋯")
	b.clickText("#g-"+first+" button", "Move up")
	relaytest.Eventually(t, 5*time.Second, func() bool { return reflect.DeepEqual(groupOrder(t, r), before) }, "GET /api/v1/groups back in the order %v", before)
	b.waitJS("the list back in its order", `Array.from(document.querySelectorAll("#live-sessions [data-group]")).map(function(e){return e.dataset.group}).join() === "`+strings.Join(before, ",")+`"`, 5*time.Second)

	// Empty takes the session out of its group.
	move(alpha, "")
	relaytest.Eventually(t, 5*time.Second, func() bool { return r.Get(alpha.ID)["group"] == nil }, "alpha out of its group")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}
