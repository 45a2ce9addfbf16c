package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/oar/relay/store"
)

// The caps of a paired relay's prompts here (R18.21, R6.1), against one
// relay's peer-serve methods; moved down from relaytest/peer_cap_test.go.

// capLong is a turn that sleeps two minutes (stopped by the test).
var capLong = script(map[string]any{"sleep_ms": 120000}, map[string]any{"reply": "long done"})

// capCall is a POST /peer/v1/call with tok as the agent of relay's
// conversation session, safe on any goroutine: the envelope (nil, with a
// test error, when it is not one).
func capCall(t *testing.T, e *peerEnd, tok, relay, session, action string, args map[string]any) map[string]any {
	raw, err := json.Marshal(map[string]any{"action": action, "args": args,
		"origin": map[string]any{"relay": relay, "session": session, "title": "t", "model": "m", "path": []string{relay}}})
	if err != nil {
		t.Error(err)
		return nil
	}
	if ok, err := e.r.PeerTokenValid(e.ctx, tok); err != nil || !ok {
		t.Errorf("peer call %s as %s/%s: the token is not valid (%v)", action, relay, session, err)
		return nil
	}
	out, _ := e.r.PeerCall(e.ctx, tok, raw)
	var env map[string]any
	if err := json.Unmarshal(out, &env); err != nil {
		t.Errorf("peer call %s as %s/%s: %s: %v", action, relay, session, out, err)
	}
	return env
}

// capStop stops the session of each turn (the long turns, before the test ends).
func capStop(e *peerEnd, turns []string) {
	for _, id := range turns {
		if tr, err := e.r.Turn(e.ctx, id); err == nil {
			_, _ = e.r.OwnerStop(e.ctx, tr.Session)
		}
	}
}

