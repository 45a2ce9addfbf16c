package relaytest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// Cards for calls to a paired relay (R5.1–R5.4, R7.8–R7.11, R13.1), with
// two relays on real HTTP over loopback: the target's checks come before
// any card, the card names what the target resolved, update_session on a
// session this conversation started there asks nobody, and the longest
// wait is the caller's relay's.

// pcCard is a card the owner saw while a turn ran.
type pcCard struct {
	action string
	target string
	lines  string
}

// pcRun writes a script as the owner in s and, while its turn runs, records
// every card the turn asks and gives it decide's answer. It returns the
// tool results in order and the cards.
func pcRun(t *testing.T, r *Relay, s Session, decide string, steps ...map[string]any) ([]map[string]any, []pcCard) {
	t.Helper()
	mid := r.Message(s.ID, Script(steps...))
	deadline := time.Now().Add(90 * time.Second)
	var cards []pcCard
	seen := map[string]bool{}
	for {
		for _, c := range r.Cards() {
			id, _ := c["id"].(string)
			if c["session"] != s.ID || seen[id] {
				continue
			}
			seen[id] = true
			var lines []string
			ls, _ := c["lines"].([]any)
			for _, l := range ls {
				s, _ := l.(string)
				lines = append(lines, s)
			}
			action, _ := c["action"].(string)
			target, _ := c["target"].(string)
			cards = append(cards, pcCard{action: action, target: target, lines: strings.Join(lines, "\n")})
			r.Decide(id, decide)
		}
		tr := r.Turn(mid)
		if tr.Status.Ended() {
			if tr.Status != "done" {
				t.Fatalf("turn of %s ended %s: %s", s.ID, tr.Status, tr.Error)
			}
			res := ToolResults(tr.Reply)
			n := 0
			for _, st := range steps {
				if _, ok := st["tool"]; ok {
					n++
				}
			}
			if len(res) != n {
				t.Fatalf("the turn's reply holds %d tool results, want %d: %q", len(res), n, tr.Reply)
			}
			return res, cards
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn %s of %s still %s after 90 s", mid, s.ID, tr.Status)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// pcBilling gives bravo two providers that bill the same models two ways
// (R7.8): Claude (the plan, switch_to claude-api) and Claude API.
func pcBilling(c *config.Config) {
	sub := config.ScriptedProvider()
	sub.ID, sub.Name, sub.SwitchTo = "claude", "Claude", "claude-api"
	api := config.ScriptedProvider()
	api.ID, api.Name = "claude-api", "Claude API"
	c.Providers = append(c.Providers, sub, api)
}

func pcSessions(t *testing.T, r *Relay) int {
	t.Helper()
	var list struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if st := r.Owner("GET", "/api/v1/sessions?scope=all", nil, &list); st != 200 {
		t.Fatalf("list sessions: %d", st)
	}
	return len(list.Sessions)
}

// TestPeerChecksBeforeCard (issue 21 item 2; R5.3, R7.9, R7.13, R4.6, R5.4,
// R7.8): a call to a paired relay that would need a card is checked there
// first: an unknown model (with its did-you-mean), an unknown group, a
// folder the relay may not use, bad quiet hours and the accept setting
// switched off are refused without any card and nothing is created. A call
// that passes shows a card naming what the target resolved: the group by
// its name and id, subscribe's digest, quiet hours and exclusions, and the
// billing partner of a send that switches.
func TestPeerChecksBeforeCard(t *testing.T) {
	a, b := prStartPair(t, nil, pcBilling)
	pairRelays(t, a, b, nil)
	var rel map[string]any
	if st := b.Owner("POST", "/api/v1/groups", map[string]any{"name": "Release 2.4"}, &rel); st != 201 {
		t.Fatalf("owner group on bravo: %d %v", st, rel)
	}
	gid, _ := rel["id"].(string)
	sb := b.NewSession(map[string]any{"title": "on the plan", "provider": "claude"})
	sa := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
	prQuiet(t, a)
	prQuiet(t, b)
	onB := func(action string, args map[string]any) map[string]any {
		m := map[string]any{"action": action, "relay": "bravo"}
		for k, v := range args {
			m[k] = v
		}
		return prTool(m)
	}

	// The accept setting off: refused before the card of the first session.
	if st := b.Owner("PATCH", "/api/v1/settings", map[string]any{"accept_agent_prompts": false}, nil); st != 200 {
		t.Fatalf("accept off: %d", st)
	}
	before := pcSessions(t, b)
	res, cards := pcRun(t, a, sa, "deny", onB("create_session", map[string]any{"text": "while closed", "wait_seconds": 5}))
	if prCode(res[0]) != "REMOTE_RELAY_NOT_ACCEPTING" {
		t.Errorf("create_session on bravo with accept off: %s (%s), want REMOTE_RELAY_NOT_ACCEPTING", prCode(res[0]), prErr(res[0]))
	}
	if len(cards) != 0 {
		t.Errorf("a card was asked before bravo's accept setting refused the call: %+v", cards)
	}
	if st := b.Owner("PATCH", "/api/v1/settings", map[string]any{"accept_agent_prompts": true}, nil); st != 200 {
		t.Fatalf("accept on: %d", st)
	}

	// Refusals without a card, then two calls that pass and show their cards.
	res, cards = pcRun(t, a, sa, "allow",
		onB("create_session", map[string]any{"text": "bad model", "model": "scripted-l", "wait_seconds": 5}),
		onB("create_session", map[string]any{"text": "bad group", "group": "Relase 2.4", "wait_seconds": 5}),
		onB("create_session", map[string]any{"text": "bad folder", "cwd": "/etc", "wait_seconds": 5}),
		onB("subscribe", map[string]any{"sessions": []string{"all"}, "quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Berlin"}}),
		onB("create_session", map[string]any{"text": "grouped child", "group": "release 2.4", "wait_seconds": 20}),
		onB("subscribe", map[string]any{"sessions": []string{"all"}, "digest_minutes": 30,
			"quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}, "exclude": []string{sb.ID}}))
	if prCode(res[0]) != "REMOTE_RELAY_UNKNOWN_MODEL" {
		t.Errorf("unknown model on bravo: %s (%s), want REMOTE_RELAY_UNKNOWN_MODEL", prCode(res[0]), prErr(res[0]))
	} else {
		if e := prErr(res[0]); !strings.Contains(e, "did you mean 'scripted-1'") || !strings.Contains(e, `"bravo"`) || !strings.Contains(e, "No session was created.") {
			t.Errorf("unknown model on bravo: error %q, want bravo's did-you-mean and No session was created.", e)
		}
		if sg, _ := res[0]["suggestions"].([]any); len(sg) == 0 || sg[0] != "scripted-1" {
			t.Errorf("unknown model on bravo: suggestions %v, want scripted-1 first", res[0]["suggestions"])
		}
	}
	if prCode(res[1]) != "REMOTE_RELAY_UNKNOWN_GROUP" || !strings.Contains(prErr(res[1]), "Release 2.4 ("+gid+")") {
		t.Errorf("unknown group on bravo: %s (%s), want REMOTE_RELAY_UNKNOWN_GROUP listing Release 2.4 (%s)", prCode(res[1]), prErr(res[1]), gid)
	}
	if prCode(res[2]) != "REMOTE_RELAY_INVALID_INPUT" || !strings.Contains(prErr(res[2]), "may not use the folder") {
		t.Errorf("folder /etc on bravo: %s (%s), want REMOTE_RELAY_INVALID_INPUT: may not use the folder", prCode(res[2]), prErr(res[2]))
	}
	if prCode(res[3]) != "REMOTE_RELAY_INVALID_INPUT" || !strings.Contains(prErr(res[3]), "is not an IANA time zone") {
		t.Errorf("quiet hours in tz Berlin on bravo: %s (%s), want REMOTE_RELAY_INVALID_INPUT", prCode(res[3]), prErr(res[3]))
	}
	if prCode(res[4]) != "ok" {
		t.Errorf("create_session with group on bravo: %v", res[4])
	}
	if prCode(res[5]) != "ok" {
		t.Errorf("subscribe with options on bravo: %v", res[5])
	}
	if len(cards) != 2 || cards[0].action != "create_session" || cards[1].action != "subscribe" {
		t.Fatalf("cards asked: %+v; want one for the grouped create_session and one for the subscribe, none before a refusal", cards)
	}
	if want := "Group: Release 2.4 (" + gid + ")"; !strings.Contains(cards[0].lines, want) {
		t.Errorf("create_session card: %q, want the group bravo resolved: %q", cards[0].lines, want)
	}
	if want := `on relay "bravo"`; !strings.Contains(cards[0].lines, want) || !strings.Contains(cards[0].lines, "Model: scripted-1") {
		t.Errorf("create_session card: %q, want %s and the model bravo picked", cards[0].lines, want)
	}
	if want := `Watch all sessions on relay "bravo" for `; !strings.Contains(cards[1].lines, want) {
		t.Errorf("subscribe card: %q, want %q", cards[1].lines, want)
	}
	if want := "digest every 30 min, quiet 23:00–06:00 Europe/Berlin, except 1 it leaves out"; !strings.Contains(cards[1].lines, want) {
		t.Errorf("subscribe card: %q, want its options %q", cards[1].lines, want)
	}
	// Only the grouped child was created on bravo.
	if n := pcSessions(t, b); n != before+1 {
		t.Errorf("bravo has %d sessions, want %d (only the grouped child)", n, before+1)
	}

	// A send that switches billing, from a conversation in ask mode.
	sk := a.NewSession(map[string]any{"title": "asker", "mode": "ask", "text": "use @bravo"})
	prQuiet(t, a)
	res, cards = pcRun(t, a, sk, "allow",
		onB("send", map[string]any{"session": sb.ID, "text": "now on the key", "provider": "claude-api", "wait_seconds": 20}),
		onB("send", map[string]any{"session": sb.ID, "text": "bad model", "model": "scripted-l", "wait_seconds": 5}))
	if prCode(res[0]) != "ok" {
		t.Errorf("send with provider on bravo: %v", res[0])
	}
	if prCode(res[1]) != "REMOTE_RELAY_UNKNOWN_MODEL" || !strings.Contains(prErr(res[1]), "Nothing was sent.") {
		t.Errorf("send with an unknown model on bravo: %s (%s), want REMOTE_RELAY_UNKNOWN_MODEL", prCode(res[1]), prErr(res[1]))
	}
	if len(cards) != 1 || cards[0].action != "send" {
		t.Fatalf("cards of the ask-mode conversation: %+v, want one for the send that switches billing", cards)
	}
	if !strings.Contains(cards[0].lines, "Switches billing to Claude API") || !strings.Contains(cards[0].lines, `"on the plan"`) {
		t.Errorf("send card: %q, want the session's title and Switches billing to Claude API", cards[0].lines)
	}
	if cards[0].target != sb.ID {
		t.Errorf("send card's target %q, want %s", cards[0].target, sb.ID)
	}
	// A send without mode passes the caller's own mode (R7.10), there too.
	if !strings.Contains(cards[0].lines, "Mode: ask") {
		t.Errorf("send card: %q, want Mode: ask, the calling conversation's mode", cards[0].lines)
	}
	if m := b.Get(sb.ID)["mode"]; m != "ask" {
		t.Errorf("the session on bravo after a send from an ask-mode conversation: mode %v, want ask", m)
	}

	// ask and answer_question with bad arguments, from the ask-mode
	// conversation: bravo's checks refuse them, no card is asked (R5.3).
	long := strings.Repeat("x", 4001)
	res, cards = pcRun(t, a, sk, "deny",
		onB("answer_question", map[string]any{"session": sb.ID, "question_id": "q_zzzzzzzzzzzz", "answer": "yes"}),
		onB("answer_question", map[string]any{"session": sb.ID, "question_id": "q_zzzzzzzzzzzz"}),
		onB("ask", map[string]any{"session": sb.ID, "question": "  "}),
		onB("ask", map[string]any{"session": sb.ID, "question": long}),
		onB("ask", map[string]any{"session": sb.ID, "question": "Ship it?", "options": []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}}))
	for i, want := range []string{"REMOTE_RELAY_NOT_FOUND", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT"} {
		if prCode(res[i]) != want {
			t.Errorf("bad %d on bravo: %s (%s), want %s before any card", i, prCode(res[i]), prErr(res[i]), want)
		}
	}
	if len(cards) != 0 {
		t.Errorf("cards asked for an ask or answer bravo refuses: %+v", cards)
	}
}

// TestPeerUpdateStartedHereNoCard (issue 21 item 3; R5.2.4, R7.10):
// update_session on a session this conversation started on a paired relay
// needs no card, since that relay records the starter; on a session there
// the conversation did not start it asks once, and another conversation
// changing the started session is asked too.
func TestPeerUpdateStartedHereNoCard(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	pairRelays(t, a, b, nil)
	sb := b.NewSession(map[string]any{"title": "the owner's"})
	sa := a.NewSession(map[string]any{"title": "starter", "text": "use @bravo"})
	prQuiet(t, a)
	res := prRun(t, a, sa, prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "started from alpha", "wait_seconds": 20}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("create_session on bravo: %v", res[0])
	}
	child, _ := res[0]["session"].(string)
	prQuiet(t, b)

	res, cards := pcRun(t, a, sa, "allow",
		prTool(map[string]any{"action": "update_session", "relay": "bravo", "session": child, "title": "renamed by its starter"}),
		prTool(map[string]any{"action": "update_session", "relay": "bravo", "session": sb.ID, "title": "renamed by an agent"}))
	for i, r := range res {
		if prCode(r) != "ok" {
			t.Errorf("update_session %d on bravo: %v", i, r)
		}
	}
	if ch, _ := res[0]["changed"].([]any); len(ch) != 1 || ch[0] != "title" {
		t.Errorf("update_session of the started session: changed %v, want [title]", res[0]["changed"])
	}
	if len(cards) != 1 || cards[0].action != "update_session" || cards[0].target != sb.ID {
		t.Fatalf("cards: %+v; want only the one for the session the conversation did not start (%s)", cards, sb.ID)
	}
	if !strings.Contains(cards[0].lines, `Change "the owner's"`) || !strings.Contains(cards[0].lines, "Title: renamed by an agent") {
		t.Errorf("update card: %q, want the session bravo resolved and the change", cards[0].lines)
	}
	if got := b.Get(child)["title"]; got != "renamed by its starter" {
		t.Errorf("the started session's title on bravo: %v", got)
	}

	// Another conversation on alpha did not start the child: it is asked.
	so := a.NewSession(map[string]any{"title": "other", "text": "use @bravo"})
	prQuiet(t, a)
	// First a change to what the session already has: it changes nothing
	// and asks nobody, though this conversation has not been allowed yet.
	res, cards = pcRun(t, a, so, "deny",
		prTool(map[string]any{"action": "update_session", "relay": "bravo", "session": sb.ID, "title": "renamed by an agent"}))
	if ch, ok := res[0]["changed"].([]any); prCode(res[0]) != "ok" || !ok || len(ch) != 0 {
		t.Errorf("update_session that changes nothing: %v, want ok and changed []", res[0])
	}
	if len(cards) != 0 {
		t.Errorf("cards of an update_session that changes nothing: %+v, want none", cards)
	}
	res, cards = pcRun(t, a, so, "allow",
		prTool(map[string]any{"action": "update_session", "relay": "bravo", "session": child, "title": "renamed by another"}))
	if prCode(res[0]) != "ok" {
		t.Errorf("update_session from another conversation: %v", res[0])
	}
	if len(cards) != 1 || cards[0].target != child {
		t.Errorf("cards of another conversation changing the child: %+v, want one", cards)
	}
}

// TestPeerWaitIsCallersLimit (issue 21 item 4; R7.11): the longest wait of
// a call to a paired relay is the caller's relay's: alpha allows 900 s,
// bravo far less; send and wait from alpha wait on bravo until the reply
// (longer than bravo's own limit), and a larger request is capped with a
// note that speaks of alpha's limit.
func TestPeerWaitIsCallersLimit(t *testing.T) {
	a := Start(t, Options{MaxWaitCap: time.Hour, Config: func(c *config.Config) {
		c.Name = "alpha"
		c.Settings.MaxWaitSeconds = 900
	}})
	// bravo's own longest wait is 1 s (the tests' cap below its 120 s).
	b := Start(t, Options{MaxWaitCap: time.Second, Config: func(c *config.Config) {
		c.Name = "bravo"
		c.Settings.MaxWaitSeconds = 120
	}})
	pairRelays(t, a, b, nil)
	sb := b.NewSession(map[string]any{"title": "slow"})
	sa := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
	prQuiet(t, a)
	m := a.Connect(sa.Token, nil)
	// Each reply comes after 3 s: bravo's own limit would have given up.
	slow := func(reply string) string {
		return Script(map[string]any{"sleep_ms": 3000}, map[string]any{"reply": reply})
	}
	checkNote := func(what string, env map[string]any) {
		t.Helper()
		note, _ := env["note"].(string)
		if !strings.Contains(note, "capped at 900") || !strings.Contains(note, `"alpha"`) || strings.Contains(note, "bravo") {
			t.Errorf("%s: note %q, want alpha's limit of 900 s and nothing of bravo's", what, note)
		}
	}
	env := m.MustOK(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": slow("slept once"), "wait_seconds": 1000})
	if env["status"] != "done" {
		t.Errorf("send from alpha to bravo: status %v, want done (waited by alpha's limit): %v", env["status"], env)
	} else if rp, _ := env["reply"].(map[string]any); !strings.Contains(str(rp["text"]), "slept once") {
		t.Errorf("send's reply: %v", env["reply"])
	}
	checkNote("send with wait_seconds 1000", env)

	env = m.MustOK(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": slow("slept twice"), "wait_seconds": 0})
	mid, _ := env["message_id"].(string)
	if mid == "" {
		t.Fatalf("send without waiting: %v", env)
	}
	env = m.MustOK(map[string]any{"action": "wait", "relay": "bravo", "session": sb.ID, "message_id": mid, "wait_seconds": 1000})
	if env["status"] != "done" {
		t.Errorf("wait from alpha on bravo: status %v, want done (waited by alpha's limit): %v", env["status"], env)
	}
	checkNote("wait with wait_seconds 1000", env)
	// Within alpha's limit: no note at all, although bravo's is smaller.
	env = m.MustOK(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": slow("slept thrice"), "wait_seconds": 60})
	if env["status"] != "done" {
		t.Errorf("send with wait_seconds 60: status %v, want done: %v", env["status"], env)
	}
	if note, ok := env["note"]; ok {
		t.Errorf("send with wait_seconds 60 within alpha's limit: note %v, want none", note)
	}
}

// TestPeerCheckOlderRelay (issue 21 item 2; R13.3): a paired relay that
// does not serve the check keeps the old order, card first: one whose hello
// lacks "check" is never asked, and one whose pairing knows no features
// (its hello listed none) is asked, answers 404 (as text, or as JSON the
// way this project's router answers an unknown route), and the card still
// comes.
func TestPeerCheckOlderRelay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		features []string
		checks   int
		jsonNF   bool // the 404 as this project's router writes it (JSON, REMOTE_RELAY_NOT_FOUND)
	}{
		{"hello without check", []string{"call", "events", "asks", "inbox", "exclude", "task_output", "update_session", "billing_switch", "groups"}, 0, false},
		{"no features known", []string{}, 1, false},
		{"no features known, JSON 404", []string{}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := prStartPair(t, nil, nil)
			var mu sync.Mutex
			checks := 0
			old := startOlderPeer(t, b, "0.9.18", tc.features)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/peer/v1/check" {
					mu.Lock()
					checks++
					mu.Unlock()
					if tc.jsonNF {
						// An older relay of this project: its router's NoRoute answers JSON.
						w.Header().Set("Content-Type", "application/json; charset=utf-8")
						w.WriteHeader(http.StatusNotFound)
						_, _ = w.Write([]byte(`{"code":"REMOTE_RELAY_NOT_FOUND","error":"No such route: POST /peer/v1/check"}`))
						return
					}
					http.NotFound(w, r) // a relay from before the check
					return
				}
				u, _ := url.Parse(old.srv.URL)
				httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
			}))
			t.Cleanup(front.Close)
			tok, _ := newPeerToken(t, b)
			var p map[string]any
			if code := a.Owner("POST", "/api/v1/relays", map[string]any{"url": front.URL, "token": tok}, &p); code != 201 || p["name"] != "bravo" {
				t.Fatalf("pair the older bravo: %d %v", code, p)
			}
			sa := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
			prQuiet(t, a)
			res, cards := pcRun(t, a, sa, "allow",
				prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "bad model", "model": "scripted-l", "wait_seconds": 5}))
			if prCode(res[0]) != "REMOTE_RELAY_UNKNOWN_MODEL" {
				t.Errorf("create_session with a bad model on the older bravo: %s (%s)", prCode(res[0]), prErr(res[0]))
			}
			if len(cards) != 1 || cards[0].action != "create_session" {
				t.Errorf("cards: %+v, want the first-session card before the call, as before", cards)
			}
			// A bad wait_seconds is refused here before any card (a fresh
			// conversation's first session would ask one), whatever that relay serves.
			s2 := a.NewSession(map[string]any{"title": "second caller", "text": "use @bravo"})
			prQuiet(t, a)
			res, cards = pcRun(t, a, s2, "allow",
				prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "bad wait", "wait_seconds": -1}))
			if prCode(res[0]) != "REMOTE_RELAY_INVALID_INPUT" || len(cards) != 0 {
				t.Errorf("create_session with wait_seconds -1 on the older bravo: %s (%s), cards %+v; want REMOTE_RELAY_INVALID_INPUT and no card", prCode(res[0]), prErr(res[0]), cards)
			}
			mu.Lock()
			defer mu.Unlock()
			if checks != tc.checks {
				t.Errorf("checks sent to the older bravo: %d, want %d", checks, tc.checks)
			}
		})
	}
}

