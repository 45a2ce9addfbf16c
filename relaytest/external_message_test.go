package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// R24.7: the owner's message to an external session is kept in its
// conversation as the owner's message and does what any owner message does
// (R4.4 unlock by mention, R5.2.6 loop protection reset); no turn runs, and
// the answer says delivered: false with a note pointing at read_session.
func TestExternalSessionOwnerMessageR24_7(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	ext := r.NewSession(map[string]any{"provider": "external", "title": "my terminal claude"})
	m := r.Connect(ext.Token, nil)
	// A paired relay that does not answer: locked in the conversation until
	// the owner mentions it (then OFFLINE, not LOCKED).
	if st := r.Owner(http.MethodPost, "/api/v1/relays", map[string]any{"name": "boxr", "url": "http://127.0.0.1:1", "token": "x", "permission": "full"}, nil); st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("pair: %d", st)
	}
	m.MustFail(map[string]any{"action": "list_sessions", "relay": "boxr"}, "REMOTE_RELAY_LOCKED")
	st := r.App.Store()
	if _, _, err := st.TakeLoop(context.Background(), ext.ID, 30); err != nil {
		t.Fatal(err)
	}

	var body map[string]any
	if code := r.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/messages", map[string]any{"text": "please look at boxr next"}, &body); code != http.StatusAccepted {
		t.Fatalf("owner message: %d %v", code, body)
	}
	if body["delivered"] != false || body["status"] != "kept" || !strings.Contains(fmt.Sprint(body["note"]), "read_session") || body["message_id"] == "" {
		t.Fatalf("answer: %v", body)
	}
	users := r.Messages(ext.ID, "user")
	if len(users) != 1 || users[0]["text"] != "please look at boxr next" {
		t.Fatalf("the owner's message is not kept as the owner's: %v", r.Messages(ext.ID, ""))
	}
	if n := len(r.Messages(ext.ID, "assistant")); n != 0 {
		t.Fatalf("a turn ran in an external session: %d replies", n)
	}
	if n, err := st.LoopCount(context.Background(), ext.ID); err != nil || n != 0 {
		t.Fatalf("loop protection not reset: %d %v", n, err)
	}
	// The mention unlocked the paired relay (it does not answer: OFFLINE).
	m.MustFail(map[string]any{"action": "list_sessions", "relay": "boxr"}, "REMOTE_RELAY_OFFLINE")
	// The session's own client reads it with read_session.
	env := m.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": ext.ID})
	if !strings.Contains(fmt.Sprint(env["messages"]), "please look at boxr next") {
		t.Fatalf("read_session does not show the owner's message: %v", env)
	}
}

// R24.5: README's "Try it" gives an MCP client an external session's token,
// so every action works from the first try (a card waits for the owner); a
// call from a session whose agent has no running turn says to use an
// external session.
func TestTryItExternalSessionR24_5(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, try, _ := strings.Cut(string(readme), "Try it:")
	mt := regexp.MustCompile(`/api/v1/sessions -d '([^']+)'`).FindStringSubmatch(try)
	if mt == nil {
		t.Fatal("README's Try it creates no session")
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(mt[1]), &fields); err != nil {
		t.Fatalf("README's Try it body %q: %v", mt[1], err)
	}
	r := Start(t, Options{})
	s := r.NewSession(fields)
	m := r.Connect(s.Token, nil)
	done := make(chan map[string]any, 1)
	go func() {
		env, _ := callNoFail(m, map[string]any{"action": "create_session", "relay": "this", "text": "first try", "wait_seconds": 10})
		done <- env
	}()
	card := r.WaitCard(s.ID)
	r.Decide(card["id"].(string), "allow")
	if env := <-done; env["ok"] != true {
		t.Fatalf("create_session from README's Try it session: %v", env)
	}

	// A session the relay runs turns for, called from outside its turn.
	plain := r.NewSession(map[string]any{"title": "orchestrator"})
	env := r.Connect(plain.Token, nil).MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "hi"}, "REMOTE_RELAY_NO_ACTIVE_TURN")
	if msg := fmt.Sprint(env["error"]); !strings.Contains(msg, "use an external session") || !strings.Contains(msg, `"provider": "external"`) {
		t.Fatalf("NO_ACTIVE_TURN error does not point to an external session: %s", msg)
	}
}
