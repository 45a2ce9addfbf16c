package relaytest

import (
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// pairRelays pairs `from` with `to` through the owner API (POST /peer-tokens
// on to, POST /relays on from) and returns the pairing record.
func pairRelays(t *testing.T, from, to *Relay, body map[string]any) map[string]any {
	t.Helper()
	var tok map[string]any
	if st := to.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != 201 {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	if body == nil {
		body = map[string]any{}
	}
	body["url"], body["token"] = to.URL, tok["token"]
	var p map[string]any
	if st := from.Owner("POST", "/api/v1/relays", body, &p); st != 201 {
		t.Fatalf("pair: %d %v", st, p)
	}
	return p
}

func TestPeerSmoke(t *testing.T) {
	a := Start(t, Options{Config: func(c *config.Config) { c.Name = "alpha" }})
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	p := pairRelays(t, a, b, nil)
	if p["name"] != "bravo" || p["online"] != true || p["permission"] != "full" {
		t.Fatalf("pairing: %v", p)
	}
	sa := a.NewSession(map[string]any{"title": "caller"})
	sb := b.NewSession(map[string]any{"title": "target"})
	// Locked: named by host (an IP: the script text does not unlock it).
	res, _ := a.InTurn(sa, map[string]any{"action": "list_sessions", "relay": "127.0.0.1"}, "")
	if res["code"] != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("locked: %v", res)
	}
	// The owner mentions it: unlocked; send and wait for the reply.
	a.Message(sa.ID, "please work with @bravo")
	res, card := a.InTurn(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "hello there", "wait_seconds": 20}, "")
	_ = card
	if res["ok"] != true {
		t.Fatalf("send: %v", res)
	}
	t.Logf("send: %v", res)
	if rp, _ := res["reply"].(map[string]any); rp == nil || !strings.Contains(rp["text"].(string), "hello there") {
		t.Fatalf("reply: %v", res)
	}
	msgs := b.Messages(sb.ID, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0]["text"].(string), `[Remote prompt from an agent on relay "alpha" · session "caller"`) {
		t.Fatalf("remote prompt line: %v", msgs)
	}
	var rel map[string]any
	a.Owner("GET", "/api/v1/relays", nil, &rel)
	t.Logf("relays: %v", rel)
	_ = time.Second
}

// TestPeerTransferAndEvents: a subscription on a paired relay delivers its
// events here with the relay's name (R8.14, R8.20), and transfer_subscriptions
// moves it to another conversation here, which then gets the events (R8.24).
func TestPeerTransferAndEvents(t *testing.T) {
	fast := func(name string) func(*config.Config) {
		return func(c *config.Config) {
			c.Name = name
			c.Timing.PeerPoll = 300 * time.Millisecond
			c.Timing.Coalesce = 0
		}
	}
	a := Start(t, Options{Config: fast("alpha")})
	b := Start(t, Options{Config: fast("bravo")})
	pairRelays(t, a, b, nil)
	c1 := a.NewSession(map[string]any{"title": "first watcher"})
	c2 := a.NewSession(map[string]any{"title": "second watcher"})
	watched := b.NewSession(map[string]any{"title": "Nightly deploy"})
	a.Message(c1.ID, "watch @bravo")
	a.Message(c2.ID, "take over from the first watcher on @bravo")
	res, card := a.InTurn(c1, map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{watched.ID}, "events": []string{"turn_end"}}, "allow")
	if res["ok"] != true || card["relay"] != "bravo" {
		t.Fatalf("subscribe: %v, card %v", res, card)
	}
	b.WaitTurn(b.Message(watched.ID, "deployed one"), 20*time.Second, "done")
	Eventually(t, 15*time.Second, func() bool {
		for _, e := range a.EventTexts(c1.ID) {
			if strings.Contains(e, `[relay event] bravo · session "Nightly deploy"`) && strings.Contains(e, "echo: deployed one") {
				return true
			}
		}
		return false
	}, "the bravo event in the first watcher")
	res, card = a.InTurn(c2, map[string]any{"action": "transfer_subscriptions", "relay": "bravo", "from": c1.ID}, "allow")
	if res["ok"] != true || card == nil {
		t.Fatalf("transfer: %v, card %v", res, card)
	}
	b.WaitTurn(b.Message(watched.ID, "deployed two"), 20*time.Second, "done")
	Eventually(t, 30*time.Second, func() bool { // generous: a loaded CI run once took longer than 15 s
		for _, e := range a.EventTexts(c2.ID) {
			if strings.Contains(e, "echo: deployed two") {
				return true
			}
		}
		return false
	}, "the bravo event in the second watcher after the transfer")
	// No mirror left to deliver to the first watcher: the one there names
	// the second, and a later poll of it delivered a later event there too.
	subs, err := a.App.Store().RemoteSubscriptions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.Watcher == c1.ID && s.EndedAt.IsZero() {
			t.Fatalf("a mirror still delivers to the first watcher after the transfer: %+v", s)
		}
	}
	b.WaitTurn(b.Message(watched.ID, "deployed three"), 20*time.Second, "done")
	Eventually(t, 30*time.Second, func() bool { // generous: a loaded CI run once took longer than 15 s
		for _, e := range a.EventTexts(c2.ID) {
			if strings.Contains(e, "echo: deployed three") {
				return true
			}
		}
		return false
	}, "a later bravo event in the second watcher")
	for _, e := range a.EventTexts(c1.ID) {
		if strings.Contains(e, "deployed two") || strings.Contains(e, "deployed three") {
			t.Fatalf("the first watcher still got an event after the transfer: %q", e)
		}
	}
}
