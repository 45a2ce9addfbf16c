package relaytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// TestWebhookHangingDelaysNoTurn (R23.10): the config's webhook gets a
// relay's owner notifications as JSON (a card; a reply with its session,
// text and openUrl), and one that hangs delays no turn: while it holds the
// card's delivery, the owner decides the card, the agent's turn ends with
// the call's answer, and another session's turn ends with its reply.
func TestWebhookHangingDelaysNoTurn(t *testing.T) {
	entered, release := make(chan map[string]any, 16), make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		entered <- body
		select { // hangs until the test lets it go (or the relay's 5 s per try ends it)
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hook.Close()
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let()
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Notify.Webhooks = []config.Webhook{{URL: hook.URL + "/relay", Events: []string{"reply", "card"}, Format: config.WebhookJSON}}
	}})
	// An agent's card: its notification reaches the webhook, which holds it;
	// the owner decides and the agent's call and turn go on meanwhile.
	orch := r.NewSession(map[string]any{"title": "card asker"})
	mid := r.Message(orch.ID, Script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "hi", "title": "child"}}))
	card := r.WaitCard(orch.ID)
	if b := <-entered; b["event"] != "card" || !strings.Contains(b["text"].(string), "create_session") {
		t.Fatalf("the card's webhook body: %v", b)
	}
	r.Decide(card["id"].(string), "deny")
	// Less than the 4 tries of 5 s a held delivery may take: a turn that
	// waited for the webhook would not end within it.
	turn := r.WaitTurn(mid, 15*time.Second, "done", "error")
	if res := ToolResults(turn.Reply); turn.Status != "done" || len(res) != 1 || res[0]["code"] != "REMOTE_RELAY_PERMISSION" {
		t.Fatalf("the card's turn while the webhook hangs: %s %q", turn.Status, turn.Reply)
	}

	// A reply: its notification carries the session, the text and openUrl.
	s := r.NewSession(map[string]any{"title": "hooked"})
	if turn := r.WaitTurn(r.Message(s.ID, "first"), 15*time.Second, "done", "error"); turn.Status != "done" {
		t.Fatalf("a turn while the webhook hangs: %s %s", turn.Status, turn.Error)
	}
	// Now the webhook answers: the held deliveries go out, the reply's among them.
	let()
	var reply map[string]any
	for reply == nil { // the card's own turn's reply (and a retry of the card) may come first
		if b := <-entered; b["event"] == "reply" && b["session"].(map[string]any)["id"] == s.ID {
			reply = b
		}
	}
	sess, _ := reply["session"].(map[string]any)
	if reply["relay"] != "desk" || sess["title"] != "hooked" || reply["text"] != "echo: first" ||
		!strings.HasSuffix(reply["openUrl"].(string), "/s/"+s.ID) || reply["at"] == "" {
		t.Fatalf("the reply's webhook body: %v", reply)
	}
}
