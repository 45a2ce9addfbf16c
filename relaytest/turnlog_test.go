package relaytest

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R25.2: a turn still running logs one INFO line every timing.turn_log_every:
// the session (id8), the turn, the provider, elapsed and the seconds since
// the agent's last output; never the prompt. An exec agent that prints
// nothing and waits for a file the test writes once it saw two such lines.
func TestLongTurnLogsProgress(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	release := filepath.Join(t.TempDir(), "release")
	script := "while [ ! -e '" + release + "' ]; do sleep 0.1; done; echo finished"
	r := Start(t, Options{
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Config: func(c *config.Config) {
			c.Timing.TurnLogEvery = time.Second
			c.Providers = append(c.Providers, config.Provider{ID: "slow", Name: "Slow", Type: config.TypeExec, Command: []string{"/bin/sh", "-c", script}})
		},
	})
	s := r.NewSession(map[string]any{"provider": "slow", "title": "slow"})
	secret := "prompt-text-of-a-long-turn"
	mid := r.Message(s.ID, secret)
	line := regexp.MustCompile(`level=INFO msg="turn running" session=` + s.ID[:8] + ` turn=[0-9a-f]{8} provider=slow elapsed=\S+ since_output_s=\d+`)
	Eventually(t, 60*time.Second, func() bool { return len(line.FindAllString(buf.String(), -1)) >= 2 }, "two progress lines of the running turn")
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if tr := waitEnded(r, mid, 30*time.Second); tr.Status != store.TurnDone || strings.TrimSpace(tr.Reply) != "finished" {
		t.Fatalf("turn: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
	logs := buf.String()
	if strings.Contains(logs, secret) {
		t.Errorf("the log holds the prompt:\n%s", logs)
	}
	// None after the end.
	n := strings.Count(logs, `msg="turn running"`)
	end := strings.Index(logs, `msg="turn ended" session=`+s.ID[:8])
	if end < 0 || strings.Count(logs[:end], `msg="turn running"`) != n {
		t.Errorf("progress lines after the turn ended (or no end line):\n%s", logs)
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}