// TestPeerTransferCheckedBeforeCard (R5.3, R8.24): transfer_subscriptions
// on a paired relay always asks a card, but that relay's checks come
// first: a move that would give the conversation more subscriptions there
// than it allows is refused without a card and nothing moves.
func TestPeerTransferCheckedBeforeCard(t *testing.T) {
	a, b := prStartPair(t, nil, func(c *config.Config) { c.Limits.SubscriptionsPerConversation = 1 })
	pairRelays(t, a, b, nil)
	watched := b.NewSession(map[string]any{"title": "watched"})
	c1 := a.NewSession(map[string]any{"title": "first watcher", "text": "use @bravo"})
	c2 := a.NewSession(map[string]any{"title": "second watcher", "text": "use @bravo"})
	prQuiet(t, a)
	sub := prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{watched.ID}, "events": []string{"turn_end"}})
	for _, c := range []Session{c1, c2} {
		if res, _ := pcRun(t, a, c, "allow", sub); prCode(res[0]) != "ok" {
			t.Fatalf("subscribe on bravo from %s: %v", c.ID, res[0])
		}
	}
	res, cards := pcRun(t, a, c2, "deny", prTool(map[string]any{"action": "transfer_subscriptions", "relay": "bravo", "from": c1.ID}))
	if prCode(res[0]) != "REMOTE_RELAY_LIMIT" {
		t.Errorf("transfer over bravo's limit: %s (%s), want REMOTE_RELAY_LIMIT", prCode(res[0]), prErr(res[0]))
	}
	if len(cards) != 0 {
		t.Errorf("a card was asked for a transfer bravo refuses: %+v", cards)
	}
}

