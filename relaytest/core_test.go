package relaytest

import (
	"testing"
	"time"
)

// R7.7, R11.1: a send from an agent's turn reaches another session and returns its reply.
func TestSendReply(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	a := r.NewSession(map[string]any{"title": "orchestrator"})
	b := r.NewSession(map[string]any{"title": "worker"})
	m := r.Connect(a.Token, nil)
	env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "hello", "wait_seconds": 10})
	if env["status"] != "done" {
		t.Fatalf("status %v", env)
	}
	reply := env["reply"].(map[string]any)
	if reply["text"] != "echo: hello" {
		t.Fatalf("reply %v", reply)
	}
	if env["summary"] != "send → desk session "+b.ID[:8]+": done, reply 11 chars" {
		t.Fatalf("summary %q", env["summary"])
	}
	if env["relay"] != "desk" || env["message_id"] == "" || env["session"] != b.ID {
		t.Fatalf("envelope %v", env)
	}
	// The prompt carries its origin (R4.8).
	got := r.Get(b.ID)
	msgs := got["messages"].([]any)
	first := msgs[0].(map[string]any)
	from := first["from"].(map[string]any)
	if first["role"] != "agent" || from["session"] != a.ID || from["title"] != "orchestrator" {
		t.Fatalf("prompt message %v", first)
	}
	_ = time.Second
}
