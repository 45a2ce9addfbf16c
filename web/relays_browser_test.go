package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// pairings is GET /api/v1/relays on r.
func pairings(t *testing.T, r *relaytest.Relay) []map[string]any {
	t.Helper()
	var out struct {
		Relays []map[string]any `json:"relays"`
	}
	if st := r.Owner("GET", "/api/v1/relays", nil, &out); st != 200 {
		t.Fatalf("GET /api/v1/relays: status %d", st)
	}
	return out.Relays
}

// TestRelaysPageInBrowser drives the Relays page in headless Chromium against
// two real relays: pairing with a peer token made on the other relay, the
// "Agents may" level changed in the page, a refused pairing (its error
// sentence in the form, nothing stored), a peer token made and shown once,
// an offline pairing's reason, and Remove after a confirm().
func TestRelaysPageInBrowser(t *testing.T) {
	b := newBrowser(t)
	desk := relaytest.Start(t, relaytest.Options{})
	bravo := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	var tok struct {
		Token string `json:"token"`
	}
	if st := bravo.Owner("POST", "/api/v1/peer-tokens", map[string]any{"label": "browser test"}, &tok); st != 201 || !strings.HasPrefix(tok.Token, "rpt_") {
		t.Fatalf("peer token on bravo: status %d, %+v", st, tok)
	}
	b.collectConsole()

	// ---- sign in straight into /relays: only this relay is listed -------------
	b.do("open /relays", chromedp.Navigate(desk.URL+"/relays"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", relaytest.OwnerToken), chromedp.Submit("#token"), chromedp.WaitVisible("#live-relays"))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	if list := b.text("#live-relays"); !strings.Contains(list, "desk") || !strings.Contains(list, "this relay") || !strings.Contains(list, "No paired relays.") {
		t.Fatalf("before pairing the list reads %q", list)
	}
	if strings.Contains(b.text("main"), "not available") {
		t.Fatalf("the page still says pairing is not available")
	}
	if lvl := eval[string](b, `document.querySelector("#pair-perm").value`); lvl != "full" {
		t.Errorf("the pair form's level starts at %q, want full", lvl)
	}

	// ---- pair bravo through the form ------------------------------------------
	b.do("pair bravo", chromedp.SendKeys("#pair-url", bravo.URL), chromedp.SendKeys("#pair-token", tok.Token),
		chromedp.Click(`#pair-form button[type=submit]`))
	b.waitJS("bravo in the list", `!!document.querySelector("#r-bravo .st-online")`, 10*time.Second)
	row := b.text("#r-bravo")
	for _, want := range []string{"bravo", bravo.URL, "online", "version", "seen"} {
		if !strings.Contains(row, want) {
			t.Errorf("bravo's row %q lacks %q", row, want)
		}
	}
	if n := eval[int](b, `document.querySelectorAll("#live-relays .rrow").length`); n != 1 {
		t.Errorf("%d pairings listed, want 1", n)
	}
	if eval[bool](b, `!!document.querySelector("#r-none")`) {
		t.Errorf("the list still says there are no paired relays")
	}
	if lvl := eval[string](b, `document.querySelector("#rp-bravo").value`); lvl != "full" {
		t.Errorf("bravo's level shows %q, want full", lvl)
	}
	opts := eval[[]string](b, `Array.from(document.querySelectorAll("#rp-bravo option")).map(function(o){return o.value+"="+o.textContent})`)
	if got := strings.Join(opts, "|"); got != "none=Nothing|read=Read|prompt=Read and prompt|full=Full" {
		t.Errorf("the level's options are %q", got)
	}
	if eval[string](b, `document.querySelector("#pair-url").value`) != "" || eval[string](b, `document.querySelector("#pair-token").value`) != "" {
		t.Errorf("the pair form kept what was typed after pairing")
	}
	if ps := pairings(t, desk); len(ps) != 1 || ps[0]["name"] != "bravo" || ps[0]["permission"] != "full" || ps[0]["online"] != true {
		t.Fatalf("after pairing in the page the API lists %v", ps)
	}

	// ---- the level, changed in the page, is PATCHed --------------------------
	eval[bool](b, `(function(){var s=document.querySelector("#rp-bravo"); s.value="read"; s.dispatchEvent(new Event("change",{bubbles:true})); return true})()`)
	relaytest.Eventually(t, 5*time.Second, func() bool {
		ps := pairings(t, desk)
		return len(ps) == 1 && ps[0]["permission"] == "read"
	}, "bravo's permission read after changing the select")
	b.waitJS("the page to show Read", `(function(){var o=document.querySelector("#rp-bravo option[selected]"); return !!o && o.value === "read"})()`, 5*time.Second)

	// ---- a refused pairing: the API's sentence in the form, nothing stored ----
	b.do("pair a public http:// URL", chromedp.SendKeys("#pair-url", "http://8.8.8.8"), chromedp.SendKeys("#pair-token", "rpt_nothing"),
		chromedp.Click(`#pair-form button[type=submit]`))
	b.waitJS("the error sentence", `!document.querySelector("#pair-error").hidden`, 10*time.Second)
	if msg := b.text("#pair-error"); !strings.Contains(msg, "plain http:// on a public address") || !strings.Contains(msg, "Nothing was paired.") {
		t.Errorf("the form's error reads %q", msg)
	}
	if v := eval[string](b, `document.querySelector("#pair-url").value`); v != "http://8.8.8.8" {
		t.Errorf("after a refusal the URL field holds %q, want what was typed", v)
	}
	if n := eval[int](b, `document.querySelectorAll("#live-relays .rrow").length`); n != 1 {
		t.Errorf("after the refusal %d pairings are listed, want 1", n)
	}
	if ps := pairings(t, desk); len(ps) != 1 || ps[0]["name"] != "bravo" || ps[0]["permission"] != "read" {
		t.Errorf("after the refusal the API lists %v", ps)
	}

	// ---- a peer token, made in the page and shown once ------------------------
	if eval[bool](b, `!document.querySelector("#pt-out").hidden`) {
		t.Errorf("the peer token part shows before a token was made")
	}
	b.do("make a peer token", chromedp.Click("#pt-make"))
	b.waitJS("the token", `!document.querySelector("#pt-out").hidden && document.querySelector("#pt-token").value.indexOf("rpt_") === 0`, 5*time.Second)
	if !eval[bool](b, `document.querySelector("#pt-token").readOnly`) {
		t.Errorf("the token field is not read-only")
	}
	if s := b.text("#pt-out"); !strings.Contains(s, "shown only once") || !strings.Contains(s, "Pair a relay") {
		t.Errorf("the token's sentence reads %q", s)
	}
	// The token shown is one the relay accepts for pairing: bravo pairs with desk by it.
	made := eval[string](b, `document.querySelector("#pt-token").value`)
	var back map[string]any
	if st := bravo.Owner("POST", "/api/v1/relays", map[string]any{"url": desk.URL, "token": made}, &back); st != 201 || back["name"] != "desk" {
		t.Errorf("bravo pairing with the token the page showed: status %d, %v", st, back)
	}

	// ---- an offline pairing carries its reason as a tooltip ------------------
	eval[bool](b, `(function(){document.querySelector("#pair-url").value=""; document.querySelector("#pair-token").value=""; return true})()`)
	b.do("pair an offline relay", chromedp.SendKeys("#pair-url", "http://127.0.0.1:1"), chromedp.SendKeys("#pair-token", "rpt_unreachable"), chromedp.SendKeys("#pair-name", "down"),
		chromedp.Click(`#pair-form button[type=submit]`))
	b.waitJS("the offline pairing", `!!document.querySelector("#r-down .st-offline")`, 10*time.Second)
	if why := eval[string](b, `document.querySelector("#r-down .st-offline").title`); why == "" || why == "No answer yet." {
		t.Errorf("the offline pairing's tooltip is %q, want the offline reason", why)
	}
	if eval[bool](b, `!document.querySelector("#pair-error").hidden`) {
		t.Errorf("the earlier error still shows after a pairing that worked")
	}
	// Two pairings at 360 px: nothing scrolls sideways.
	shot := b.screenshot(artifacts(t), "console-relays-360.png", 360, 740)
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the relays page is %d px wide (scrolls sideways)", w)
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))

	// ---- Remove asks first; declined, nothing goes -----------------------------
	// window.__sent: the calls the page sends (not GETs), from here on.
	eval[bool](b, `(function(){window.__asked=""; window.__sent=[]; if(!window.__spied){var f=window.fetch; window.fetch=function(u,o){if(o&&o.method&&o.method!=="GET")window.__sent.push(o.method+" "+u); return f.apply(this, arguments)}; window.__spied=true}; window.confirm=function(m){window.__asked=m; return false}; return true})()`)
	b.do("Remove, declined", chromedp.ScrollIntoView(`#r-bravo button.deny`), chromedp.Click(`#r-bravo button.deny`))
	if asked := eval[string](b, `window.__asked`); !strings.Contains(asked, "bravo") {
		t.Errorf("Remove asked %q, want a confirm naming bravo", asked)
	}
	// The click's handler has run (this evaluation comes after it); a call it
	// made would be in window.__sent now, though not yet at the relay.
	if sent := eval[string](b, `window.__sent.join(", ")`); sent != "" {
		t.Errorf("a declined Remove sent %s", sent)
	}
	if ps := pairings(t, desk); len(ps) != 2 {
		t.Errorf("after a declined Remove the API lists %v", ps)
	}
	eval[bool](b, `(function(){window.confirm=function(m){window.__asked=m; return true}; return true})()`)
	for _, name := range []string{"bravo", "down"} {
		b.do("Remove "+name, chromedp.ScrollIntoView(`#r-`+name+` button.deny`), chromedp.Click(`#r-`+name+` button.deny`))
		b.waitJS(name+" to leave the list", `!document.querySelector("#r-`+name+`")`, 5*time.Second)
	}
	b.waitJS("the empty list", `!document.querySelector("#live-relays .rrow") && !!document.querySelector("#r-none")`, 5*time.Second)
	if ps := pairings(t, desk); len(ps) != 0 {
		t.Errorf("after Remove the API lists %v", ps)
	}

	// ---- no console errors -------------------------------------------------------
	// The refused pairing's 400 is the one error the browser logs by itself.
	var errs []string
	for _, e := range b.errors() {
		if !strings.Contains(e, "status of 400") || !strings.Contains(e, "/api/v1/relays)") {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("screenshot: %s", shot)
}

// peerStatus is the HTTP status of POST /peer/v1/call on r with tok, as
// relay's conversation "s1" (list_sessions).
func peerStatus(t *testing.T, r *relaytest.Relay, tok, relay string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"action": "list_sessions", "args": map[string]any{},
		"origin": map[string]any{"relay": relay, "session": "s1", "title": "t", "model": "m", "path": []string{relay}}})
	req, _ := http.NewRequest(http.MethodPost, r.URL+"/peer/v1/call", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// peerTokenList is GET /api/v1/peer-tokens on r.
func peerTokenList(t *testing.T, r *relaytest.Relay) []map[string]any {
	t.Helper()
	var out struct {
		PeerTokens []map[string]any `json:"peerTokens"`
	}
	if st := r.Owner("GET", "/api/v1/peer-tokens", nil, &out); st != 200 {
		t.Fatalf("GET /api/v1/peer-tokens: status %d", st)
	}
	return out.PeerTokens
}

// TestPeerTokensInBrowser (R18.20, R19.5): the Relays page lists this relay's
// peer tokens — id, the relay bound at first use or "not used yet", made,
// last used; never the token — a token made in the page joins the list, and
// Revoke (after a confirm) ends a token at once: its next /peer/v1 call is 401.
func TestPeerTokensInBrowser(t *testing.T) {
	b := newBrowser(t)
	desk := relaytest.Start(t, relaytest.Options{})
	var made struct {
		Token string `json:"token"`
		ID    string `json:"id"`
	}
	if st := desk.Owner("POST", "/api/v1/peer-tokens", map[string]any{"label": "for bravo"}, &made); st != 201 || made.ID == "" {
		t.Fatalf("peer token: status %d, %+v", st, made)
	}
	// bravo's first call binds the token to bravo.
	if st := peerStatus(t, desk, made.Token, "bravo"); st != http.StatusOK {
		t.Fatalf("bravo's first peer call: %d", st)
	}
	relaytest.Eventually(t, 5*time.Second, func() bool {
		l := peerTokenList(t, desk)
		return len(l) == 1 && l[0]["relay"] == "bravo" && !strings.HasPrefix(fmt.Sprint(l[0]["lastUsedAt"]), "0001")
	}, "the token bound to bravo, its use recorded")
	b.collectConsole()

	b.do("open /relays", chromedp.Navigate(desk.URL+"/relays"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", relaytest.OwnerToken), chromedp.Submit("#token"), chromedp.WaitVisible("#live-peertokens"))
	b.waitJS("the stream", `document.body.dataset.stream === "open"`, 5*time.Second)
	row := "#ptk-" + made.ID
	b.waitJS("bravo's token listed", `!!document.querySelector("`+row+`")`, 5*time.Second)
	got := b.text(row)
	for _, want := range []string{made.ID, "used by bravo", "for bravo", "made ", "last used ", "Revoke"} {
		if !strings.Contains(got, want) {
			t.Errorf("the token's row %q lacks %q", got, want)
		}
	}
	if n := eval[int](b, `document.querySelectorAll("#live-peertokens .ptrow").length`); n != 1 {
		t.Errorf("%d peer tokens listed, want 1", n)
	}
	if html := eval[string](b, `document.documentElement.outerHTML`); strings.Contains(html, made.Token) {
		t.Fatalf("the page holds a peer token")
	}

	// ---- a token made in the page joins the list, "not used yet" --------------
	b.do("make a peer token", chromedp.Click("#pt-make"))
	b.waitJS("the new token", `document.querySelector("#pt-token").value.indexOf("rpt_") === 0`, 5*time.Second)
	b.waitJS("two tokens listed", `document.querySelectorAll("#live-peertokens .ptrow").length === 2`, 5*time.Second)
	fresh := eval[string](b, `document.querySelector("#pt-token").value`)
	var freshID string
	for _, p := range peerTokenList(t, desk) {
		if p["id"] != made.ID {
			freshID, _ = p["id"].(string)
		}
	}
	if freshID == "" {
		t.Fatalf("the token made in the page is not listed by the API")
	}
	if s := b.text("#ptk-" + freshID); !strings.Contains(s, "not used yet") || !strings.Contains(s, "never used") {
		t.Errorf("the new token's row reads %q", s)
	}
	if l := eval[string](b, `document.querySelector("#live-peertokens").outerHTML`); strings.Contains(l, fresh) || strings.Contains(l, "rpt_") {
		t.Errorf("the list holds a token")
	}
	shot := b.screenshot(artifacts(t), "console-peer-tokens-360.png", 360, 900)
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the relays page is %d px wide (scrolls sideways)", w)
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 900))

	// ---- Revoke asks first; declined, the token still works --------------------
	btn := row + " button.deny"
	// window.__sent: the calls the page sends (not GETs), from here on.
	eval[bool](b, `(function(){window.__asked=""; window.__sent=[]; if(!window.__spied){var f=window.fetch; window.fetch=function(u,o){if(o&&o.method&&o.method!=="GET")window.__sent.push(o.method+" "+u); return f.apply(this, arguments)}; window.__spied=true}; window.confirm=function(m){window.__asked=m; return false}; return true})()`)
	b.do("Revoke, declined", chromedp.ScrollIntoView(btn), chromedp.Click(btn))
	if asked := eval[string](b, `window.__asked`); !strings.Contains(asked, made.ID) || !strings.Contains(asked, "bravo") {
		t.Errorf("Revoke asked %q, want a confirm naming the token and bravo", asked)
	}
	// The click's handler has run (this evaluation comes after it); a call it
	// made would be in window.__sent now, though not yet at the relay.
	if sent := eval[string](b, `window.__sent.join(", ")`); sent != "" {
		t.Errorf("a declined Revoke sent %s", sent)
	}
	if st := peerStatus(t, desk, made.Token, "bravo"); st != http.StatusOK {
		t.Fatalf("after a declined Revoke the token answers %d", st)
	}
	eval[bool](b, `(function(){window.confirm=function(){return true}; return true})()`)
	b.do("Revoke", chromedp.ScrollIntoView(btn), chromedp.Click(btn))
	b.waitJS("the token to leave the list", `!document.querySelector("`+row+`")`, 5*time.Second)
	if st := peerStatus(t, desk, made.Token, "bravo"); st != http.StatusUnauthorized {
		t.Errorf("a /peer/v1 call with the revoked token: %d, want 401", st)
	}
	if st := peerStatus(t, desk, fresh, "charlie"); st != http.StatusOK {
		t.Errorf("the other token after the revocation: %d", st)
	}
	if l := peerTokenList(t, desk); len(l) != 1 || l[0]["id"] != freshID {
		t.Errorf("after Revoke the API lists %v", l)
	}
	if n := eval[int](b, `document.querySelectorAll("#live-peertokens .ptrow").length`); n != 1 {
		t.Errorf("after Revoke %d tokens listed, want 1", n)
	}
	b.screenshot(artifacts(t), "console-peer-tokens-revoked.png", 1280, 900)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
	t.Logf("screenshot: %s", shot)
}
