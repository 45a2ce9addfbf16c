package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// The rules of paired relays (§4.3–4.10, R10.5, §12 pairing, §13), with two
// relays in this process on real HTTP over loopback.

// startPair starts alpha and bravo (each config hook may be nil).
func prStartPair(t *testing.T, alpha, bravo func(c *config.Config)) (*Relay, *Relay) {
	t.Helper()
	a := Start(t, Options{Config: func(c *config.Config) {
		c.Name = "alpha"
		if alpha != nil {
			alpha(c)
		}
	}})
	b := Start(t, Options{Config: func(c *config.Config) {
		c.Name = "bravo"
		if bravo != nil {
			bravo(c)
		}
	}})
	return a, b
}

func prTool(args map[string]any) map[string]any { return map[string]any{"tool": args} }

// prRun writes a script of steps as the owner in session s, allows every
// card the turn asks meanwhile, and returns the tool results in order.
func prRun(t *testing.T, r *Relay, s Session, steps ...map[string]any) []map[string]any {
	t.Helper()
	res, _ := pcRun(t, r, s, "allow", steps...)
	return res
}

func prCode(res map[string]any) string {
	if res["ok"] == true {
		return "ok"
	}
	c, _ := res["code"].(string)
	return c
}

func prErr(res map[string]any) string {
	s, _ := res["error"].(string)
	return s
}

