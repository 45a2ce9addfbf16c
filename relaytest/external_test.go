package relaytest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// R17.7: an external session is an MCP client the user runs with the session's token.
func TestExternalSession(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	var body map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/sessions", map[string]any{"provider": "external", "text": "hi"}, &body); st != http.StatusBadRequest ||
		body["code"] != "REMOTE_RELAY_INVALID_INPUT" {
		t.Fatalf("external with text: %d %v", st, body)
	}
	ext := r.NewSession(map[string]any{"provider": "external", "title": "my terminal claude"})
	m := r.Connect(ext.Token, nil)

	// A call that needs a card blocks (no NO_ACTIVE_TURN) until the owner decides.
	type res struct {
		env map[string]any
		err error
	}
	call := func(args map[string]any) chan res {
		ch := make(chan res, 1)
		go func() {
			env, err := callNoFail(m, args)
			ch <- res{env, err}
		}()
		return ch
	}
	create := map[string]any{"action": "create_session", "relay": "this", "text": "hello from outside", "wait_seconds": 10}
	pending := call(create)
	card := r.WaitCard(ext.ID)
	// Not a wait for work: the card is up, and for 300 ms after it the call
	// must still not have returned (it blocks until the decision); that it
	// does not come back is the subject, and no event says so.
	select {
	case got := <-pending:
		t.Fatalf("create_session returned before the card was decided: %v %v", got.env, got.err)
	case <-time.After(300 * time.Millisecond):
	}
	r.Decide(card["id"].(string), "allow")
	got := <-pending
	if got.err != nil || got.env["ok"] != true || got.env["status"] != "done" {
		t.Fatalf("create_session after Allow: %v %v", got.env, got.err)
	}
	child, _ := got.env["session"].(string)
	if reply, _ := got.env["reply"].(map[string]any); reply["text"] != "echo: hello from outside" {
		t.Fatalf("reply: %v", got.env["reply"])
	}

	// Deny refuses: a call in ask mode needs a card each time.
	if st := r.Owner(http.MethodPatch, "/api/v1/sessions/"+ext.ID, map[string]any{"mode": "ask"}, nil); st != http.StatusOK {
		t.Fatalf("patch mode: %d", st)
	}
	pending = call(map[string]any{"action": "send", "relay": "this", "session": child, "text": "again"})
	card = r.WaitCard(ext.ID)
	r.Decide(card["id"].(string), "deny")
	if got := <-pending; got.err != nil || got.env["code"] != "REMOTE_RELAY_PERMISSION" {
		t.Fatalf("send after Deny: %v %v", got.env, got.err)
	}
	if n := len(r.Messages(child, "agent")); n != 1 {
		t.Fatalf("the denied send reached the child: %d agent prompts", n)
	}

	// Prompting it, scheduling into it and subscribing from it are UNSUPPORTED.
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	om := r.Connect(orch.Token, nil)
	env := om.MustFail(map[string]any{"action": "send", "relay": "this", "session": ext.ID, "text": "hi"}, "REMOTE_RELAY_UNSUPPORTED")
	if !strings.Contains(fmt.Sprint(env["error"]), "is an external MCP client; the relay cannot prompt it") {
		t.Fatalf("send error: %v", env["error"])
	}
	om.MustFail(map[string]any{"action": "schedule", "session": ext.ID, "text": "later", "every_minutes": 5}, "REMOTE_RELAY_UNSUPPORTED")
	if st := r.Owner(http.MethodPatch, "/api/v1/sessions/"+ext.ID, map[string]any{"mode": "agent"}, nil); st != http.StatusOK {
		t.Fatalf("patch mode back: %d", st)
	}
	m.MustFail(map[string]any{"action": "subscribe", "sessions": []string{child}}, "REMOTE_RELAY_UNSUPPORTED")
	m.MustFail(map[string]any{"action": "schedule", "text": "remind me", "every_minutes": 5}, "REMOTE_RELAY_UNSUPPORTED")
	// The owner's message is kept, not delivered (R24.7; external_message_test.go).
	var kept map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/messages", map[string]any{"text": "hello"}, &kept); st != http.StatusAccepted ||
		kept["delivered"] != false {
		t.Fatalf("owner message into an external session: %d %v", st, kept)
	}
	// Its own four calls are its activity (🛰️ lines, issue 21 item 9), and the
	// owner's message; nothing else is in it.
	msgs := r.Messages(ext.ID, "")
	if acts := r.Messages(ext.ID, "activity"); len(acts) != 4 || len(msgs) != 5 {
		t.Fatalf("refused prompts left %d messages in the external session besides its %d activity lines and the owner's", len(msgs)-len(acts)-1, len(acts))
	}
	// Reading works as for any session.
	m.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": child})
}
