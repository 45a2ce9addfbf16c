package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay"
	"github.com/oar/relay/config"
)

// The rules of paired relays (§4.3–4.10, R10.5, §12 pairing, §13), with
// two domain fixtures linked in-process (peerlink_fixture_test.go); moved
// down from relaytest/peer_rules_test.go.

// linkPair builds alpha and bravo on one peerNet, alpha paired with bravo.
func linkPair(t *testing.T, ao, bo peerEndOptions) (*peerEnd, *peerEnd) {
	t.Helper()
	n := newPeerNet(t)
	a, b := n.relay("alpha", ao), n.relay("bravo", bo)
	a.pair(b, PairRequest{})
	return a, b
}

// TestPeerPermissionTable (R4.5, R4.8, R13.1): each action against a paired
// relay is refused with PERMISSION below its level (naming the relay, the
// action and the level) and changes nothing there; at or above it, never
// PERMISSION or LOCKED; schedules are UNSUPPORTED at every level.
func TestPeerPermissionTable(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "caller"})
	sb := b.newSession(NewSession{Title: "target"})
	sx := b.newSession(NewSession{Title: "throwaway"})
	first := b.prompt(sb, "first words")
	b.quiet()
	watcher := "peer:alpha:" + sa
	const missing = "zzzzzzzzzzzz"
	actions := []struct {
		action string
		level  string // R4.5: the lowest level that allows it; "" for schedules
		args   map[string]any
	}{
		{"list_relays", "none", map[string]any{}},
		{"list_questions", "none", map[string]any{}},
		{"withdraw", "none", map[string]any{"question_id": "ask_" + missing}},
		{"relay_info", "read", map[string]any{}},
		{"usage", "read", map[string]any{}},
		{"list_sessions", "read", map[string]any{}},
		{"read_session", "read", map[string]any{"session": sb}},
		{"read_task_output", "read", map[string]any{"session": sb, "task_id": missing}},
		{"wait", "read", map[string]any{"session": sb, "message_id": first, "wait_seconds": 1}},
		{"subscribe", "read", map[string]any{"sessions": []string{sb}}},
		{"list_subscriptions", "read", map[string]any{}},
		{"unsubscribe", "read", map[string]any{"subscription_id": "all"}},
		{"send", "prompt", map[string]any{"session": sb, "text": "hello from alpha", "wait_seconds": 20}},
		{"answer_question", "prompt", map[string]any{"session": sb, "question_id": "q_" + missing, "answer": "yes"}},
		{"ask", "prompt", map[string]any{"session": sb, "question": "Ship it?", "options": []string{"yes", "no"}}},
		{"create_session", "full", map[string]any{"text": "started remotely", "title": "remote child", "wait_seconds": 20}},
		{"update_session", "full", map[string]any{"session": sb, "title": "renamed by alpha"}},
		{"stop", "full", map[string]any{"session": sb}},
		{"archive", "full", map[string]any{"session": sx}},
		{"transfer_subscriptions", "full", map[string]any{"from": missing}},
		{"schedule", "", map[string]any{"text": "later", "every_minutes": 60, "session": sb}},
		{"list_schedules", "", map[string]any{}},
		{"unschedule", "", map[string]any{"schedule_id": "sch_" + missing}},
	}
	rank := map[string]int{"none": 0, "read": 1, "prompt": 2, "full": 3}
	// What must work does work, at or above its level.
	want := map[string]string{"list_relays": "ok", "list_questions": "ok",
		"relay_info": "ok", "usage": "ok", "list_sessions": "ok", "read_session": "ok", "subscribe": "ok",
		"list_subscriptions": "ok", "unsubscribe": "ok", "send": "ok", "ask": "ok",
		"create_session": "ok", "update_session": "ok", "archive": "ok",
		"withdraw": "REMOTE_RELAY_NOT_FOUND", "answer_question": "REMOTE_RELAY_NOT_FOUND"}
	for _, level := range []string{"none", "read", "prompt", "full"} {
		lv := level
		if p, err := a.r.PatchRelay(a.ctx, "bravo", RelayPatch{Permission: &lv}); err != nil || p.Permission != level {
			t.Fatalf("set permission %s: %+v %v", level, p, err)
		}
		var refused, allowed []map[string]any
		var refusedA, allowedA []int
		for i, pa := range actions {
			m := map[string]any{"action": pa.action}
			if pa.action != "list_relays" {
				m["relay"] = "bravo"
			}
			for k, v := range pa.args {
				m[k] = v
			}
			if pa.level != "" && rank[pa.level] > rank[level] {
				refused, refusedA = append(refused, actTool(m)), append(refusedA, i)
			} else {
				allowed, allowedA = append(allowed, actTool(m)), append(allowedA, i)
			}
		}
		// Below the level: refused with PERMISSION, nothing changes on bravo.
		if len(refused) > 0 {
			b.quiet()
			before := b.state(watcher)
			res := a.runAllow(sa, refused...)
			for j, i := range refusedA {
				pa := actions[i]
				if linkCode(res[j]) != "REMOTE_RELAY_PERMISSION" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_PERMISSION", level, pa.action, linkCode(res[j]), linkErr(res[j]))
					continue
				}
				e := linkErr(res[j])
				if !strings.Contains(e, `"bravo"`) || !strings.Contains(e, pa.action) || !strings.Contains(e, `"`+pa.level+`"`) {
					t.Errorf("level %s, %s: the error should name the relay, the action and the level it needs: %q", level, pa.action, e)
				}
			}
			if d := cmp.Diff(before, b.state(watcher)); d != "" {
				t.Errorf("level %s: refused actions changed bravo (-before +after):\n%s", level, d)
			}
		}
		// At or above the level: never PERMISSION or LOCKED; schedules are
		// UNSUPPORTED on a paired relay at every level.
		res := a.runAllow(sa, allowed...)
		for j, i := range allowedA {
			pa, got := actions[i], linkCode(res[j])
			switch {
			case pa.level == "":
				if got != "REMOTE_RELAY_UNSUPPORTED" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_UNSUPPORTED", level, pa.action, got, linkErr(res[j]))
				}
			case got == "REMOTE_RELAY_PERMISSION" || got == "REMOTE_RELAY_LOCKED":
				t.Errorf("level %s, %s: refused with %s: %s", level, pa.action, got, linkErr(res[j]))
			}
			if w, ok := want[pa.action]; ok && got != w {
				t.Errorf("level %s, %s: got %s (%s), want %s", level, pa.action, got, linkErr(res[j]), w)
			}
		}
	}
	// The effects of the full level arrived on bravo.
	b.quiet()
	if got := b.detail(sb)["title"]; got != "renamed by alpha" {
		t.Errorf("update_session did not rename the session on bravo: %v", got)
	}
	if x := b.detail(sx); x["archived"] != true {
		t.Errorf("archive did not archive the session on bravo: %v", x["archived"])
	}
	msgs := b.history(sb, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0].Text, `[Remote prompt from an agent on relay "alpha" · session "caller" · `) {
		t.Fatalf("R4.8: remote prompt line missing: %v", msgs)
	}
	if from := msgs[0].From; from == nil || from.Relay != "alpha" || from.Session != sa || from.Title != "caller" {
		t.Errorf("R4.8: from metadata: %+v", msgs[0])
	}
}