// stateOf fingerprints what another relay's agents could change on r: the
// sessions (all scopes), their messages, the open asks, the pending cards
// and the subscriptions a paired relay's conversation holds there.
func prState(t *testing.T, r *Relay, peerWatcher string) string {
	t.Helper()
	var list struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if st := r.Owner("GET", "/api/v1/sessions?scope=all", nil, &list); st != 200 {
		t.Fatalf("list sessions: %d", st)
	}
	var lines []string
	for _, s := range list.Sessions {
		id := s["id"].(string)
		lines = append(lines, fmt.Sprintf("session %s title=%v archived=%v state=%v mode=%v model=%v messages=%d",
			id, s["title"], s["archived"], s["state"], s["mode"], s["model"], len(r.Messages(id, ""))))
	}
	var inbox struct {
		Asks []map[string]any `json:"asks"`
	}
	r.Owner("GET", "/api/v1/inbox", nil, &inbox)
	for _, a := range inbox.Asks {
		lines = append(lines, fmt.Sprintf("ask %v %v", a["id"], a["status"]))
	}
	lines = append(lines, fmt.Sprintf("cards %d", len(r.Cards())))
	subs, err := r.App.Store().WatcherSubscriptions(context.Background(), peerWatcher)
	if err != nil {
		t.Fatalf("subscriptions: %v", err)
	}
	for _, s := range subs {
		lines = append(lines, fmt.Sprintf("sub %s ended=%q", s.ID, s.EndReason))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// waitQuiet waits until no session on r has a turn running or queued.
func prQuiet(t *testing.T, r *Relay) {
	t.Helper()
	Eventually(t, 30*time.Second, func() bool {
		var list struct {
			Sessions []map[string]any `json:"sessions"`
		}
		r.Owner("GET", "/api/v1/sessions?scope=all", nil, &list)
		for _, s := range list.Sessions {
			if st, _ := s["state"].(string); st != "idle" && s["archived"] != true {
				return false
			}
		}
		return true
	}, "relay %s to be quiet", r.Config.Name)
}

// prAction is one relay_tool action against the paired relay "bravo".
type prAction struct {
	action string
	level  string // R4.5: the lowest level that allows it; "" for schedules
	args   map[string]any
}

func TestPeerPermissionTable(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "caller"})
	sb := b.NewSession(map[string]any{"title": "target"})
	sx := b.NewSession(map[string]any{"title": "throwaway"})
	first := b.Message(sb.ID, "first words")
	prQuiet(t, b)
	watcher := "peer:alpha:" + sa.ID
	const missing = "zzzzzzzzzzzz"
	actions := []prAction{
		{"list_relays", "none", map[string]any{}},
		{"list_questions", "none", map[string]any{}},
		{"withdraw", "none", map[string]any{"question_id": "ask_" + missing}},
		{"relay_info", "read", map[string]any{}},
		{"usage", "read", map[string]any{}},
		{"list_sessions", "read", map[string]any{}},
		{"read_session", "read", map[string]any{"session": sb.ID}},
		{"read_task_output", "read", map[string]any{"session": sb.ID, "task_id": missing}},
		{"wait", "read", map[string]any{"session": sb.ID, "message_id": first, "wait_seconds": 1}},
		{"subscribe", "read", map[string]any{"sessions": []string{sb.ID}}},
		{"list_subscriptions", "read", map[string]any{}},
		{"unsubscribe", "read", map[string]any{"subscription_id": "all"}},
		{"send", "prompt", map[string]any{"session": sb.ID, "text": "hello from alpha", "wait_seconds": 20}},
		{"answer_question", "prompt", map[string]any{"session": sb.ID, "question_id": "q_" + missing, "answer": "yes"}},
		{"ask", "prompt", map[string]any{"session": sb.ID, "question": "Ship it?", "options": []string{"yes", "no"}}},
		{"create_session", "full", map[string]any{"text": "started remotely", "title": "remote child", "wait_seconds": 20}},
		{"update_session", "full", map[string]any{"session": sb.ID, "title": "renamed by alpha"}},
		{"stop", "full", map[string]any{"session": sb.ID}},
		{"archive", "full", map[string]any{"session": sx.ID}},
		{"transfer_subscriptions", "full", map[string]any{"from": missing}},
		{"schedule", "", map[string]any{"text": "later", "every_minutes": 60, "session": sb.ID}},
		{"list_schedules", "", map[string]any{}},
		{"unschedule", "", map[string]any{"schedule_id": "sch_" + missing}},
	}
	rank := map[string]int{"none": 0, "read": 1, "prompt": 2, "full": 3}
	step := func(pa prAction) map[string]any {
		m := map[string]any{"action": pa.action}
		if pa.action != "list_relays" {
			m["relay"] = "bravo"
		}
		for k, v := range pa.args {
			m[k] = v
		}
		return prTool(m)
	}
	for _, level := range []string{"none", "read", "prompt", "full"} {
		var p map[string]any
		if st := a.Owner("PATCH", "/api/v1/relays/bravo", map[string]any{"permission": level}, &p); st != 200 || p["permission"] != level {
			t.Fatalf("set permission %s: %d %v", level, st, p)
		}
		// Below the level: refused with PERMISSION, nothing changes on bravo.
		var refused []prAction
		var allowed []prAction
		for _, pa := range actions {
			if pa.level != "" && rank[pa.level] > rank[level] {
				refused = append(refused, pa)
			} else {
				allowed = append(allowed, pa)
			}
		}
		if len(refused) > 0 {
			prQuiet(t, b)
			before := prState(t, b, watcher)
			var steps []map[string]any
			for _, pa := range refused {
				steps = append(steps, step(pa))
			}
			res := prRun(t, a, sa, steps...)
			for i, pa := range refused {
				if prCode(res[i]) != "REMOTE_RELAY_PERMISSION" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_PERMISSION", level, pa.action, prCode(res[i]), prErr(res[i]))
					continue
				}
				e := prErr(res[i])
				if !strings.Contains(e, `"bravo"`) || !strings.Contains(e, pa.action) || !strings.Contains(e, `"`+pa.level+`"`) {
					t.Errorf("level %s, %s: the error should name the relay, the action and the level it needs: %q", level, pa.action, e)
				}
			}
			if after := prState(t, b, watcher); after != before {
				t.Errorf("level %s: refused actions changed bravo:\nbefore:\n%s\nafter:\n%s", level, before, after)
			}
		}
		// At or above the level: never PERMISSION or LOCKED; schedules are
		// UNSUPPORTED on a paired relay at every level.
		var steps []map[string]any
		for _, pa := range allowed {
			steps = append(steps, step(pa))
		}
		res := prRun(t, a, sa, steps...)
		for i, pa := range allowed {
			got := prCode(res[i])
			switch {
			case pa.level == "":
				if got != "REMOTE_RELAY_UNSUPPORTED" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_UNSUPPORTED", level, pa.action, got, prErr(res[i]))
				}
			case got == "REMOTE_RELAY_PERMISSION" || got == "REMOTE_RELAY_LOCKED":
				t.Errorf("level %s, %s: refused with %s: %s", level, pa.action, got, prErr(res[i]))
			}
			t.Logf("level %-6s %-22s %s", level, pa.action, got)
		}
		// What must work does work.
		want := map[string]string{"list_relays": "ok", "list_questions": "ok",
			"relay_info": "ok", "usage": "ok", "list_sessions": "ok", "read_session": "ok", "subscribe": "ok",
			"list_subscriptions": "ok", "unsubscribe": "ok", "send": "ok", "ask": "ok",
			"create_session": "ok", "update_session": "ok", "archive": "ok",
			"withdraw": "REMOTE_RELAY_NOT_FOUND", "answer_question": "REMOTE_RELAY_NOT_FOUND"}
		for i, pa := range allowed {
			if w, ok := want[pa.action]; ok && prCode(res[i]) != w {
				t.Errorf("level %s, %s: got %s (%s), want %s", level, pa.action, prCode(res[i]), prErr(res[i]), w)
			}
		}
	}
	// The effects of the full level arrived on bravo.
	prQuiet(t, b)
	got := b.Get(sb.ID)
	if got["title"] != "renamed by alpha" {
		t.Errorf("update_session did not rename the session on bravo: %v", got["title"])
	}
	if x := b.Get(sx.ID); x["archived"] != true {
		t.Errorf("archive did not archive the session on bravo: %v", x["archived"])
	}
	msgs := b.Messages(sb.ID, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0]["text"].(string), `[Remote prompt from an agent on relay "alpha" · session "caller" · `) {
		t.Errorf("R4.8: remote prompt line missing: %v", msgs)
	}
	if from, _ := msgs[0]["from"].(map[string]any); from["relay"] != "alpha" || from["session"] != sa.ID || from["title"] != "caller" {
		t.Errorf("R4.8: from metadata: %v", msgs[0])
	}
}

