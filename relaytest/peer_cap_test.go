package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R18.21, issue 20 item 5: a paired relay that names a new origin.session on
// every call cannot lift the 4-at-work cap: the serving relay also counts all
// the sessions that relay's conversations started here together, per peer
// token (limits.active_sessions_per_peer_token, 16). The 17th concurrent
// prompt is refused with the cap's code while 16 are at work, and a turn's end
// frees a slot.
func TestPeerTokenCapAcrossConversations(t *testing.T) {
	t.Parallel()
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	tok, _ := newPeerToken(t, b)
	st := b.App.Store()
	ctx := context.Background()
	atWork := func() int {
		n, err := st.PeerBusyCount(ctx, "peer:alpha:x")
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
		env := peerCall(t, b, tok, "alpha", conv, "create_session", map[string]any{"text": "warm", "wait_seconds": 15})
		if prCode(env) != "ok" || env["status"] != "done" {
			t.Fatalf("warm-up session %d: %v", i, env)
		}
		warm[env["session"].(string)] = conv
	}
	if n := atWork(); n != 0 {
		t.Fatalf("%d of alpha's sessions at work after their turns ended, want 0", n)
	}

	// 17 prompts at once, each from a conversation of its own: 4 sends to the
	// idle sessions, 13 new sessions. Every conversation is far below its 4.
	long := Script(stepSleep(120000), stepReply("long done"))
	type call struct {
		action, conv string
		args         map[string]any
		env          map[string]any
	}
	var calls []*call
	for sid, conv := range warm {
		calls = append(calls, &call{action: "send", conv: conv, args: map[string]any{"session": sid, "text": long, "wait_seconds": 0}})
	}
	for i := range 13 {
		calls = append(calls, &call{action: "create_session", conv: fmt.Sprintf("burst%02d", i), args: map[string]any{"text": long, "wait_seconds": 0}})
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			<-start
			c.env = rawPeerCall(t, b, tok, "alpha", c.conv, c.action, c.args)
		})
	}
	close(start)
	wg.Wait()
	var running []string // message ids of the prompts that got in
	var refused []*call
	for _, c := range calls {
		switch prCode(c.env) {
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
	msg, _ := refused[0].env["error"].(string)
	if !strings.Contains(msg, `Relay "alpha" already has 16 prompts at work here`) || !strings.Contains(msg, nothing) {
		t.Errorf("the refusal says %q; want that alpha has 16 prompts at work here, and %q", msg, nothing)
	}
	if n := atWork(); n != 16 {
		t.Fatalf("%d of alpha's sessions at work, want 16", n)
	}
	// Any spelling of the name, any fresh conversation: still full.
	env := rawPeerCall(t, b, tok, "ALPHA", "fresh-1", "create_session", map[string]any{"text": "x", "wait_seconds": 0})
	if prCode(env) != "REMOTE_RELAY_SESSION_LIMIT" {
		t.Fatalf("an 18th prompt, from a fresh conversation: %v", env)
	}

	// A turn's end frees a slot: the owner stops one running turn.
	var stopped *store.Turn
	Eventually(t, 30*time.Second, func() bool {
		for _, id := range running {
			if tr := b.Turn(id); tr.Status == store.TurnRunning {
				stopped = tr
				return true
			}
		}
		return false
	}, "a prompt of alpha's to run")
	if code := b.Owner("POST", "/api/v1/sessions/"+stopped.Session+"/stop", nil, nil); code != http.StatusOK {
		t.Fatalf("stop: %d", code)
	}
	b.WaitTurn(stopped.ID, 30*time.Second, store.TurnStopped)
	Eventually(t, 10*time.Second, func() bool { return atWork() == 15 }, "the stopped session to leave alpha's count (%d at work)", atWork())
	env = rawPeerCall(t, b, tok, "alpha", "fresh-2", "create_session", map[string]any{"text": long, "wait_seconds": 0})
	if prCode(env) != "ok" {
		t.Fatalf("a prompt after a turn ended: %v", env)
	}
	if n := atWork(); n != 16 {
		t.Fatalf("%d of alpha's sessions at work, want 16", n)
	}
	// Another relay's token has its own 16.
	tok2, _ := newPeerToken(t, b)
	if env := rawPeerCall(t, b, tok2, "charlie", "c1", "create_session", map[string]any{"text": "hello", "wait_seconds": 0}); prCode(env) != "ok" {
		t.Fatalf("another relay: %v", env)
	}
	// Stop the long turns now rather than at shutdown.
	for _, id := range append(running, env["message_id"].(string)) {
		b.Owner("POST", "/api/v1/sessions/"+b.Turn(id).Session+"/stop", nil, nil)
	}
}

// R18.21 (a), R6.1: each of a paired relay's conversations, as the calling
// relay sent it (origin.session), has its own 4 at work here.
func TestPeerConversationCapAsSent(t *testing.T) {
	t.Parallel()
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	tok, _ := newPeerToken(t, b)
	long := Script(stepSleep(120000), stepReply("long done"))
	var ids []string
	for i := range 4 {
		env := peerCall(t, b, tok, "alpha", "one", "create_session", map[string]any{"text": long, "wait_seconds": 0})
		if prCode(env) != "ok" {
			t.Fatalf("session %d of conversation one: %v", i, env)
		}
		ids = append(ids, env["message_id"].(string))
	}
	env := peerCall(t, b, tok, "alpha", "one", "create_session", map[string]any{"text": long, "wait_seconds": 0})
	if msg, _ := env["error"].(string); prCode(env) != "REMOTE_RELAY_SESSION_LIMIT" || !strings.Contains(msg, "this conversation started") {
		t.Fatalf("a fifth session of conversation one: %v", env)
	}
	env = peerCall(t, b, tok, "alpha", "two", "create_session", map[string]any{"text": long, "wait_seconds": 0})
	if prCode(env) != "ok" {
		t.Fatalf("conversation two: %v", env)
	}
	for _, id := range append(ids, env["message_id"].(string)) {
		b.Owner("POST", "/api/v1/sessions/"+b.Turn(id).Session+"/stop", nil, nil)
	}
}

// rawPeerCall is peerCall from any goroutine: a transport failure is reported
// with t.Error and answers an empty envelope.
func rawPeerCall(t *testing.T, r *Relay, tok, relay, session, action string, args map[string]any) map[string]any {
	var env map[string]any
	body := map[string]any{"action": action, "args": args,
		"origin": map[string]any{"relay": relay, "session": session, "title": "t", "model": "m", "path": []string{relay}}}
	if code := peerReqErr(r, tok, "POST", "/peer/v1/call", body, &env); code != http.StatusOK {
		t.Errorf("peer call %s as %s/%s: %d %v", action, relay, session, code, env)
	}
	return env
}

// peerReqErr is peerReq without a test: -1 when the request failed.
func peerReqErr(r *Relay, tok, method, path string, body, out any) int {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, r.URL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, out)
	return resp.StatusCode
}