// TestPeerLocks (R4.4, R4.7, R4.8, R13.1a): a paired relay is locked in a
// conversation until the owner mentions it there (its name as a word or
// with @, a host that is an IP only with @, a session's first text too), or
// an agent of that relay prompts it; a locked action does nothing there.
func TestPeerLocks(t *testing.T) {
	n := newPeerNet(t)
	a, b := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{})
	// One peer token for both of alpha's pairings of bravo below: bravo binds
	// the name alpha to the first token that used it (R18.20).
	bt := b.token()
	if _, err := a.r.Pair(a.ctx, PairRequest{URL: b.url, Token: bt}); err != nil {
		t.Fatalf("pair: %v", err)
	}
	sb := b.newSession(NewSession{Title: "target"})
	// The scripts name bravo by its host: an IP counts only with @, so the
	// script itself unlocks nothing.
	byHost := onRelay("127.0.0.1", "list_sessions", nil)
	lister := actTool(map[string]any{"action": "list_relays"})
	bravoIn := func(res map[string]any) map[string]any {
		rels, _ := res["relays"].([]any)
		for _, x := range rels {
			if m, _ := x.(map[string]any); m["name"] == "bravo" {
				return m
			}
		}
		t.Fatalf("list_relays does not show bravo: %v", res)
		return nil
	}
	locked := func(s, why string) {
		t.Helper()
		res := a.runAllow(s, byHost, lister)
		if linkCode(res[0]) != "REMOTE_RELAY_LOCKED" {
			t.Fatalf("%s: want REMOTE_RELAY_LOCKED, got %v", why, res[0])
		}
		if e := linkErr(res[0]); !strings.Contains(e, "@bravo") || !strings.Contains(e, "owner") {
			t.Errorf("%s: the error should ask to have the owner mention @bravo: %q", why, e)
		}
		if linkCode(res[1]) != "ok" || bravoIn(res[1])["unlocked"] != false {
			t.Errorf("%s: list_relays should work and show bravo locked: %v", why, res[1])
		}
	}
	unlocked := func(s, why string) {
		t.Helper()
		res := a.runAllow(s, byHost, lister)
		if linkCode(res[0]) != "ok" || res[0]["relay"] != "bravo" {
			t.Fatalf("%s: want ok from bravo, got %v", why, res[0])
		}
		if bravoIn(res[1])["unlocked"] != true {
			t.Errorf("%s: list_relays should show bravo unlocked: %v", why, res[1])
		}
	}

	// Locked by default; a word that only starts with the name unlocks nothing.
	s1 := a.newSession(NewSession{Title: "one"})
	locked(s1, "a new conversation")
	a.say(s1, "compare bravos and bravo-2 and me@bravo, also the relay at 127.0.0.1")
	locked(s1, "after bravos, bravo-2, an e-mail and a bare IP")
	// The name as a word unlocks it, for the rest of the conversation.
	a.say(s1, "Now ask Bravo, please.")
	unlocked(s1, "after bravo as a word")
	a.say(s1, "thanks, nothing else")
	unlocked(s1, "later in the same conversation")
	// Locked actions really do nothing there: send is refused too.
	s2 := a.newSession(NewSession{Title: "two"})
	res := a.runAllow(s2, onRelay("127.0.0.1", "send", map[string]any{"session": sb, "text": "x"}))
	if linkCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("send in another conversation: %v", res[0])
	}
	if n := b.messages(sb); n != 0 {
		t.Errorf("a locked send reached bravo: %d messages", n)
	}
	locked(s2, "another conversation")
	// @name unlocks.
	a.say(s2, "@bravo")
	unlocked(s2, "after @bravo")
	// The host, an IP, only with @.
	s3 := a.newSession(NewSession{Title: "three"})
	a.say(s3, "use @127.0.0.1.")
	unlocked(s3, "after @127.0.0.1")
	// A session created with text: that text is the owner's too.
	s4 := a.newSession(NewSession{Title: "four", Text: "hello @bravo"})
	unlocked(s4, "after @bravo in the first message")

	// A pairing whose name is an IP address counts only with @ (its name is
	// in the script, without @).
	if _, err := a.r.Pair(a.ctx, PairRequest{URL: b.url, Token: bt, Name: "10.9.8.7"}); err != nil {
		t.Fatalf("pair as 10.9.8.7: %v", err)
	}
	s5 := a.newSession(NewSession{Title: "five"})
	byIPName := onRelay("10.9.8.7", "relay_info", nil)
	if res := a.runAllow(s5, byIPName); linkCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("pairing named 10.9.8.7 after a script naming it: %v", res[0])
	}
	a.say(s5, "try 10.9.8.7 now")
	if res := a.runAllow(s5, byIPName); linkCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("pairing named 10.9.8.7 after a bare mention: %v", res[0])
	}
	a.say(s5, "try @10.9.8.7 now")
	if res := a.runAllow(s5, byIPName); linkCode(res[0]) != "ok" {
		t.Fatalf("pairing named 10.9.8.7 after @10.9.8.7: %v", res[0])
	}
	if _, err := a.r.Unpair(a.ctx, "10.9.8.7"); err != nil {
		t.Fatalf("unpair 10.9.8.7: %v", err)
	}

	// (b) A prompt from bravo's agent unlocks bravo in that conversation (a
	// pairing in both directions).
	b.pair(a, PairRequest{})
	s6 := a.newSession(NewSession{Title: "six"})
	if res := a.runAllow(s6, byHost); linkCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("before bravo's prompt: %v", res[0])
	}
	res = b.runAllow(sb, onRelay("alpha", "send", map[string]any{"session": s6, "text": "hello from bravo's agent", "wait_seconds": 20}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("bravo's agent sends to alpha: %v", res[0])
	}
	if res := a.runAllow(s6, byHost); linkCode(res[0]) != "ok" {
		t.Fatalf("after a prompt from bravo's agent, bravo (by host) is unlocked: %v", res[0])
	}
	msgs := a.history(s6, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0].Text, `[Remote prompt from an agent on relay "bravo" · session "target" · `) {
		t.Errorf("R4.8: %v", msgs)
	}
	// The other conversations stay as they were.
	locked(a.newSession(NewSession{Title: "seven"}), "a conversation bravo's agent did not write to")
}