// TestPeerCapCheckedBeforeCard (R5.3, R6.1): the cap of sessions one paired
// relay's conversations keep at work on a relay is among the checks there
// before a card: with bravo's cap at 1 and one session alpha's agent started
// there still at work, a create_session that would need a card is refused
// without one.
func TestPeerCapCheckedBeforeCard(t *testing.T) {
	a, b := prStartPair(t, nil, func(c *config.Config) { c.Limits.ActiveSessionsPerPeerToken = 1 })
	pairRelays(t, a, b, nil)
	c1 := a.NewSession(map[string]any{"title": "starter", "text": "use @bravo"})
	prQuiet(t, a)
	// The child's turn waits on a question: it stays at work.
	busy := Script(map[string]any{"question": map[string]any{"text": "Go on?", "options": []string{"yes"}}}, map[string]any{"reply": "went on"})
	res, _ := pcRun(t, a, c1, "allow", prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": busy, "wait_seconds": 0}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("create_session on bravo: %v", res[0])
	}
	child, _ := res[0]["session"].(string)
	Eventually(t, 20*time.Second, func() bool {
		q, _ := b.Get(child)["pendingQuestions"].([]any)
		return len(q) > 0
	}, "the child's question on bravo")
	c2 := a.NewSession(map[string]any{"title": "second", "text": "use @bravo"})
	prQuiet(t, a)
	before := pcSessions(t, b)
	res, cards := pcRun(t, a, c2, "deny", prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "one more", "wait_seconds": 0}))
	if prCode(res[0]) != "REMOTE_RELAY_SESSION_LIMIT" || !strings.Contains(prErr(res[0]), "per paired relay") {
		t.Errorf("create_session over bravo's cap per paired relay: %s (%s), want REMOTE_RELAY_SESSION_LIMIT", prCode(res[0]), prErr(res[0]))
	}
	if len(cards) != 0 {
		t.Errorf("a card was asked for a create_session bravo refuses: %+v", cards)
	}
	if n := pcSessions(t, b); n != before {
		t.Errorf("bravo has %d sessions, want %d", n, before)
	}
}

