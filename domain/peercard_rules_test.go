package domain

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
)

// Cards for calls to a paired relay (R5.1–R5.4, R7.8–R7.11, R13.1), with
// linked fixtures (peerlink_fixture_test.go): the target's checks come
// before any card, the card names what the target resolved, update_session
// on a session this conversation started there asks nobody, and the
// longest wait is the caller's relay's. Moved down from
// relaytest/peer_card_test.go.

// cardBilling gives a relay two more providers that bill the same models
// two ways (R7.8): Claude (the plan, switch_to claude-api) and Claude API.
func cardBilling() []provider.Info {
	s := config.ScriptedProvider()
	info := func(id, name, switchTo string) provider.Info {
		return provider.Info{ID: id, Name: name, Models: s.Models, DefaultModel: s.DefaultModel, Efforts: s.Efforts, SwitchTo: switchTo}
	}
	return []provider.Info{info(s.ID, s.Name, ""), info("claude", "Claude", "claude-api"), info("claude-api", "Claude API", "")}
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
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{providers: cardBilling()})
	rel, err := b.r.CreateGroup(b.ctx, "Release 2.4")
	if err != nil {
		t.Fatalf("owner group on bravo: %v", err)
	}
	gid := rel.ID
	sb := b.newSession(NewSession{Title: "on the plan", Provider: "claude"})
	sa := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
	onB := func(action string, args map[string]any) map[string]any { return onRelay("bravo", action, args) }

	// The accept setting off: refused before the card of the first session.
	b.setAccept(false)
	before := b.sessionCount()
	res, cards := a.runDecide(sa, "deny", onB("create_session", map[string]any{"text": "while closed", "wait_seconds": 5}))
	if linkCode(res[0]) != "REMOTE_RELAY_NOT_ACCEPTING" {
		t.Errorf("create_session on bravo with accept off: %s (%s), want REMOTE_RELAY_NOT_ACCEPTING", linkCode(res[0]), linkErr(res[0]))
	}
	if len(cards) != 0 {
		t.Errorf("a card was asked before bravo's accept setting refused the call: %+v", cards)
	}
	b.setAccept(true)

	// Refusals without a card, then two calls that pass and show their cards.
	res, cards = a.runDecide(sa, "allow",
		onB("create_session", map[string]any{"text": "bad model", "model": "scripted-l", "wait_seconds": 5}),
		onB("create_session", map[string]any{"text": "bad group", "group": "Relase 2.4", "wait_seconds": 5}),
		onB("create_session", map[string]any{"text": "bad folder", "cwd": "/etc", "wait_seconds": 5}),
		onB("subscribe", map[string]any{"sessions": []string{"all"}, "quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Berlin"}}),
		onB("create_session", map[string]any{"text": "grouped child", "group": "release 2.4", "wait_seconds": 20}),
		onB("subscribe", map[string]any{"sessions": []string{"all"}, "digest_minutes": 30,
			"quiet_hours": map[string]any{"from": "23:00", "to": "06:00", "tz": "Europe/Berlin"}, "exclude": []string{sb}}))
	if linkCode(res[0]) != "REMOTE_RELAY_UNKNOWN_MODEL" {
		t.Errorf("unknown model on bravo: %s (%s), want REMOTE_RELAY_UNKNOWN_MODEL", linkCode(res[0]), linkErr(res[0]))
	} else {
		if e := linkErr(res[0]); !strings.Contains(e, "did you mean 'scripted-1'") || !strings.Contains(e, `"bravo"`) || !strings.Contains(e, "No session was created.") {
			t.Errorf("unknown model on bravo: error %q, want bravo's did-you-mean and No session was created.", e)
		}
		if sg, _ := res[0]["suggestions"].([]any); len(sg) == 0 || sg[0] != "scripted-1" {
			t.Errorf("unknown model on bravo: suggestions %v, want scripted-1 first", res[0]["suggestions"])
		}
	}
	for i, want := range []struct{ code, says string }{
		1: {"REMOTE_RELAY_UNKNOWN_GROUP", "Release 2.4 (" + gid + ")"},
		2: {"REMOTE_RELAY_INVALID_INPUT", "may not use the folder"},
		3: {"REMOTE_RELAY_INVALID_INPUT", "is not an IANA time zone"},
		4: {"ok", ""},
		5: {"ok", ""},
	} {
		if i == 0 {
			continue
		}
		if linkCode(res[i]) != want.code || !strings.Contains(linkErr(res[i]), want.says) {
			t.Errorf("call %d on bravo: %s (%s), want %s: %s", i, linkCode(res[i]), linkErr(res[i]), want.code, want.says)
		}
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
	if n := b.sessionCount(); n != before+1 {
		t.Errorf("bravo has %d sessions, want %d (only the grouped child)", n, before+1)
	}

	// A send that switches billing, from a conversation in ask mode.
	sk := a.newSession(NewSession{Title: "asker", Mode: "ask", Text: "use @bravo"})
	res, cards = a.runDecide(sk, "allow",
		onB("send", map[string]any{"session": sb, "text": "now on the key", "provider": "claude-api", "wait_seconds": 20}),
		onB("send", map[string]any{"session": sb, "text": "bad model", "model": "scripted-l", "wait_seconds": 5}))
	if linkCode(res[0]) != "ok" {
		t.Errorf("send with provider on bravo: %v", res[0])
	}
	if linkCode(res[1]) != "REMOTE_RELAY_UNKNOWN_MODEL" || !strings.Contains(linkErr(res[1]), "Nothing was sent.") {
		t.Errorf("send with an unknown model on bravo: %s (%s), want REMOTE_RELAY_UNKNOWN_MODEL", linkCode(res[1]), linkErr(res[1]))
	}
	if len(cards) != 1 || cards[0].action != "send" {
		t.Fatalf("cards of the ask-mode conversation: %+v, want one for the send that switches billing", cards)
	}
	if !strings.Contains(cards[0].lines, "Switches billing to Claude API") || !strings.Contains(cards[0].lines, `"on the plan"`) {
		t.Errorf("send card: %q, want the session's title and Switches billing to Claude API", cards[0].lines)
	}
	if cards[0].target != sb {
		t.Errorf("send card's target %q, want %s", cards[0].target, sb)
	}
	// A send without mode passes the caller's own mode (R7.10), there too.
	if !strings.Contains(cards[0].lines, "Mode: ask") {
		t.Errorf("send card: %q, want Mode: ask, the calling conversation's mode", cards[0].lines)
	}
	if m := b.detail(sb)["mode"]; m != "ask" {
		t.Errorf("the session on bravo after a send from an ask-mode conversation: mode %v, want ask", m)
	}

	// ask and answer_question with bad arguments, from the ask-mode
	// conversation: bravo's checks refuse them, no card is asked (R5.3).
	long := strings.Repeat("x", 4001)
	res, cards = a.runDecide(sk, "deny",
		onB("answer_question", map[string]any{"session": sb, "question_id": "q_zzzzzzzzzzzz", "answer": "yes"}),
		onB("answer_question", map[string]any{"session": sb, "question_id": "q_zzzzzzzzzzzz"}),
		onB("ask", map[string]any{"session": sb, "question": "  "}),
		onB("ask", map[string]any{"session": sb, "question": long}),
		onB("ask", map[string]any{"session": sb, "question": "Ship it?", "options": []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}}))
	for i, want := range []string{"REMOTE_RELAY_NOT_FOUND", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT", "REMOTE_RELAY_INVALID_INPUT"} {
		if linkCode(res[i]) != want {
			t.Errorf("bad %d on bravo: %s (%s), want %s before any card", i, linkCode(res[i]), linkErr(res[i]), want)
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
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	sb := b.newSession(NewSession{Title: "the owner's"})
	sa := a.newSession(NewSession{Title: "starter", Text: "use @bravo"})
	res := a.runAllow(sa, onRelay("bravo", "create_session", map[string]any{"text": "started from alpha", "wait_seconds": 20}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("create_session on bravo: %v", res[0])
	}
	child, _ := res[0]["session"].(string)
	b.quiet()

	res, cards := a.runDecide(sa, "allow",
		onRelay("bravo", "update_session", map[string]any{"session": child, "title": "renamed by its starter"}),
		onRelay("bravo", "update_session", map[string]any{"session": sb, "title": "renamed by an agent"}))
	for i, r := range res {
		if linkCode(r) != "ok" {
			t.Errorf("update_session %d on bravo: %v", i, r)
		}
	}
	if ch, _ := res[0]["changed"].([]any); len(ch) != 1 || ch[0] != "title" {
		t.Errorf("update_session of the started session: changed %v, want [title]", res[0]["changed"])
	}
	if len(cards) != 1 || cards[0].action != "update_session" || cards[0].target != sb {
		t.Fatalf("cards: %+v; want only the one for the session the conversation did not start (%s)", cards, sb)
	}
	if !strings.Contains(cards[0].lines, `Change "the owner's"`) || !strings.Contains(cards[0].lines, "Title: renamed by an agent") {
		t.Errorf("update card: %q, want the session bravo resolved and the change", cards[0].lines)
	}
	if got := b.detail(child)["title"]; got != "renamed by its starter" {
		t.Errorf("the started session's title on bravo: %v", got)
	}

	// Another conversation on alpha did not start the child: it is asked.
	so := a.newSession(NewSession{Title: "other", Text: "use @bravo"})
	// First a change to what the session already has: it changes nothing
	// and asks nobody, though this conversation has not been allowed yet.
	res, cards = a.runDecide(so, "deny",
		onRelay("bravo", "update_session", map[string]any{"session": sb, "title": "renamed by an agent"}))
	if ch, ok := res[0]["changed"].([]any); linkCode(res[0]) != "ok" || !ok || len(ch) != 0 {
		t.Errorf("update_session that changes nothing: %v, want ok and changed []", res[0])
	}
	if len(cards) != 0 {
		t.Errorf("cards of an update_session that changes nothing: %+v, want none", cards)
	}
	res, cards = a.runDecide(so, "allow",
		onRelay("bravo", "update_session", map[string]any{"session": child, "title": "renamed by another"}))
	if linkCode(res[0]) != "ok" {
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
	n := newPeerNet(t)
	a := n.relay("alpha", peerEndOptions{maxWaitCap: time.Hour, settings: func(s *config.Settings) { s.MaxWaitSeconds = 900 }})
	// bravo's own longest wait is 200 ms (the tests' cap below its 120 s).
	b := n.relay("bravo", peerEndOptions{maxWaitCap: 200 * time.Millisecond, settings: func(s *config.Settings) { s.MaxWaitSeconds = 120 }, work: true})
	a.pair(b, PairRequest{})
	sb := b.newSession(NewSession{Title: "slow"})
	sa := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
	// Each reply comes after 600 ms of bravo's work clock: bravo's own limit
	// would have given up. Each call waits in a goroutine while the test
	// moves that clock, once bravo's wait (its deadline) and the agent's
	// sleep are both set.
	slow := func(reply string) string {
		return script(map[string]any{"sleep_ms": 600}, map[string]any{"reply": reply})
	}
	checkNote := func(what string, env map[string]any) {
		t.Helper()
		note, _ := env["note"].(string)
		if !strings.Contains(note, "capped at 900") || !strings.Contains(note, `"alpha"`) || strings.Contains(note, "bravo") {
			t.Errorf("%s: note %q, want alpha's limit of 900 s and nothing of bravo's", what, note)
		}
	}
	call := func(args map[string]any, wait time.Duration) map[string]any {
		t.Helper()
		var env map[string]any
		done := b.meanwhile(fmt.Sprint(args["action"], " from alpha"), func() {
			env = a.ok(sa, args)
		})
		b.due(b.work.Now().Add(wait)) // bravo's wait, by alpha's limit
		b.pass(600 * time.Millisecond)
		done()
		return env
	}
	env := call(map[string]any{"action": "send", "relay": "bravo", "session": sb, "text": slow("slept once"), "wait_seconds": 1000}, 900*time.Second)
	if env["status"] != "done" {
		t.Errorf("send from alpha to bravo: status %v, want done (waited by alpha's limit): %v", env["status"], env)
	} else if rp, _ := env["reply"].(map[string]any); !strings.Contains(fmt.Sprint(rp["text"]), "slept once") {
		t.Errorf("send's reply: %v", env["reply"])
	}
	checkNote("send with wait_seconds 1000", env)

	env = a.ok(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb, "text": slow("slept twice"), "wait_seconds": 0})
	mid, _ := env["message_id"].(string)
	if mid == "" {
		t.Fatalf("send without waiting: %v", env)
	}
	env = call(map[string]any{"action": "wait", "relay": "bravo", "session": sb, "message_id": mid, "wait_seconds": 1000}, 900*time.Second)
	if env["status"] != "done" {
		t.Errorf("wait from alpha on bravo: status %v, want done (waited by alpha's limit): %v", env["status"], env)
	}
	checkNote("wait with wait_seconds 1000", env)
	// Within alpha's limit: no note at all, although bravo's is smaller.
	env = call(map[string]any{"action": "send", "relay": "bravo", "session": sb, "text": slow("slept thrice"), "wait_seconds": 60}, 60*time.Second)
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
			n := newPeerNet(t)
			a, b := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{})
			var mu sync.Mutex
			checks := 0
			b.setHello(func(h *Hello) { h.Version, h.Features = "0.9.18", tc.features })
			b.setAnswer(func(route string, _ []byte) (int, string, []byte, bool) {
				if route != "/peer/v1/check" {
					return 0, "", nil, false
				}
				mu.Lock()
				checks++
				mu.Unlock()
				if tc.jsonNF {
					// An older relay of this project: its router's NoRoute answers JSON.
					return http.StatusNotFound, "application/json; charset=utf-8", []byte(`{"code":"REMOTE_RELAY_NOT_FOUND","error":"No such route: POST /peer/v1/check"}`), true
				}
				return http.StatusNotFound, "text/plain; charset=utf-8", []byte("404 page not found\n"), true // a relay from before the check
			})
			if p, err := a.r.Pair(a.ctx, PairRequest{URL: b.url, Token: b.token()}); err != nil || p.Name != "bravo" {
				t.Fatalf("pair the older bravo: %+v %v", p, err)
			}
			sa := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
			res, cards := a.runDecide(sa, "allow",
				onRelay("bravo", "create_session", map[string]any{"text": "bad model", "model": "scripted-l", "wait_seconds": 5}))
			if linkCode(res[0]) != "REMOTE_RELAY_UNKNOWN_MODEL" {
				t.Errorf("create_session with a bad model on the older bravo: %s (%s)", linkCode(res[0]), linkErr(res[0]))
			}
			if len(cards) != 1 || cards[0].action != "create_session" {
				t.Errorf("cards: %+v, want the first-session card before the call, as before", cards)
			}
			// A bad wait_seconds is refused here before any card (a fresh
			// conversation's first session would ask one), whatever that relay serves.
			s2 := a.newSession(NewSession{Title: "second caller", Text: "use @bravo"})
			res, cards = a.runDecide(s2, "allow",
				onRelay("bravo", "create_session", map[string]any{"text": "bad wait", "wait_seconds": -1}))
			if linkCode(res[0]) != "REMOTE_RELAY_INVALID_INPUT" || len(cards) != 0 {
				t.Errorf("create_session with wait_seconds -1 on the older bravo: %s (%s), cards %+v; want REMOTE_RELAY_INVALID_INPUT and no card", linkCode(res[0]), linkErr(res[0]), cards)
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
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{limits: func(l *config.Limits) { l.SubscriptionsPerConversation = 1 }})
	watched := b.newSession(NewSession{Title: "watched"})
	c1 := a.newSession(NewSession{Title: "first watcher", Text: "use @bravo"})
	c2 := a.newSession(NewSession{Title: "second watcher", Text: "use @bravo"})
	sub := onRelay("bravo", "subscribe", map[string]any{"sessions": []string{watched}, "events": []string{"turn_end"}})
	for _, c := range []string{c1, c2} {
		if res := a.runAllow(c, sub); linkCode(res[0]) != "ok" {
			t.Fatalf("subscribe on bravo from %s: %v", c, res[0])
		}
	}
	res, cards := a.runDecide(c2, "deny", onRelay("bravo", "transfer_subscriptions", map[string]any{"from": c1}))
	if linkCode(res[0]) != "REMOTE_RELAY_LIMIT" {
		t.Errorf("transfer over bravo's limit: %s (%s), want REMOTE_RELAY_LIMIT", linkCode(res[0]), linkErr(res[0]))
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
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{limits: func(l *config.Limits) { l.ActiveSessionsPerPeerToken = 1 }})
	c1 := a.newSession(NewSession{Title: "starter", Text: "use @bravo"})
	// The child's turn waits on a question: it stays at work.
	busy := script(map[string]any{"question": map[string]any{"text": "Go on?", "options": []string{"yes"}}}, map[string]any{"reply": "went on"})
	res := a.runAllow(c1, onRelay("bravo", "create_session", map[string]any{"text": busy, "wait_seconds": 0}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("create_session on bravo: %v", res[0])
	}
	child, _ := res[0]["session"].(string)
	b.actQuestion(child)
	c2 := a.newSession(NewSession{Title: "second", Text: "use @bravo"})
	before := b.sessionCount()
	res, cards := a.runDecide(c2, "deny", onRelay("bravo", "create_session", map[string]any{"text": "one more", "wait_seconds": 0}))
	if linkCode(res[0]) != "REMOTE_RELAY_SESSION_LIMIT" || !strings.Contains(linkErr(res[0]), "per paired relay") {
		t.Errorf("create_session over bravo's cap per paired relay: %s (%s), want REMOTE_RELAY_SESSION_LIMIT", linkCode(res[0]), linkErr(res[0]))
	}
	if len(cards) != 0 {
		t.Errorf("a card was asked for a create_session bravo refuses: %+v", cards)
	}
	if n := b.sessionCount(); n != before {
		t.Errorf("bravo has %d sessions, want %d", n, before)
	}
}

// TestPeerCheckEndpoint (R5.3, R13.1, R13.4, R18.20, R7.11): POST
// /peer/v1/check takes a peer token as /peer/v1/call does (a token this relay
// did not issue is 401; a token bound to one relay cannot speak for another)
// and changes nothing: after checks of create_session, send, subscribe and
// ask there is no new session, no prompt, no subscription and no ask. A
// paired relay's call waits by the wait it carries, bounded by 3600 s.
func TestPeerCheckEndpoint(t *testing.T) {
	b := newPeerNet(t).relay("bravo", peerEndOptions{})
	tok := b.token()
	sb := b.newSession(NewSession{Title: "target"})
	post := func(route, token, relay, action string, args map[string]any) (int, map[string]any) {
		t.Helper()
		return b.peerStatus(route, token, map[string]any{"action": action, "args": args,
			"origin": map[string]any{"relay": relay, "session": "0123456789abcdef", "title": "caller", "model": "scripted-1", "path": []string{relay}}})
	}
	if st, env := post("/peer/v1/check", "not-a-peer-token-of-bravo", "alpha", "create_session", map[string]any{"text": "x"}); st != http.StatusUnauthorized {
		t.Errorf("check with a token bravo did not issue: %d %v, want 401", st, env)
	}
	sessions := b.sessionCount()
	for _, c := range []struct {
		action string
		args   map[string]any
	}{
		{"create_session", map[string]any{"text": "a new session", "wait_seconds": 5}},
		{"send", map[string]any{"session": sb, "text": "a prompt", "wait_seconds": 5}},
		{"subscribe", map[string]any{"sessions": []string{sb}}},
		{"ask", map[string]any{"session": sb, "question": "Ship it?"}},
	} {
		st, env := post("/peer/v1/check", tok, "alpha", c.action, c.args)
		if st != http.StatusOK || env["ok"] != true {
			t.Errorf("check of %s: %d %v", c.action, st, env)
		} else if chk, _ := env["check"].(map[string]any); chk["action"] != c.action {
			t.Errorf("check of %s: check %v", c.action, env["check"])
		}
	}
	if st, env := post("/peer/v1/check", tok, "delta", "create_session", map[string]any{"text": "x"}); st != http.StatusOK || linkCode(env) != "REMOTE_RELAY_AUTH" {
		t.Errorf("check speaking for delta with alpha's token: %d %v, want REMOTE_RELAY_AUTH", st, env)
	}
	if n := b.sessionCount(); n != sessions {
		t.Errorf("bravo has %d sessions after the checks, want %d", n, sessions)
	}
	if n := b.messages(sb); n != 0 {
		t.Errorf("the target has %d messages after a check of send", n)
	}
	if _, env := post("/peer/v1/call", tok, "alpha", "list_subscriptions", map[string]any{}); linkCode(env) != "ok" {
		t.Errorf("list_subscriptions: %v", env)
	} else if subs, _ := env["subscriptions"].([]any); len(subs) != 0 {
		t.Errorf("subscriptions after a check of subscribe: %v", subs)
	}
	if _, env := post("/peer/v1/call", tok, "alpha", "list_questions", map[string]any{}); linkCode(env) != "ok" {
		t.Errorf("list_questions: %v", env)
	} else if qs, _ := env["questions"].([]any); len(qs) != 0 {
		t.Errorf("asks after a check of ask: %v", qs)
	}
	// A wait beyond what any relay may allow is bounded by 3600 s, and says so.
	_, env := post("/peer/v1/call", tok, "alpha", "send", map[string]any{"session": sb, "text": "hi", "wait_seconds": 5000})
	if linkCode(env) != "ok" || env["status"] != "done" {
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
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	hostile := "line one\nline two\r\n\x1b[31mred\x1b[0m \u2028sep " + strings.Repeat("y", 3000)
	answer, _ := json.Marshal(map[string]any{"ok": true, "check": map[string]any{
		"action": "create_session", "title": hostile, "provider": hostile, "model": hostile, "effort": hostile, "mode": hostile,
		"cwd": hostile, "group": map[string]any{"id": hostile, "name": hostile},
		"session": map[string]any{"id": "0123456789abcdef\n" + hostile, "title": hostile}}})
	b.setAnswer(func(route string, _ []byte) (int, string, []byte, bool) {
		if route == "/peer/v1/check" {
			return http.StatusOK, "application/json", answer, true
		}
		return 0, "", nil, false
	})
	sb := b.newSession(NewSession{Title: "target"})
	sk := a.newSession(NewSession{Title: "asker", Mode: "ask", Text: "use @bravo"})
	_, cards := a.runDecide(sk, "deny",
		onRelay("bravo", "create_session", map[string]any{"text": "child"}),
		onRelay("bravo", "send", map[string]any{"session": sb, "text": "hi"}))
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