func TestPeerLocks(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	// One peer token for both of alpha's pairings of bravo below: bravo binds
	// the name alpha to the first token that used it (R18.20).
	var bt map[string]any
	if st := b.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &bt); st != 201 {
		t.Fatalf("peer token: %d %v", st, bt)
	}
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": b.URL, "token": bt["token"]}, nil); st != 201 {
		t.Fatalf("pair: %d", st)
	}
	sb := b.NewSession(map[string]any{"title": "target"})
	// The scripts name bravo by its host: an IP counts only with @, so the
	// script itself unlocks nothing.
	byHost := prTool(map[string]any{"action": "list_sessions", "relay": "127.0.0.1"})
	lister := prTool(map[string]any{"action": "list_relays"})
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
	locked := func(s Session, why string) {
		t.Helper()
		res := prRun(t, a, s, byHost, lister)
		if prCode(res[0]) != "REMOTE_RELAY_LOCKED" {
			t.Fatalf("%s: want REMOTE_RELAY_LOCKED, got %v", why, res[0])
		}
		if e := prErr(res[0]); !strings.Contains(e, "@bravo") || !strings.Contains(e, "owner") {
			t.Errorf("%s: the error should ask to have the owner mention @bravo: %q", why, e)
		}
		if prCode(res[1]) != "ok" || bravoIn(res[1])["unlocked"] != false {
			t.Errorf("%s: list_relays should work and show bravo locked: %v", why, res[1])
		}
	}
	unlocked := func(s Session, why string) {
		t.Helper()
		res := prRun(t, a, s, byHost, lister)
		if prCode(res[0]) != "ok" || res[0]["relay"] != "bravo" {
			t.Fatalf("%s: want ok from bravo, got %v", why, res[0])
		}
		if bravoIn(res[1])["unlocked"] != true {
			t.Errorf("%s: list_relays should show bravo unlocked: %v", why, res[1])
		}
	}

	// Locked by default; a word that only starts with the name unlocks nothing.
	s1 := a.NewSession(map[string]any{"title": "one"})
	locked(s1, "a new conversation")
	a.Message(s1.ID, "compare bravos and bravo-2 and me@bravo, also the relay at 127.0.0.1")
	locked(s1, "after bravos, bravo-2, an e-mail and a bare IP")
	// The name as a word unlocks it, for the rest of the conversation.
	a.Message(s1.ID, "Now ask Bravo, please.")
	unlocked(s1, "after bravo as a word")
	a.Message(s1.ID, "thanks, nothing else")
	unlocked(s1, "later in the same conversation")
	// Locked actions really do nothing there: send is refused too.
	s2 := a.NewSession(map[string]any{"title": "two"})
	res := prRun(t, a, s2, prTool(map[string]any{"action": "send", "relay": "127.0.0.1", "session": sb.ID, "text": "x"}))
	if prCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("send in another conversation: %v", res[0])
	}
	if n := len(b.Messages(sb.ID, "")); n != 0 {
		t.Errorf("a locked send reached bravo: %d messages", n)
	}
	locked(s2, "another conversation")
	// @name unlocks.
	a.Message(s2.ID, "@bravo")
	unlocked(s2, "after @bravo")
	// The host, an IP, only with @.
	s3 := a.NewSession(map[string]any{"title": "three"})
	a.Message(s3.ID, "use @127.0.0.1.")
	unlocked(s3, "after @127.0.0.1")
	// A session created with text: that text is the owner's too.
	s4 := a.NewSession(map[string]any{"title": "four", "text": "hello @bravo"})
	unlocked(s4, "after @bravo in the first message")

	// A pairing whose name is an IP address counts only with @ (its name is
	// in the script, without @).
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": b.URL, "token": bt["token"], "name": "10.9.8.7"}, nil); st != 201 {
		t.Fatalf("pair as 10.9.8.7: %d", st)
	}
	s5 := a.NewSession(map[string]any{"title": "five"})
	byIPName := prTool(map[string]any{"action": "relay_info", "relay": "10.9.8.7"})
	if res := prRun(t, a, s5, byIPName); prCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("pairing named 10.9.8.7 after a script naming it: %v", res[0])
	}
	a.Message(s5.ID, "try 10.9.8.7 now")
	if res := prRun(t, a, s5, byIPName); prCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("pairing named 10.9.8.7 after a bare mention: %v", res[0])
	}
	a.Message(s5.ID, "try @10.9.8.7 now")
	if res := prRun(t, a, s5, byIPName); prCode(res[0]) != "ok" {
		t.Fatalf("pairing named 10.9.8.7 after @10.9.8.7: %v", res[0])
	}

	var out map[string]any
	if st := a.Owner("DELETE", "/api/v1/relays/10.9.8.7", nil, &out); st != 200 {
		t.Fatalf("unpair 10.9.8.7: %d %v", st, out)
	}

	// (b) A prompt from bravo's agent unlocks bravo in that conversation (a
	// pairing in both directions).
	pairRelays(t, b, a, nil)
	s6 := a.NewSession(map[string]any{"title": "six"})
	res = prRun(t, a, s6, byHost)
	if prCode(res[0]) != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("before bravo's prompt: %v", res[0])
	}
	res = prRun(t, b, sb, prTool(map[string]any{"action": "send", "relay": "alpha", "session": s6.ID, "text": "hello from bravo's agent", "wait_seconds": 20}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("bravo's agent sends to alpha: %v", res[0])
	}
	res = prRun(t, a, s6, byHost)
	if prCode(res[0]) != "ok" {
		t.Fatalf("after a prompt from bravo's agent, bravo (by host) is unlocked: %v", res[0])
	}
	msgs := a.Messages(s6.ID, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0]["text"].(string), `[Remote prompt from an agent on relay "bravo" · session "target" · `) {
		t.Errorf("R4.8: %v", msgs)
	}
	// s1 was not touched by the prompt into s6; the other conversations stay as they were.
	locked(a.NewSession(map[string]any{"title": "seven"}), "a conversation bravo's agent did not write to")
}