// peerPost sends a peer request's body to path on r with a peer token and
// returns the status and the decoded answer (nil when it is not JSON).
func peerPost(t *testing.T, r *Relay, path, token string, body any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", r.URL+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var env map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.StatusCode, env
}

// TestPeerCheckEndpoint (R5.3, R13.1, R13.4, R18.20, R7.11): POST
// /peer/v1/check takes a peer token as /peer/v1/call does (a token this relay
// did not issue is 401; a token bound to one relay cannot speak for another)
// and changes nothing: after checks of create_session, send, subscribe and
// ask there is no new session, no prompt, no subscription and no ask. A
// paired relay's call waits by the wait it carries, bounded by 3600 s.
func TestPeerCheckEndpoint(t *testing.T) {
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	tok, _ := newPeerToken(t, b)
	sb := b.NewSession(map[string]any{"title": "target"})
	post := func(path, token, relay, action string, args map[string]any) (int, map[string]any) {
		t.Helper()
		return peerPost(t, b, path, token, map[string]any{"action": action, "args": args,
			"origin": map[string]any{"relay": relay, "session": "0123456789abcdef", "title": "caller", "model": "scripted-1", "path": []string{relay}}})
	}
	if st, env := post("/peer/v1/check", "not-a-peer-token-of-bravo", "alpha", "create_session", map[string]any{"text": "x"}); st != http.StatusUnauthorized {
		t.Errorf("check with a token bravo did not issue: %d %v, want 401", st, env)
	}
	sessions := pcSessions(t, b)
	checks := []struct {
		action string
		args   map[string]any
	}{
		{"create_session", map[string]any{"text": "a new session", "wait_seconds": 5}},
		{"send", map[string]any{"session": sb.ID, "text": "a prompt", "wait_seconds": 5}},
		{"subscribe", map[string]any{"sessions": []string{sb.ID}}},
		{"ask", map[string]any{"session": sb.ID, "question": "Ship it?"}},
	}
	for _, c := range checks {
		st, env := post("/peer/v1/check", tok, "alpha", c.action, c.args)
		if st != http.StatusOK || env["ok"] != true {
			t.Errorf("check of %s: %d %v", c.action, st, env)
		} else if chk, _ := env["check"].(map[string]any); chk["action"] != c.action {
			t.Errorf("check of %s: check %v", c.action, env["check"])
		}
	}
	if st, env := post("/peer/v1/check", tok, "delta", "create_session", map[string]any{"text": "x"}); st != http.StatusOK || prCode(env) != "REMOTE_RELAY_AUTH" {
		t.Errorf("check speaking for delta with alpha's token: %d %v, want REMOTE_RELAY_AUTH", st, env)
	}
	if n := pcSessions(t, b); n != sessions {
		t.Errorf("bravo has %d sessions after the checks, want %d", n, sessions)
	}
	if msgs, _ := b.Get(sb.ID)["messages"].([]any); len(msgs) != 0 {
		t.Errorf("the target has messages after a check of send: %v", msgs)
	}
	if _, env := post("/peer/v1/call", tok, "alpha", "list_subscriptions", map[string]any{}); prCode(env) != "ok" {
		t.Errorf("list_subscriptions: %v", env)
	} else if subs, _ := env["subscriptions"].([]any); len(subs) != 0 {
		t.Errorf("subscriptions after a check of subscribe: %v", subs)
	}
	if _, env := post("/peer/v1/call", tok, "alpha", "list_questions", map[string]any{}); prCode(env) != "ok" {
		t.Errorf("list_questions: %v", env)
	} else if qs, _ := env["questions"].([]any); len(qs) != 0 {
		t.Errorf("asks after a check of ask: %v", qs)
	}
	// A wait beyond what any relay may allow is bounded by 3600 s, and says so.
	_, env := post("/peer/v1/call", tok, "alpha", "send", map[string]any{"session": sb.ID, "text": "hi", "wait_seconds": 5000})
	if prCode(env) != "ok" || env["status"] != "done" {
		t.Fatalf("send with wait_seconds 5000: %v", env)
	}
	if note, _ := env["note"].(string); !strings.Contains(note, "capped at 3600") {
		t.Errorf("send with wait_seconds 5000: note %q, want the 3600 s bound", note)
	}
}