// TestPeerTokenCapAcrossConversations (R18.21, issue 20 item 5): a paired
// relay that names a new origin.session on every call cannot lift the
// 4-at-work cap: the serving relay also counts all the sessions that
// relay's conversations started here together, per peer token
// (limits.active_sessions_per_peer_token, 16). The 17th concurrent prompt is
// refused with the cap's code while 16 are at work, and a turn's end frees a
// slot.
func TestPeerTokenCapAcrossConversations(t *testing.T) {
	b := newPeerNet(t).relay("bravo", peerEndOptions{})
	tok := b.token()
	atWork := func() int {
		n, err := b.st.PeerBusyCount(b.ctx, "peer:alpha:x")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Four sessions started by four of alpha's conversations, each turn done:
	// idle again, nothing at work.
	warm := map[string]string{} // session -> the conversation that started it
	for i := range 4 {
		conv := fmt.Sprintf("warm%02d", i)
		env := capCall(t, b, tok, "alpha", conv, "create_session", map[string]any{"text": "warm", "wait_seconds": 15})
		if linkCode(env) != "ok" || env["status"] != "done" {
			t.Fatalf("warm-up session %d: %v", i, env)
		}
		warm[env["session"].(string)] = conv
	}
	if n := atWork(); n != 0 {
		t.Fatalf("%d of alpha's sessions at work after their turns ended, want 0", n)
	}

	// 17 prompts at once, each from a conversation of its own: 4 sends to the
	// idle sessions, 13 new sessions. Every conversation is far below its 4.
	type call struct {
		action, conv string
		args         map[string]any
		env          map[string]any
	}
	var calls []*call
	for sid, conv := range warm {
		calls = append(calls, &call{action: "send", conv: conv, args: map[string]any{"session": sid, "text": capLong, "wait_seconds": 0}})
	}
	for i := range 13 {
		calls = append(calls, &call{action: "create_session", conv: fmt.Sprintf("burst%02d", i), args: map[string]any{"text": capLong, "wait_seconds": 0}})
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			<-start
			c.env = capCall(t, b, tok, "alpha", c.conv, c.action, c.args)
		})
	}
	close(start)
	wg.Wait()
	var running []string // message ids of the prompts that got in
	defer func() { capStop(b, running) }()
	var refused []*call
	for _, c := range calls {
		switch linkCode(c.env) {
		case "ok":
			running = append(running, c.env["message_id"].(string))
		case "REMOTE_RELAY_SESSION_LIMIT":
			refused = append(refused, c)
		default:
			t.Fatalf("%s from %s: %v", c.action, c.conv, c.env)
		}
	}
	if len(running) != 16 || len(refused) != 1 {
		t.Fatalf("%d prompts got in and %d were refused; want 16 and 1", len(running), len(refused))
	}
	nothing := "Nothing was sent."
	if refused[0].action == "create_session" {
		nothing = "No session was created."
	}
	if msg := linkErr(refused[0].env); !strings.Contains(msg, `Relay "alpha" already has 16 prompts at work here`) || !strings.Contains(msg, nothing) {
		t.Errorf("the refusal says %q; want that alpha has 16 prompts at work here, and %q", msg, nothing)
	}
	if n := atWork(); n != 16 {
		t.Fatalf("%d of alpha's sessions at work, want 16", n)
	}
	// Any spelling of the name, any fresh conversation: still full.
	if env := capCall(t, b, tok, "ALPHA", "fresh-1", "create_session", map[string]any{"text": "x", "wait_seconds": 0}); linkCode(env) != "REMOTE_RELAY_SESSION_LIMIT" {
		t.Fatalf("an 18th prompt, from a fresh conversation: %v", env)
	}

	// A turn's end frees a slot: the owner stops one running turn.
	var stopped *store.Turn
	b.actUntil("a prompt of alpha's to run", func() bool {
		for _, id := range running {
			if tr, err := b.r.Turn(b.ctx, id); err == nil && tr.Status == store.TurnRunning {
				stopped = tr
				return true
			}
		}
		return false
	})
	if _, err := b.r.OwnerStop(b.ctx, stopped.Session); err != nil {
		t.Fatalf("stop: %v", err)
	}
	b.actTurn(stopped.ID, store.TurnStopped)
	b.actUntil("the stopped session to leave alpha's count", func() bool { return atWork() == 15 })
	env := capCall(t, b, tok, "alpha", "fresh-2", "create_session", map[string]any{"text": capLong, "wait_seconds": 0})
	if linkCode(env) != "ok" {
		t.Fatalf("a prompt after a turn ended: %v", env)
	}
	running = append(running, env["message_id"].(string))
	if n := atWork(); n != 16 {
		t.Fatalf("%d of alpha's sessions at work, want 16", n)
	}
	// Another relay's token has its own 16.
	tok2 := b.token()
	env = capCall(t, b, tok2, "charlie", "c1", "create_session", map[string]any{"text": "hello", "wait_seconds": 0})
	if linkCode(env) != "ok" {
		t.Fatalf("another relay: %v", env)
	}
	running = append(running, env["message_id"].(string))
}

// TestPeerConversationCapAsSent (R18.21 (a), R6.1): each of a paired
// relay's conversations, as the calling relay sent it (origin.session), has
// its own 4 at work here.
func TestPeerConversationCapAsSent(t *testing.T) {
	b := newPeerNet(t).relay("bravo", peerEndOptions{})
	tok := b.token()
	var ids []string
	defer func() { capStop(b, ids) }()
	for i := range 4 {
		env := capCall(t, b, tok, "alpha", "one", "create_session", map[string]any{"text": capLong, "wait_seconds": 0})
		if linkCode(env) != "ok" {
			t.Fatalf("session %d of conversation one: %v", i, env)
		}
		ids = append(ids, env["message_id"].(string))
	}
	env := capCall(t, b, tok, "alpha", "one", "create_session", map[string]any{"text": capLong, "wait_seconds": 0})
	if linkCode(env) != "REMOTE_RELAY_SESSION_LIMIT" || !strings.Contains(linkErr(env), "this conversation started") {
		t.Fatalf("a fifth session of conversation one: %v", env)
	}
	env = capCall(t, b, tok, "alpha", "two", "create_session", map[string]any{"text": capLong, "wait_seconds": 0})
	if linkCode(env) != "ok" {
		t.Fatalf("conversation two: %v", env)
	}
	ids = append(ids, env["message_id"].(string))
}
