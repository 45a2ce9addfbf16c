package domain

import (
	"net/http"
	"testing"
)

// What a peer token reaches on the relay that issued it (R18.21), moved
// down from relaytest/peer_tokens_test.go (issue 24 step 3): the requests
// go through the linked fixture's token check as the api's /peer/v1 routes
// do; a status the api answers for a domain error is the code's
// (HTTPStatus: REMOTE_RELAY_NOT_FOUND is 404).

// r3Status is the api's status for an owner or peer method's error (200 for none).
func r3Status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return HTTPStatus(AsError(err).Code)
}

// TestRulesPeerTokenReachesOnlyItsAsks (R18.21): a peer token reads and
// answers only the asks its own relay's conversations made; never the asks
// this relay's own agents put to their owner, nor another paired relay's.
func TestRulesPeerTokenReachesOnlyItsAsks(t *testing.T) {
	b := newPeerNet(t).relay("bravo", peerEndOptions{})
	tokA, tokC := b.token(), b.token()
	local := b.session(NewSession{Title: "local"})
	own := b.ok(local, map[string]any{"action": "ask", "relay": "this", "question": "bravo's own agent asks its owner"})
	ownID, _ := own["question_id"].(string)
	envA := b.r3PeerCall(tokA, "alpha", "sa", "ask", map[string]any{"question": "alpha's agent asks", "session": local})
	if linkCode(envA) != "ok" {
		t.Fatalf("alpha's ask: %v", envA)
	}
	askA, _ := envA["question_id"].(string)
	if env := b.r3PeerCall(tokC, "charlie", "sc", "list_sessions", nil); linkCode(env) != "ok" {
		t.Fatalf("charlie binds: %v", env)
	}
	asks, err := b.r.PeerInbox(b.ctx, tokA)
	if err != nil {
		t.Fatalf("inbox: %v", err)
	}
	if len(asks) != 1 || asks[0].ID != askA {
		t.Fatalf("alpha's inbox on bravo: %+v (want only %s; bravo's own %s never)", asks, askA, ownID)
	}
	asks, err = b.r.PeerInbox(b.ctx, tokC)
	if err != nil {
		t.Fatalf("charlie's inbox: %v", err) // a refused request would show no asks for the wrong reason
	}
	if len(asks) != 0 {
		t.Fatalf("charlie's inbox on bravo shows others' asks: %+v", asks)
	}
	if out, err := b.r.PeerAnswer(b.ctx, tokA, ownID, InboxAnswer{Answer: "yes"}, "alpha"); r3Status(err) != http.StatusNotFound {
		t.Fatalf("alpha answers bravo's own agent's ask: %d %+v %v", r3Status(err), out, err)
	}
	if out, err := b.r.PeerAnswer(b.ctx, tokC, askA, InboxAnswer{Answer: "yes"}, "charlie"); r3Status(err) != http.StatusNotFound {
		t.Fatalf("charlie answers alpha's ask: %d %+v %v", r3Status(err), out, err)
	}
	if out, err := b.r.PeerAnswer(b.ctx, tokA, askA, InboxAnswer{Answer: "fine"}, "alpha"); r3Status(err) != http.StatusOK {
		t.Fatalf("alpha answers its own ask: %d %+v %v", r3Status(err), out, err)
	}
}

// TestRulesPeerTokenReachesOnlyItsSubscriptions (R18.21): a peer token
// reaches only the subscriptions its own relay's conversations made here:
// another paired relay's token asking for one by its id (events,
// unsubscribe, list_subscriptions with watcher) is refused and gets
// nothing, nor the subscriptions this relay's own conversations hold.
func TestRulesPeerTokenReachesOnlyItsSubscriptions(t *testing.T) {
	b := newPeerNet(t).relay("bravo", peerEndOptions{})
	tokA, tokC := b.token(), b.token()
	watched := b.session(NewSession{Title: "watched"})
	w := b.session(NewSession{Title: "bravo's own watcher"})
	if env, _ := b.actInTurn(w, map[string]any{"action": "subscribe", "sessions": []string{watched}}, "allow"); env["ok"] != true {
		t.Fatalf("subscribe failed: %v", env)
	}
	envA := b.r3PeerCall(tokA, "alpha", "sa-conversation", "subscribe", map[string]any{"sessions": []string{watched}})
	if linkCode(envA) != "ok" {
		t.Fatalf("alpha subscribes: %v", envA)
	}
	subA, _ := envA["subscription"].(map[string]any)["id"].(string)
	if env := b.r3PeerCall(tokC, "charlie", "sc-conversation", "list_sessions", nil); linkCode(env) != "ok" {
		t.Fatalf("charlie binds: %v", env)
	}

	if evs, err := b.r.PeerEventsFor(b.ctx, tokC, subA, "", 0); r3Status(err) != http.StatusNotFound || evs != nil {
		t.Fatalf("charlie reads alpha's subscription: %d %+v %v", r3Status(err), evs, err)
	}
	if env := b.r3PeerCall(tokC, "charlie", "sc-conversation", "unsubscribe", map[string]any{"subscription_id": subA}); linkCode(env) != "REMOTE_RELAY_NOT_FOUND" {
		t.Fatalf("charlie ends alpha's subscription: %v", env)
	}
	for _, watcher := range []string{"sa-conversation", w, "peer:alpha:sa-conversation"} {
		env := b.r3PeerCall(tokC, "charlie", "sc-conversation", "list_subscriptions", map[string]any{"watcher": watcher})
		if list, _ := env["subscriptions"].([]any); len(list) != 0 {
			t.Fatalf("charlie lists the subscriptions of %s: %v", watcher, env)
		}
	}
	env := b.r3PeerCall(tokA, "alpha", "sa-conversation", "list_subscriptions", nil)
	if list, _ := env["subscriptions"].([]any); len(list) != 1 || list[0].(map[string]any)["id"] != subA || list[0].(map[string]any)["endReason"] != nil {
		t.Fatalf("alpha's own list (its subscription still active): %v", env)
	}
	env = b.r3PeerCall(tokA, "alpha", "sa-other", "list_subscriptions", map[string]any{"watcher": "sa-conversation"})
	if list, _ := env["subscriptions"].([]any); len(list) != 1 || list[0].(map[string]any)["id"] != subA {
		t.Fatalf("alpha lists another of its own conversations: %v", env)
	}
	if _, err := b.r.PeerEventsFor(b.ctx, tokA, subA, "", 0); r3Status(err) != http.StatusOK {
		t.Fatalf("alpha reads its own subscription: %d %v", r3Status(err), err)
	}
}
