package relaytest

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R18.9: the log says what happens, at INFO, and never carries a token or prompt text.
func TestOperatorLogs(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	r := Start(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	s := r.NewSession(map[string]any{"title": "logged"})
	secret := "prompt-text-that-must-not-be-logged"
	if tr := waitEnded(r, r.Message(s.ID, secret), 20*time.Second); tr.Status != store.TurnDone {
		t.Fatalf("turn: %s", tr.Status)
	}
	tr := waitEnded(r, r.Message(s.ID, Script(map[string]any{"error": "boom in the agent"})), 20*time.Second)
	if tr.Status != store.TurnError {
		t.Fatalf("error turn: %s", tr.Status)
	}
	res, _ := r.InTurn(s, map[string]any{"action": "create_session", "text": "child " + secret}, "allow")
	if res["ok"] != true {
		t.Fatalf("create_session: %v", res)
	}
	Eventually(t, 10*time.Second, func() bool { return strings.Count(buf.String(), `msg="turn ended"`) >= 4 }, "turn end lines")
	logs := buf.String()
	id8 := s.ID[:8]
	for _, want := range []string{
		`msg="relay process started" role=serve`, "key_prefix=" + r.Redis.Prefix, "concurrency=",
		`msg="turn started" session=` + id8, `msg="turn ended" session=` + id8, "status=done", "duration=",
		`level=WARN msg="turn ended" session=` + id8, `cause="boom in the agent"`,
		`msg="card asked"`, "action=create_session", `msg="card decided"`, "decision=allow",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	for _, secretish := range []string{secret, s.Token, OwnerToken} {
		if strings.Contains(logs, secretish) {
			t.Errorf("the log contains %q", secretish)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}

// Two relays with different names on one Redis and prefix are warned about at start.
func TestNameConflictWarning(t *testing.T) {
	NeedsSharedRedis(t, "relays of different names on one Redis and prefix")
	t.Parallel()
	rd := NewRedis(t)
	Start(t, Options{Redis: rd})
	var buf syncBuffer
	Start(t, Options{Redis: rd, Logger: slog.New(slog.NewTextHandler(&buf, nil)), Config: func(c *config.Config) { c.Name = "other-name" }})
	if logs := buf.String(); !strings.Contains(logs, "calls itself a different relay") || !strings.Contains(logs, "other_relay=desk") {
		t.Fatalf("no warning about the other relay name:\n%s", logs)
	}
	var quiet syncBuffer
	Start(t, Options{Redis: rd, Logger: slog.New(slog.NewTextHandler(&quiet, nil)), Config: func(c *config.Config) { c.Name = "other-name" }})
	if strings.Count(quiet.String(), "calls itself a different relay") != 1 { // only the "desk" process differs
		t.Fatalf("want one warning (about desk):\n%s", quiet.String())
	}
}
