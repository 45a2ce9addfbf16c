package relaytest

import (
	"os"
	"strings"
	"testing"
)

// subscribeFromTurn subscribes the watcher from inside a running turn and allows the first-subscribe card.
func (r *Relay) subscribeFromTurn(watcher Session, args map[string]any) {
	r.tb.Helper()
	args["action"] = "subscribe"
	if env, _ := r.InTurn(watcher, args, "allow"); env["ok"] != true {
		r.tb.Fatalf("subscribe failed: %v", env)
	}
}

// normalize replaces the random ids in an event message with stable names for golden files.
func normalize(msg string, names map[string]string) string {
	for id, name := range names {
		msg = strings.ReplaceAll(msg, id, name)
	}
	return msg
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := "testdata/" + name + ".golden"
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s: %v (run with UPDATE_GOLDEN=1 to write it)", path, err)
	}
	if got != string(want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