// TestPeerAcceptOff (R4.6): with the owner's accept setting off, a paired
// relay's prompts, new sessions, subscriptions, answers, stops, archives,
// updates and asks are refused with NOT_ACCEPTING naming the relay and
// change nothing; reading still works; turned on again, a prompt goes through.
func TestPeerAcceptOff(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "caller"})
	sb := b.newSession(NewSession{Title: "target"})
	// A turn that ends, so read_session and wait have something to show.
	first := b.prompt(sb, "first words")
	b.quiet()
	b.setAccept(false)
	before := b.state("peer:alpha:" + sa)
	on := func(action string, args map[string]any) map[string]any { return onRelay("bravo", action, args) }
	gated := []map[string]any{
		on("send", map[string]any{"session": sb, "text": "hi", "wait_seconds": 5}),
		on("create_session", map[string]any{"text": "hi"}),
		on("subscribe", map[string]any{"sessions": []string{sb}}),
		on("answer_question", map[string]any{"session": sb, "question_id": "q_zzzzzzzzzzzz", "answer": "x"}),
		on("stop", map[string]any{"session": sb}),
		on("archive", map[string]any{"session": sb}),
		on("update_session", map[string]any{"session": sb, "title": "changed"}),
		on("ask", map[string]any{"session": sb, "question": "Ship it?"}),
	}
	open := []map[string]any{
		on("list_sessions", nil),
		on("read_session", map[string]any{"session": sb}),
		on("relay_info", nil),
		on("usage", nil),
		on("wait", map[string]any{"session": sb, "message_id": first, "wait_seconds": 1}),
		on("read_task_output", map[string]any{"session": sb, "task_id": "zzzzzzzzzzzz"}),
		on("list_subscriptions", nil),
		on("list_questions", nil),
	}
	res := a.runAllow(sa, append(append([]map[string]any{}, gated...), open...)...)
	for i, g := range gated {
		act := g["tool"].(map[string]any)["action"]
		if linkCode(res[i]) != "REMOTE_RELAY_NOT_ACCEPTING" {
			t.Errorf("%s: got %s (%s), want REMOTE_RELAY_NOT_ACCEPTING", act, linkCode(res[i]), linkErr(res[i]))
		} else if e := linkErr(res[i]); !strings.Contains(e, `"bravo"`) {
			t.Errorf("%s: the error should name the relay: %q", act, e)
		}
	}
	for j, o := range open {
		r := res[len(gated)+j]
		act := o["tool"].(map[string]any)["action"]
		want := "ok"
		if act == "read_task_output" {
			want = "REMOTE_RELAY_NOT_FOUND" // it works; the task is made up
		}
		if linkCode(r) != want {
			t.Errorf("%s with accept off: got %s (%s), want %s", act, linkCode(r), linkErr(r), want)
		}
	}
	if d := cmp.Diff(before, b.state("peer:alpha:"+sa)); d != "" {
		t.Errorf("refused actions changed bravo (-before +after):\n%s", d)
	}
	// Turned on again, a prompt goes through.
	b.setAccept(true)
	if res := a.runAllow(sa, gated[0]); linkCode(res[0]) != "ok" {
		t.Fatalf("send with accept on: %v", res[0])
	}
}