// TestPeerCheckedCardLinesSafe (R18.16, R5.1): what a paired relay's check
// answers goes into the card made safe for a line: a title, a provider, a
// folder, a group or a session id with line breaks, escape sequences or a
// great length neither breaks a line nor carries the escapes, and a card
// has exactly its lines.
func TestPeerCheckedCardLinesSafe(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	hostile := "line one\nline two\r\n\x1b[31mred\x1b[0m \u2028sep " + strings.Repeat("y", 3000)
	answer, _ := json.Marshal(map[string]any{"ok": true, "check": map[string]any{
		"action": "create_session", "title": hostile, "provider": hostile, "model": hostile, "effort": hostile, "mode": hostile,
		"cwd": hostile, "group": map[string]any{"id": hostile, "name": hostile},
		"session": map[string]any{"id": "0123456789abcdef\n" + hostile, "title": hostile}}})
	u, _ := url.Parse(b.URL)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/peer/v1/check" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
			return
		}
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	tok, _ := newPeerToken(t, b)
	if code := a.Owner("POST", "/api/v1/relays", map[string]any{"url": front.URL, "token": tok}, nil); code != 201 {
		t.Fatalf("pair bravo behind the front: %d", code)
	}
	sb := b.NewSession(map[string]any{"title": "target"})
	sk := a.NewSession(map[string]any{"title": "asker", "mode": "ask", "text": "use @bravo"})
	prQuiet(t, a)
	_, cards := pcRun(t, a, sk, "deny",
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "child"}),
		prTool(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "hi"}))
	if len(cards) != 2 {
		t.Fatalf("cards: %+v, want one for the create_session and one for the send", cards)
	}
	// create_session: its line, the settings, the group, two reasons; send: its line, the settings, the reason.
	for i, want := range []int{5, 3} {
		lines := strings.Split(cards[i].lines, "\n")
		if len(lines) != want {
			t.Errorf("card %d (%s) has %d lines, want %d: %q", i, cards[i].action, len(lines), want, cards[i].lines)
		}
		for _, l := range lines {
			if strings.ContainsAny(l, "\r\x1b\u2028") || len(l) > 2000 {
				t.Errorf("card %d line not made safe (%d bytes): %q", i, len(l), l)
			}
		}
	}
	if tg := cards[1].target; strings.ContainsAny(tg, "\n\r\x1b") || len(tg) > 64*4 {
		t.Errorf("send card's target from bravo's check not made safe (%d bytes): %.200q", len(tg), tg)
	}
}