func TestPeerAcceptOff(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "caller"})
	sb := b.NewSession(map[string]any{"title": "target"})
	// A turn that ends, so read_session and wait have something to show.
	first := b.Message(sb.ID, "first words")
	prQuiet(t, b)
	var st map[string]any
	if code := b.Owner("PATCH", "/api/v1/settings", map[string]any{"accept_agent_prompts": false}, &st); code != 200 || st["accept_agent_prompts"] != false {
		t.Fatalf("settings: %d %v", code, st)
	}
	before := prState(t, b, "peer:alpha:"+sa.ID)
	on := func(action string, args map[string]any) map[string]any {
		m := map[string]any{"action": action, "relay": "bravo"}
		for k, v := range args {
			m[k] = v
		}
		return prTool(m)
	}
	gated := []map[string]any{
		on("send", map[string]any{"session": sb.ID, "text": "hi", "wait_seconds": 5}),
		on("create_session", map[string]any{"text": "hi"}),
		on("subscribe", map[string]any{"sessions": []string{sb.ID}}),
		on("answer_question", map[string]any{"session": sb.ID, "question_id": "q_zzzzzzzzzzzz", "answer": "x"}),
		on("stop", map[string]any{"session": sb.ID}),
		on("archive", map[string]any{"session": sb.ID}),
		on("update_session", map[string]any{"session": sb.ID, "title": "changed"}),
		on("ask", map[string]any{"session": sb.ID, "question": "Ship it?"}),
	}
	open := []map[string]any{
		on("list_sessions", nil),
		on("read_session", map[string]any{"session": sb.ID}),
		on("relay_info", nil),
		on("usage", nil),
		on("wait", map[string]any{"session": sb.ID, "message_id": first, "wait_seconds": 1}),
		on("read_task_output", map[string]any{"session": sb.ID, "task_id": "zzzzzzzzzzzz"}),
		on("list_subscriptions", nil),
		on("list_questions", nil),
	}
	res := prRun(t, a, sa, append(append([]map[string]any{}, gated...), open...)...)
	for i, g := range gated {
		act := g["tool"].(map[string]any)["action"]
		if prCode(res[i]) != "REMOTE_RELAY_NOT_ACCEPTING" {
			t.Errorf("%s: got %s (%s), want REMOTE_RELAY_NOT_ACCEPTING", act, prCode(res[i]), prErr(res[i]))
		} else if e := prErr(res[i]); !strings.Contains(e, `"bravo"`) {
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
		if prCode(r) != want {
			t.Errorf("%s with accept off: got %s (%s), want %s", act, prCode(r), prErr(r), want)
		}
	}
	if after := prState(t, b, "peer:alpha:"+sa.ID); after != before {
		t.Errorf("refused actions changed bravo:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Turned on again, a prompt goes through.
	b.Owner("PATCH", "/api/v1/settings", map[string]any{"accept_agent_prompts": true}, &st)
	res = prRun(t, a, sa, gated[0])
	if prCode(res[0]) != "ok" {
		t.Fatalf("send with accept on: %v", res[0])
	}
}

func TestPeerPairingErrors(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	token := func(r *Relay) string {
		var tok map[string]any
		if st := r.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != 201 {
			t.Fatalf("peer token: %d %v", st, tok)
		}
		return tok["token"].(string)
	}
	relays := func() string {
		var out map[string]any
		if st := a.Owner("GET", "/api/v1/relays", nil, &out); st != 200 {
			t.Fatalf("relays: %d", st)
		}
		j, _ := json.Marshal(out["relays"])
		return string(j)
	}
	bt, at := token(b), token(a)
	// Pairs bravo first, for the duplicate case.
	var ok map[string]any
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": b.URL, "token": bt}, &ok); st != 201 || ok["name"] != "bravo" || ok["online"] != true {
		t.Fatalf("pair bravo: %d %v", st, ok)
	}
	if strings.Contains(fmt.Sprint(ok), bt) {
		t.Errorf("the pairing record shows the token: %v", ok)
	}
	port := b.URL[strings.LastIndex(b.URL, ":")+1:]
	selfPort := a.URL[strings.LastIndex(a.URL, ":")+1:]
	cases := []struct {
		name string
		body map[string]any
		code string
		says []string
	}{
		{"http on a public IP", map[string]any{"url": "http://8.8.8.8:" + port, "token": bt, "name": "pub"}, "REMOTE_RELAY_INVALID_INPUT", []string{"https://"}},
		{"a malformed url", map[string]any{"url": "bravo box", "token": bt}, "REMOTE_RELAY_INVALID_INPUT", []string{"not an http(s) address"}},
		{"no url", map[string]any{"token": bt}, "REMOTE_RELAY_INVALID_INPUT", []string{"url is required"}},
		{"the relay itself", map[string]any{"url": a.URL, "token": at}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay itself"}},
		{"the relay itself, by another host", map[string]any{"url": "http://localhost:" + selfPort, "token": at, "name": "me"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay itself"}},
		{"no token", map[string]any{"url": b.URL, "name": "b2"}, "REMOTE_RELAY_INVALID_INPUT", []string{"token is required"}},
		{"a wrong token", map[string]any{"url": b.URL, "token": "rpt_wrongwrongwrong", "name": "b2"}, "REMOTE_RELAY_AUTH", []string{"rejects this token"}},
		{"another relay's token", map[string]any{"url": b.URL, "token": at, "name": "b2"}, "REMOTE_RELAY_AUTH", []string{"rejects this token"}},
		{"an unknown permission", map[string]any{"url": b.URL, "token": bt, "name": "b2", "permission": "admin"}, "REMOTE_RELAY_INVALID_INPUT", []string{"permission must be one of", "admin"}},
		{"a duplicate name", map[string]any{"url": b.URL, "token": bt}, "REMOTE_RELAY_INVALID_INPUT", []string{`"bravo" is paired already`}},
		{"a duplicate name, other case", map[string]any{"url": b.URL, "token": bt, "name": "BRAVO"}, "REMOTE_RELAY_INVALID_INPUT", []string{"paired already"}},
		{"this relay's own name", map[string]any{"url": b.URL, "token": bt, "name": "alpha"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay's own"}},
		{"the name this", map[string]any{"url": b.URL, "token": bt, "name": "this"}, "REMOTE_RELAY_INVALID_INPUT", []string{"this relay's own"}},
		{"a bad name", map[string]any{"url": b.URL, "token": bt, "name": "a b"}, "REMOTE_RELAY_INVALID_INPUT", []string{"must be 1–63"}},
		{"offline without a name", map[string]any{"url": "http://127.0.0.1:1", "token": bt}, "REMOTE_RELAY_OFFLINE", []string{"did not answer", "Give a name"}},
	}
	for _, c := range cases {
		before := relays()
		var out map[string]any
		st := a.Owner("POST", "/api/v1/relays", c.body, &out)
		if st < 400 || st >= 600 || out["code"] != c.code {
			t.Errorf("%s: %d %v, want %s", c.name, st, out, c.code)
			continue
		}
		e, _ := out["error"].(string)
		if !strings.Contains(e, "Nothing was paired.") {
			t.Errorf("%s: the error should say nothing was paired: %q", c.name, e)
		}
		for _, s := range c.says {
			if !strings.Contains(e, s) {
				t.Errorf("%s: the error should say %q: %q", c.name, s, e)
			}
		}
		if tok, _ := c.body["token"].(string); tok != "" && strings.Contains(e, tok) {
			t.Errorf("%s: the error shows the token: %q", c.name, e)
		}
		if after := relays(); after != before {
			t.Errorf("%s: a pairing was stored:\nbefore %s\nafter %s", c.name, before, after)
		}
	}
	// Offline with a name: stored, online false.
	var off map[string]any
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": "http://127.0.0.1:1", "token": bt, "name": "ghost", "permission": "read"}, &off); st != 201 {
		t.Fatalf("offline with a name: %d %v", st, off)
	}
	if off["name"] != "ghost" || off["online"] != false || off["permission"] != "read" || off["offlineReason"] == nil {
		t.Errorf("offline pairing: %v", off)
	}
	var list struct {
		Relays []map[string]any `json:"relays"`
	}
	a.Owner("GET", "/api/v1/relays", nil, &list)
	if len(list.Relays) != 2 {
		t.Fatalf("relays: %v", list.Relays)
	}
	// PATCH refuses an unknown level and a public http URL, and changes nothing.
	before := relays()
	var out map[string]any
	if st := a.Owner("PATCH", "/api/v1/relays/bravo", map[string]any{"permission": "root"}, &out); st != 400 || !strings.Contains(out["error"].(string), "Nothing was changed.") {
		t.Errorf("patch permission root: %d %v", st, out)
	}
	if st := a.Owner("PATCH", "/api/v1/relays/bravo", map[string]any{"url": "http://8.8.8.8"}, &out); st != 400 || !strings.Contains(out["error"].(string), "Nothing was changed.") {
		t.Errorf("patch public http url: %d %v", st, out)
	}
	if st := a.Owner("PATCH", "/api/v1/relays/nobody", map[string]any{"permission": "read"}, &out); st != 404 {
		t.Errorf("patch an unknown pairing: %d %v", st, out)
	}
	if after := relays(); after != before {
		t.Errorf("refused patches changed the pairings:\n%s\n%s", before, after)
	}
	// Removing the offline pairing.
	if st := a.Owner("DELETE", "/api/v1/relays/ghost", nil, &out); st != 200 || out["removed"] != true {
		t.Errorf("unpair ghost: %d %v", st, out)
	}
}

// fakePeer is a relay look-alike: it answers hello properly and misbehaves on
// /peer/v1/call as call says.
func prFakePeer(t *testing.T, name string, call http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/peer/v1/hello":
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"name":%q,"version":"9.9","instance":"inst-%s","features":["call","events","asks","inbox","exclude"]}`, name, name)
		case "/peer/v1/call":
			call(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPeerFaults(t *testing.T) {
	a := Start(t, Options{Config: func(c *config.Config) {
		c.Name = "alpha"
		c.Timing.PeerTimeout = time.Second
	}})
	const secret = "rpt_SECRETtokenDoNotShow123"
	const htmlBody = "<html><body>Proxy login SECRET-PAGE</body></html>"
	var hanging atomic.Int32
	fakes := map[string]*httptest.Server{
		"fhtml": prFakePeer(t, "fhtml", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(htmlBody))
		}),
		"fjunk": prFakePeer(t, "fjunk", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok": tru, "sessions": [`))
		}),
		"fhang": prFakePeer(t, "fhang", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // a read body lets the server notice the caller going away
			hanging.Add(1)
			defer hanging.Add(-1)
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		}),
		"fauth": prFakePeer(t, "fauth", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"This is not a peer token of this relay.","code":"REMOTE_RELAY_AUTH"}`))
		}),
	}
	for name, srv := range fakes {
		var p map[string]any
		if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": srv.URL, "token": secret, "name": name}, &p); st != 201 {
			t.Fatalf("pair %s: %d %v", name, st, p)
		}
	}
	sa := a.NewSession(map[string]any{"title": "caller"})
	list := func(name string) map[string]any {
		return prTool(map[string]any{"action": "list_sessions", "relay": name})
	}
	start := time.Now()
	res := prRun(t, a, sa, list("fhtml"), list("fjunk"), list("fhang"), list("fauth"))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("four faulty calls took %s", d)
	}
	want := map[string]string{"fhtml": "REMOTE_RELAY_OFFLINE", "fjunk": "REMOTE_RELAY_OFFLINE", "fhang": "REMOTE_RELAY_OFFLINE", "fauth": "REMOTE_RELAY_AUTH"}
	for i, name := range []string{"fhtml", "fjunk", "fhang", "fauth"} {
		r := res[i]
		e := prErr(r)
		t.Logf("%s: %s: %s", name, prCode(r), e)
		if prCode(r) != want[name] {
			t.Errorf("%s: got %s (%s), want %s", name, prCode(r), e, want[name])
		}
		if !strings.Contains(e, `"`+name+`"`) {
			t.Errorf("%s: the error should name the relay: %q", name, e)
		}
		raw, _ := json.Marshal(r)
		for _, leak := range []string{secret, "SECRET-PAGE", "<html", "tru,"} {
			if strings.Contains(string(raw), leak) {
				t.Errorf("%s: the envelope shows %q: %s", name, leak, raw)
			}
		}
	}
	if e := prErr(res[2]); !strings.Contains(e, "within 1s") {
		t.Errorf("fhang: the error should say the timeout: %q", e)
	}
	// list_relays shows them offline now (not fjunk's garbage nor the token).
	res = prRun(t, a, sa, prTool(map[string]any{"action": "list_relays"}))
	raw, _ := json.Marshal(res[0])
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "SECRET-PAGE") {
		t.Errorf("list_relays shows a secret: %s", raw)
	}
	rels, _ := res[0]["relays"].([]any)
	for _, x := range rels {
		m := x.(map[string]any)
		if m["name"] == "fhang" || m["name"] == "fauth" || m["name"] == "fhtml" {
			if m["online"] != false {
				t.Errorf("list_relays: %s should be offline after its failure: %v", m["name"], m)
			}
		}
	}

	// §16: the link state and the failed requests show in /metrics.
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`relay_peer_requests_total{code="REMOTE_RELAY_OFFLINE",kind="call"}`,
		`relay_peer_requests_total{code="REMOTE_RELAY_AUTH",kind="call"}`, `relay_paired_relays_offline 4`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// No blocking: while one session waits on the hanging relay, another
	// session's local call answers at once.
	mid := a.Message(sa.ID, Script(prTool(map[string]any{"action": "wait", "relay": "fhang", "session": "zzzzzzzzzzzz", "wait_seconds": 6})))
	Eventually(t, 10*time.Second, func() bool { return hanging.Load() > 0 }, "the call to reach the hanging relay")
	s2 := a.NewSession(map[string]any{"title": "other"})
	t0 := time.Now()
	local, _ := a.InTurn(s2, map[string]any{"action": "list_sessions"}, "")
	if local["ok"] != true {
		t.Fatalf("local call meanwhile: %v", local)
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("the local call took %s while another session waited on a hanging relay", d)
	}
	if tr := a.Turn(mid); tr.Status != "running" {
		t.Errorf("the hanging call's turn should still be running, is %s", tr.Status)
	}
	tr := a.WaitTurn(mid, 30*time.Second, "done", "error", "stopped")
	hres := ToolResults(tr.Reply)
	if len(hres) != 1 || prCode(hres[0]) != "REMOTE_RELAY_OFFLINE" || !strings.Contains(prErr(hres[0]), `"fhang"`) {
		t.Errorf("the hanging wait: %v", hres)
	}
}

func TestPeerRemoteAsk(t *testing.T) {
	a, b := prStartPair(t, func(c *config.Config) {
		c.Timing.AskPoll = time.Second
		c.Timing.PeerPoll = 300 * time.Millisecond
	}, nil)
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "caller"})
	sb := b.NewSession(map[string]any{"title": "target"})
	res := prRun(t, a, sa, prTool(map[string]any{"action": "ask", "relay": "bravo", "session": sb.ID,
		"question": "Ship the release?", "options": []string{"ship", "hold"}, "recommendation": "ship"}))
	if prCode(res[0]) != "ok" || res[0]["status"] != "pending" || res[0]["relay"] != "bravo" {
		t.Fatalf("ask on bravo: %v", res[0])
	}
	qid, _ := res[0]["question_id"].(string)
	if !strings.HasPrefix(qid, "ask_") {
		t.Fatalf("question_id: %v", res[0])
	}
	// Kept on bravo: in its inbox.
	var inbox struct {
		Asks        []map[string]any `json:"asks"`
		Unreachable []any            `json:"unreachable"`
	}
	b.Owner("GET", "/api/v1/inbox", nil, &inbox)
	found := false
	for _, x := range inbox.Asks {
		if x["id"] == qid && x["session"] == sb.ID {
			found = true
		}
	}
	if !found {
		t.Fatalf("bravo's inbox lacks %s: %v", qid, inbox.Asks)
	}
	// Alpha's own inbox does not hold it; with relays=all it does, marked bravo.
	a.Owner("GET", "/api/v1/inbox", nil, &inbox)
	for _, x := range inbox.Asks {
		if x["id"] == qid {
			t.Errorf("alpha's own inbox holds bravo's ask: %v", x)
		}
	}
	a.Owner("GET", "/api/v1/inbox?relays=all", nil, &inbox)
	found = false
	for _, x := range inbox.Asks {
		if x["id"] == qid {
			found = true
			if x["relay"] != "bravo" {
				t.Errorf("alpha's inbox with relays=all: %v", x)
			}
		}
	}
	if !found || len(inbox.Unreachable) != 0 {
		t.Fatalf("alpha's inbox with relays=all lacks %s: %v unreachable %v", qid, inbox.Asks, inbox.Unreachable)
	}
	// list_questions on bravo lists it, pending.
	res = prRun(t, a, sa, prTool(map[string]any{"action": "list_questions", "relay": "bravo"}))
	if prCode(res[0]) != "ok" || !strings.Contains(fmt.Sprint(res[0]["questions"]), qid) {
		t.Errorf("list_questions on bravo: %v", res[0])
	}
	// The owner answers in alpha's inbox, for bravo.
	var ans map[string]any
	if st := a.Owner("POST", "/api/v1/inbox/"+qid+"?relay=bravo", map[string]any{"choice": "ship", "answer": "go ahead"}, &ans); st != 200 {
		t.Fatalf("answer through alpha: %d %v", st, ans)
	}
	if ans["relay"] != "bravo" {
		t.Errorf("answer: %v", ans)
	}
	// bravo's inbox no longer holds it.
	b.Owner("GET", "/api/v1/inbox", nil, &inbox)
	for _, x := range inbox.Asks {
		if x["id"] == qid {
			t.Errorf("bravo's inbox still holds the answered ask: %v", x)
		}
	}
	// Alpha's conversation learns it through the poll.
	var line string
	Eventually(t, 20*time.Second, func() bool {
		for _, txt := range a.EventTexts(sa.ID) {
			if strings.Contains(txt, "question_answered "+qid) {
				line = txt
				return true
			}
		}
		return false
	}, "question_answered in alpha's conversation")
	if !strings.Contains(line, `"go ahead"`) || !strings.Contains(line, "choice: ship") || !strings.Contains(line, "via alpha") {
		t.Errorf("question_answered line: %q", line)
	}
	// The ask is no longer followed on alpha; told once only.
	Eventually(t, 5*time.Second, func() bool {
		asks, err := a.App.Store().RemoteAsks(context.Background())
		return err == nil && len(asks) == 0
	}, "alpha to stop polling the answered ask")
	time.Sleep(1500 * time.Millisecond)
	n := 0
	for _, txt := range a.EventTexts(sa.ID) {
		if strings.Contains(txt, "question_answered "+qid) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("question_answered delivered %d times", n)
	}
	// Answering it again is refused with a clear error.
	st := a.Owner("POST", "/api/v1/inbox/"+qid+"?relay=bravo", map[string]any{"choice": "hold"}, &ans)
	if st < 400 {
		t.Errorf("answering twice: %d %v", st, ans)
	}
	// An unknown relay in ?relay=.
	if st := a.Owner("POST", "/api/v1/inbox/"+qid+"?relay=nowhere", map[string]any{"choice": "hold"}, &ans); st != 400 || ans["code"] != "REMOTE_RELAY_UNKNOWN_RELAY" {
		t.Errorf("answer on an unknown relay: %d %v", st, ans)
	}
}

// R4.7 with three relays: alpha's agent → bravo's session (path [alpha,
// bravo]), whose agent then prompts charlie: refused unless the owner
// mentioned charlie in the conversation on alpha; charlie's agent then
// prompting alpha: refused.
func TestPeerHops(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	c := Start(t, Options{Config: func(cfg *config.Config) { cfg.Name = "charlie" }})
	pairRelays(t, a, b, nil)
	pairRelays(t, a, c, nil)
	pairRelays(t, b, c, nil)
	pairRelays(t, c, a, nil)
	sb := b.NewSession(map[string]any{"title": "middle"})
	sc := c.NewSession(map[string]any{"title": "far"})
	// The owners there unlocked the next relay in those conversations.
	b.Message(sb.ID, "work with @charlie")
	c.Message(sc.ID, "work with @alpha")
	prQuiet(t, b)
	prQuiet(t, c)
	final := a.NewSession(map[string]any{"title": "back home"})
	// The scripts name charlie by its host (127.0.0.1 is charlie's only
	// host on bravo; an IP counts only with @), so alpha's owner message,
	// which carries them, does not mention charlie.
	inner := Script(prTool(map[string]any{"action": "send", "relay": "alpha", "session": final.ID, "text": "round trip", "wait_seconds": 5}))
	middle := Script(prTool(map[string]any{"action": "send", "relay": "127.0.0.1", "session": sc.ID, "text": inner, "wait_seconds": 20}))
	outer := prTool(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": middle, "wait_seconds": 25})
	nested := func(res map[string]any) []map[string]any {
		t.Helper()
		rp, _ := res["reply"].(map[string]any)
		txt, _ := rp["text"].(string)
		return ToolResults(txt)
	}

	// charlie not unlocked on alpha: bravo's agent may not go on.
	s1 := a.NewSession(map[string]any{"title": "origin one"})
	res := prRun(t, a, s1, outer)
	if prCode(res[0]) != "ok" {
		t.Fatalf("alpha → bravo: %v", res[0])
	}
	mid := nested(res[0])
	if len(mid) != 1 || prCode(mid[0]) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("bravo → charlie with path [alpha, bravo], charlie not unlocked on alpha: %v", mid)
	}
	if e := prErr(mid[0]); !strings.Contains(e, "alpha → bravo") || !strings.Contains(e, `"charlie"`) {
		t.Errorf("hop error: %q", e)
	}
	if n := len(c.Messages(sc.ID, "agent")); n != 0 {
		t.Errorf("a refused hop reached charlie: %d agent messages", n)
	}
	// Reading is never limited by hops.
	readMiddle := Script(prTool(map[string]any{"action": "read_session", "relay": "127.0.0.1", "session": sc.ID}))
	res = prRun(t, a, s1, prTool(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": readMiddle, "wait_seconds": 25}))
	if mid := nested(res[0]); len(mid) != 1 || prCode(mid[0]) != "ok" {
		t.Errorf("bravo reads charlie with path [alpha, bravo]: %v", mid)
	}

	// The owner mentions charlie on alpha: bravo's agent may go on to
	// charlie; charlie's agent may not come back to alpha.
	s2 := a.NewSession(map[string]any{"title": "origin two"})
	a.Message(s2.ID, "this goes through bravo to @charlie")
	res = prRun(t, a, s2, outer)
	if prCode(res[0]) != "ok" {
		t.Fatalf("alpha → bravo: %v", res[0])
	}
	mid = nested(res[0])
	if len(mid) != 1 || prCode(mid[0]) != "ok" {
		t.Fatalf("bravo → charlie with charlie unlocked on alpha: %v", mid)
	}
	far := nested(mid[0])
	if len(far) != 1 || prCode(far[0]) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("charlie → alpha with path [alpha, bravo, charlie]: %v", far)
	}
	if n := len(a.Messages(final.ID, "")); n != 0 {
		t.Errorf("the refused hop back reached alpha: %d messages", n)
	}

	// The serving side applies the hop limit too (R13.1), whatever the
	// caller's relay checked: a forged chain [charlie, delta] to bravo.
	var tok map[string]any
	b.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok)
	call := func(action string, args map[string]any, unlocked []string) map[string]any {
		t.Helper()
		_, env := peerPost(t, b, "/peer/v1/call", tok["token"].(string), map[string]any{"action": action, "args": args,
			"origin": map[string]any{"relay": "delta", "session": "s-forged", "title": "forged", "model": "m",
				"path": []string{"charlie", "delta"}, "unlocked": unlocked}})
		return env
	}
	if env := call("send", map[string]any{"session": sb.ID, "text": "forged"}, nil); prCode(env) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Errorf("served send with path [charlie, delta]: %v", env)
	}
	if env := call("ask", map[string]any{"session": sb.ID, "question": "forged?"}, []string{"delta"}); prCode(env) != "REMOTE_RELAY_HOP_LIMIT" {
		t.Errorf("served ask with path [charlie, delta]: %v", env)
	}
	if env := call("read_session", map[string]any{"session": sb.ID}, nil); prCode(env) != "ok" {
		t.Errorf("served read_session with path [charlie, delta]: %v", env)
	}
	if env := call("send", map[string]any{"session": sb.ID, "text": "allowed", "wait_seconds": 5}, []string{"Bravo"}); prCode(env) != "ok" {
		t.Errorf("served send with bravo unlocked where the chain began: %v", env)
	}
}

// TestPeerOldRelayFeatures (R13.3): a relay whose hello lacks a feature is
// refused before any call with REMOTE_RELAY_UNSUPPORTED naming the feature;
// what it serves still works.
func TestPeerOldRelayFeatures(t *testing.T) {
	a := Start(t, Options{Config: func(c *config.Config) { c.Name = "alpha" }})
	var calls atomic.Int32
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/peer/v1/hello":
			_, _ = w.Write([]byte(`{"name":"oldbox","version":"0.8.0","instance":"inst-old","features":["call"]}`))
		case "/peer/v1/call":
			calls.Add(1)
			_, _ = w.Write([]byte(`{"ok":true,"relay":"oldbox","summary":"list_sessions → oldbox: 0 sessions","sessions":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(old.Close)
	var p map[string]any
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": old.URL, "token": "rpt_x"}, &p); st != 201 {
		t.Fatalf("pair: %d %v", st, p)
	}
	s := a.NewSession(map[string]any{"title": "caller", "text": "use @oldbox"})
	res := prRun(t, a, s,
		prTool(map[string]any{"action": "subscribe", "relay": "oldbox", "sessions": []string{"0123456789abcdef"}}),
		prTool(map[string]any{"action": "ask", "relay": "oldbox", "session": "0123456789abcdef", "question": "ship?"}),
		prTool(map[string]any{"action": "list_sessions", "relay": "oldbox"}))
	for i, action := range []string{"subscribe", "ask"} {
		if prCode(res[i]) != "REMOTE_RELAY_UNSUPPORTED" || !strings.Contains(prErr(res[i]), "0.8.0") {
			t.Errorf("%s on an old relay: %v", action, res[i])
		}
	}
	if res[2]["ok"] != true {
		t.Errorf("list_sessions on the old relay: %v", res[2])
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the old relay got %d calls, want 1 (the refused ones are never sent)", n)
	}
}