// TestPeerPairingErrors (§12 pairing, R4.10, R13.1a, R13.4): each refused
// pairing has its code and says why and that nothing was paired, never
// showing the token, and stores nothing; offline with a name is kept
// offline; PATCH refuses a bad level or URL and changes nothing.
func TestPeerPairingErrors(t *testing.T) {
	n := newPeerNet(t)
	a, b := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{})
	relays := func() string {
		list, err := a.r.Relays(a.ctx)
		if err != nil {
			t.Fatalf("relays: %v", err)
		}
		j, _ := json.Marshal(list)
		return string(j)
	}
	bt, at := b.token(), a.token()
	// Pairs bravo first, for the duplicate case.
	ok, err := a.r.Pair(a.ctx, PairRequest{URL: b.url, Token: bt})
	if err != nil || ok.Name != "bravo" || !ok.Online {
		t.Fatalf("pair bravo: %+v %v", ok, err)
	}
	if strings.Contains(fmt.Sprint(asJSON(t, ok)), bt) {
		t.Errorf("the pairing record shows the token: %+v", ok)
	}
	port := b.url[strings.LastIndex(b.url, ":")+1:]
	selfPort := a.url[strings.LastIndex(a.url, ":")+1:]
	cases := []struct {
		name string
		req  PairRequest
		code string
		says []string
	}{
		{"http on a public IP", PairRequest{URL: "http://8.8.8.8:" + port, Token: bt, Name: "pub"}, "REMOTE_RELAY_INVALID_INPUT", []string{"https://"}},
		{"a malformed url", PairRequest{URL: "bravo box", Token: bt}, "REMOTE_RELAY_INVALID_INPUT", []string{"not an http(s) address"}},
		{"no url", PairRequest{Token: bt}, "REMOTE_RELAY_INVALID_INPUT", []string{"url is required"}},
		{"the relay itself", PairRequest{URL: a.url, Token: at}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay itself"}},
		{"the relay itself, by another host", PairRequest{URL: "http://localhost:" + selfPort, Token: at, Name: "me"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay itself"}},
		{"no token", PairRequest{URL: b.url, Name: "b2"}, "REMOTE_RELAY_INVALID_INPUT", []string{"token is required"}},
		{"a wrong token", PairRequest{URL: b.url, Token: "rpt_wrongwrongwrong", Name: "b2"}, "REMOTE_RELAY_AUTH", []string{"rejects this token"}},
		{"another relay's token", PairRequest{URL: b.url, Token: at, Name: "b2"}, "REMOTE_RELAY_AUTH", []string{"rejects this token"}},
		{"an unknown permission", PairRequest{URL: b.url, Token: bt, Name: "b2", Permission: "admin"}, "REMOTE_RELAY_INVALID_INPUT", []string{"permission must be one of", "admin"}},
		{"a duplicate name", PairRequest{URL: b.url, Token: bt}, "REMOTE_RELAY_INVALID_INPUT", []string{`"bravo" is paired already`}},
		{"a duplicate name, other case", PairRequest{URL: b.url, Token: bt, Name: "BRAVO"}, "REMOTE_RELAY_INVALID_INPUT", []string{"paired already"}},
		{"this relay's own name", PairRequest{URL: b.url, Token: bt, Name: "alpha"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay's own"}},
		{"the name this", PairRequest{URL: b.url, Token: bt, Name: "this"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay's own"}},
		{"a bad name", PairRequest{URL: b.url, Token: bt, Name: "a b"}, "REMOTE_RELAY_INVALID_INPUT", []string{"must be 1–63"}},
		{"offline without a name", PairRequest{URL: "http://127.0.0.1:1", Token: bt}, "REMOTE_RELAY_OFFLINE", []string{"did not answer", "Give a name"}},
	}
	for _, c := range cases {
		before := relays()
		out, err := a.r.Pair(a.ctx, c.req)
		if err == nil {
			t.Errorf("%s: paired %+v, want %s", c.name, out, c.code)
			continue
		}
		e := AsError(err)
		if st := HTTPStatus(e.Code); st < 400 || st >= 600 || e.Code != c.code {
			t.Errorf("%s: %d %s %q, want %s", c.name, st, e.Code, e.Msg, c.code)
			continue
		}
		if !strings.Contains(e.Msg, "Nothing was paired.") {
			t.Errorf("%s: the error should say nothing was paired: %q", c.name, e.Msg)
		}
		for _, s := range c.says {
			if !strings.Contains(e.Msg, s) {
				t.Errorf("%s: the error should say %q: %q", c.name, s, e.Msg)
			}
		}
		if c.req.Token != "" && strings.Contains(e.Msg, c.req.Token) {
			t.Errorf("%s: the error shows the token: %q", c.name, e.Msg)
		}
		if after := relays(); after != before {
			t.Errorf("%s: a pairing was stored:\nbefore %s\nafter %s", c.name, before, after)
		}
	}
	// Offline with a name: stored, online false.
	off, err := a.r.Pair(a.ctx, PairRequest{URL: "http://127.0.0.1:1", Token: bt, Name: "ghost", Permission: "read"})
	if err != nil {
		t.Fatalf("offline with a name: %v", err)
	}
	if off.Name != "ghost" || off.Online || off.Permission != "read" || off.OfflineReason == "" {
		t.Errorf("offline pairing: %+v", off)
	}
	if list, _ := a.r.Relays(a.ctx); len(list) != 2 {
		t.Fatalf("relays: %+v", list)
	}
	// PATCH refuses an unknown level and a public http URL, and changes nothing.
	before := relays()
	root, public, read := "root", "http://8.8.8.8", "read"
	for _, c := range []struct {
		what, name string
		patch      RelayPatch
		status     int
		says       string
	}{
		{"patch permission root", "bravo", RelayPatch{Permission: &root}, 400, "Nothing was changed."},
		{"patch public http url", "bravo", RelayPatch{URL: &public}, 400, "Nothing was changed."},
		{"patch an unknown pairing", "nobody", RelayPatch{Permission: &read}, 404, ""},
	} {
		out, err := a.r.PatchRelay(a.ctx, c.name, c.patch)
		if e := AsError(err); err == nil || HTTPStatus(e.Code) != c.status || !strings.Contains(e.Msg, c.says) {
			t.Errorf("%s: %+v %v", c.what, out, err)
		}
	}
	if after := relays(); after != before {
		t.Errorf("refused patches changed the pairings:\n%s\n%s", before, after)
	}
	// Removing the offline pairing.
	if out, err := a.r.Unpair(a.ctx, "ghost"); err != nil || !out.Removed {
		t.Errorf("unpair ghost: %+v %v", out, err)
	}
}

// TestPeerRemoteAsk (R10.2, R10.3, R10.5): an ask on a paired relay is kept
// there (its inbox), shows in this relay's inbox with relays=all marked with
// the relay, is answered from here, and the asking conversation learns the
// answer through the poll, once; answering again is refused, and an unknown
// relay is UNKNOWN_RELAY.
func TestPeerRemoteAsk(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: func(tm *config.Timing) { tm.AskPoll = time.Second }}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "caller"})
	sb := b.newSession(NewSession{Title: "target"})
	res := a.runAllow(sa, onRelay("bravo", "ask", map[string]any{"session": sb,
		"question": "Ship the release?", "options": []string{"ship", "hold"}, "recommendation": "ship"}))
	if linkCode(res[0]) != "ok" || res[0]["status"] != "pending" || res[0]["relay"] != "bravo" {
		t.Fatalf("ask on bravo: %v", res[0])
	}
	qid, _ := res[0]["question_id"].(string)
	if !strings.HasPrefix(qid, "ask_") {
		t.Fatalf("question_id: %v", res[0])
	}
	holds := func(list []*relay.InboxAsk) *relay.InboxAsk {
		for _, x := range list {
			if x.ID == qid {
				return x
			}
		}
		return nil
	}
	// Kept on bravo: in its inbox.
	if in, _ := b.r.Inbox(b.ctx); holds(in) == nil || holds(in).Session != sb {
		t.Fatalf("bravo's inbox lacks %s: %+v", qid, in)
	}
	// Alpha's own inbox does not hold it; with relays=all it does, marked bravo.
	if in, _ := a.r.Inbox(a.ctx); holds(in) != nil {
		t.Errorf("alpha's own inbox holds bravo's ask: %+v", holds(in))
	}
	all, unreachable, err := a.r.InboxWithPaired(a.ctx)
	if err != nil || holds(all) == nil || len(unreachable) != 0 {
		t.Fatalf("alpha's inbox with relays=all lacks %s: %+v unreachable %+v (%v)", qid, all, unreachable, err)
	}
	if x := holds(all); x.Relay != "bravo" {
		t.Errorf("alpha's inbox with relays=all: %+v", x)
	}
	// list_questions on bravo lists it, pending.
	res = a.runAllow(sa, onRelay("bravo", "list_questions", nil))
	if linkCode(res[0]) != "ok" || !strings.Contains(fmt.Sprint(res[0]["questions"]), qid) {
		t.Errorf("list_questions on bravo: %v", res[0])
	}
	// The owner answers in alpha's inbox, for bravo.
	ans, err := a.r.AnswerPairedAsk(a.ctx, "bravo", qid, InboxAnswer{Choice: "ship", Answer: "go ahead"})
	if err != nil {
		t.Fatalf("answer through alpha: %v", err)
	}
	if ans["relay"] != "bravo" {
		t.Errorf("answer: %v", ans)
	}
	// bravo's inbox no longer holds it.
	if in, _ := b.r.Inbox(b.ctx); holds(in) != nil {
		t.Errorf("bravo's inbox still holds the answered ask: %+v", holds(in))
	}
	// Alpha's conversation learns it through the poll (due after ask_poll).
	a.clk.Advance(time.Second)
	answered := func() []string {
		var out []string
		for _, txt := range a.events(sa) {
			if strings.Contains(txt, "question_answered "+qid) {
				out = append(out, txt)
			}
		}
		return out
	}
	waitFor(t, "question_answered in alpha's conversation", func() bool { return len(answered()) > 0 })
	if line := answered()[0]; !strings.Contains(line, `"go ahead"`) || !strings.Contains(line, "choice: ship") || !strings.Contains(line, "via alpha") {
		t.Errorf("question_answered line: %q", line)
	}
	// The ask is no longer followed on alpha; told once only.
	waitFor(t, "alpha to stop polling the answered ask", func() bool {
		asks, err := a.st.RemoteAsks(a.ctx)
		return err == nil && len(asks) == 0
	})
	a.quiet()
	if n := len(answered()); n != 1 {
		t.Errorf("question_answered delivered %d times", n)
	}
	// Answering it again is refused with a clear error.
	if out, err := a.r.AnswerPairedAsk(a.ctx, "bravo", qid, InboxAnswer{Choice: "hold"}); err == nil || HTTPStatus(AsError(err).Code) < 400 {
		t.Errorf("answering twice: %v %v", out, err)
	}
	// An unknown relay in ?relay=.
	if out, err := a.r.AnswerPairedAsk(a.ctx, "nowhere", qid, InboxAnswer{Choice: "hold"}); err == nil || HTTPStatus(AsError(err).Code) != 400 || AsError(err).Code != "REMOTE_RELAY_UNKNOWN_RELAY" {
		t.Errorf("answer on an unknown relay: %v %v", out, err)
	}
}

// TestPeerHops (R4.7, R13.1) with three relays: alpha's agent → bravo's
// session (path [alpha, bravo]), whose agent then prompts charlie: refused
// unless the owner mentioned charlie in the conversation on alpha;
// charlie's agent then prompting alpha: refused. Reading is never limited,
// and the serving side applies the limit to a forged chain too.
func TestPeerHops(t *testing.T) {
	n := newPeerNet(t)
	a, b, c := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{}), n.relay("charlie", peerEndOptions{})
	a.pair(b, PairRequest{})
	a.pair(c, PairRequest{})
	b.pair(c, PairRequest{})
	c.pair(a, PairRequest{})
	sb := b.newSession(NewSession{Title: "middle"})
	sc := c.newSession(NewSession{Title: "far"})
	// The owners there unlocked the next relay in those conversations.
	b.say(sb, "work with @charlie")
	c.say(sc, "work with @alpha")
	final := a.newSession(NewSession{Title: "back home"})
	// The scripts name charlie by its host (127.0.0.1 is charlie's only
	// host on bravo; an IP counts only with @), so alpha's owner message,
	// which carries them, does not mention charlie.
	inner := script(onRelay("alpha", "send", map[string]any{"session": final, "text": "round trip", "wait_seconds": 5}))
	middle := script(onRelay("127.0.0.1", "send", map[string]any{"session": sc, "text": inner, "wait_seconds": 20}))
	outer := onRelay("bravo", "send", map[string]any{"session": sb, "text": middle, "wait_seconds": 25})
	nested := func(res map[string]any) []map[string]any {
		rp, _ := res["reply"].(map[string]any)
		txt, _ := rp["text"].(string)
		return linkResults(txt)
	}

	// charlie not unlocked on alpha: bravo's agent may not go on.
	s1 := a.newSession(NewSession{Title: "origin one"})
	res := a.runAllow(s1, outer)
	if linkCode(res[0]) != "ok" {
		t.Fatalf("alpha → bravo: %v", res[0])
	}
	mid := nested(res[0])
	if len(mid) != 1 || linkCode(mid[0]) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("bravo → charlie with path [alpha, bravo], charlie not unlocked on alpha: %v", mid)
	}
	if e := linkErr(mid[0]); !strings.Contains(e, "alpha → bravo") || !strings.Contains(e, `"charlie"`) {
		t.Errorf("hop error: %q", e)
	}
	if n := len(c.history(sc, "agent")); n != 0 {
		t.Errorf("a refused hop reached charlie: %d agent messages", n)
	}
	// Reading is never limited by hops.
	readMiddle := script(onRelay("127.0.0.1", "read_session", map[string]any{"session": sc}))
	res = a.runAllow(s1, onRelay("bravo", "send", map[string]any{"session": sb, "text": readMiddle, "wait_seconds": 25}))
	if mid := nested(res[0]); len(mid) != 1 || linkCode(mid[0]) != "ok" {
		t.Errorf("bravo reads charlie with path [alpha, bravo]: %v", mid)
	}

	// The owner mentions charlie on alpha: bravo's agent may go on to
	// charlie; charlie's agent may not come back to alpha.
	s2 := a.newSession(NewSession{Title: "origin two"})
	a.say(s2, "this goes through bravo to @charlie")
	res = a.runAllow(s2, outer)
	if linkCode(res[0]) != "ok" {
		t.Fatalf("alpha → bravo: %v", res[0])
	}
	mid = nested(res[0])
	if len(mid) != 1 || linkCode(mid[0]) != "ok" {
		t.Fatalf("bravo → charlie with charlie unlocked on alpha: %v", mid)
	}
	far := nested(mid[0])
	if len(far) != 1 || linkCode(far[0]) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("charlie → alpha with path [alpha, bravo, charlie]: %v", far)
	}
	if n := a.messages(final); n != 0 {
		t.Errorf("the refused hop back reached alpha: %d messages", n)
	}

	// The serving side applies the hop limit too (R13.1), whatever the
	// caller's relay checked: a forged chain [charlie, delta] to bravo.
	tok := b.token()
	for _, tc := range []struct {
		what     string
		action   string
		args     map[string]any
		unlocked []string
		want     string
	}{
		{"served send with path [charlie, delta]", "send", map[string]any{"session": sb, "text": "forged"}, nil, "REMOTE_RELAY_HOP_LIMIT"},
		{"served ask with path [charlie, delta]", "ask", map[string]any{"session": sb, "question": "forged?"}, []string{"delta"}, "REMOTE_RELAY_HOP_LIMIT"},
		{"served read_session with path [charlie, delta]", "read_session", map[string]any{"session": sb}, nil, "ok"},
		{"served send with bravo unlocked where the chain began", "send", map[string]any{"session": sb, "text": "allowed", "wait_seconds": 5}, []string{"Bravo"}, "ok"},
	} {
		env := b.peerRaw("/peer/v1/call", tok, map[string]any{"action": tc.action, "args": tc.args,
			"origin": map[string]any{"relay": "delta", "session": "s-forged", "title": "forged", "model": "m",
				"path": []string{"charlie", "delta"}, "unlocked": tc.unlocked}})
		if linkCode(env) != tc.want {
			t.Errorf("%s: %v, want %s", tc.what, env, tc.want)
		}
	}
}

