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