// TestPeerTokenBoundToRelay: a peer token speaks for the relay that first
// used it and for no other (a holder of alpha's token cannot pose as
// another relay's agent on bravo).
func TestPeerTokenBoundToRelay(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	var tok map[string]any
	if st := b.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != 201 {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	var p map[string]any
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": b.URL, "token": tok["token"]}, &p); st != 201 {
		t.Fatalf("pair: %d %v", st, p)
	}
	s := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
	if res := prRun(t, a, s, prTool(map[string]any{"action": "list_sessions", "relay": "bravo"})); res[0]["ok"] != true {
		t.Fatalf("list_sessions on bravo: %v", res[0])
	}
	call := func(relayName string) map[string]any {
		_, env := peerPost(t, b, "/peer/v1/call", tok["token"].(string), map[string]any{"action": "list_sessions", "args": map[string]any{},
			"origin": map[string]any{"relay": relayName, "session": "0123456789abcdef", "title": "x", "path": []string{relayName}}})
		return env
	}
	if env := call("alpha"); env["ok"] != true {
		t.Errorf("the token's own relay: %v", env)
	}
	env := call("mallory")
	if env["code"] != "REMOTE_RELAY_AUTH" || !strings.Contains(env["error"].(string), `belongs to relay "alpha"`) {
		t.Errorf("another relay's name with alpha's token: %v", env)
	}
}