// TestPeerOldRelayFeatures (R13.3): a relay whose hello lacks a feature is
// refused before any call with REMOTE_RELAY_UNSUPPORTED naming its version;
// what it serves still works.
func TestPeerOldRelayFeatures(t *testing.T) {
	n := newPeerNet(t)
	a, old := n.relay("alpha", peerEndOptions{}), n.relay("oldbox", peerEndOptions{})
	old.setHello(func(h *Hello) { h.Version, h.Features = "0.8.0", []string{"call"} })
	a.pair(old, PairRequest{})
	s := a.newSession(NewSession{Title: "caller", Text: "use @oldbox"})
	res := a.runAllow(s,
		onRelay("oldbox", "subscribe", map[string]any{"sessions": []string{"0123456789abcdef"}}),
		onRelay("oldbox", "ask", map[string]any{"session": "0123456789abcdef", "question": "ship?"}),
		onRelay("oldbox", "list_sessions", nil))
	for i, action := range []string{"subscribe", "ask"} {
		if linkCode(res[i]) != "REMOTE_RELAY_UNSUPPORTED" || !strings.Contains(linkErr(res[i]), "0.8.0") {
			t.Errorf("%s on an old relay: %v", action, res[i])
		}
	}
	if res[2]["ok"] != true {
		t.Errorf("list_sessions on the old relay: %v", res[2])
	}
	calls := 0
	for _, action := range []string{"subscribe", "ask", "list_sessions"} {
		calls += old.count(action)
	}
	if calls != 1 {
		t.Errorf("the old relay got %d calls, want 1 (the refused ones are never sent)", calls)
	}
}

// TestPeerTokenBoundToRelay (R18.20): a peer token speaks for the relay that
// first used it and for no other (a holder of alpha's token cannot pose as
// another relay's agent on bravo).
func TestPeerTokenBoundToRelay(t *testing.T) {
	n := newPeerNet(t)
	a, b := n.relay("alpha", peerEndOptions{}), n.relay("bravo", peerEndOptions{})
	tok := a.pair(b, PairRequest{})
	s := a.newSession(NewSession{Title: "caller", Text: "use @bravo"})
	if res := a.runAllow(s, onRelay("bravo", "list_sessions", nil)); res[0]["ok"] != true {
		t.Fatalf("list_sessions on bravo: %v", res[0])
	}
	call := func(relayName string) map[string]any {
		return b.peerRaw("/peer/v1/call", tok, map[string]any{"action": "list_sessions", "args": map[string]any{},
			"origin": map[string]any{"relay": relayName, "session": "0123456789abcdef", "title": "x", "path": []string{relayName}}})
	}
	if env := call("alpha"); env["ok"] != true {
		t.Errorf("the token's own relay: %v", env)
	}
	if env := call("mallory"); env["code"] != "REMOTE_RELAY_AUTH" || !strings.Contains(linkErr(env), `belongs to relay "alpha"`) {
		t.Errorf("another relay's name with alpha's token: %v", env)
	}
}
