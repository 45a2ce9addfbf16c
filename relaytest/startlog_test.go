package relaytest

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R25.6: the start log names the console's URL.
func TestStartLogNamesConsole(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	r := Start(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	want := "console=" + r.URL + "/"
	Eventually(t, 10*time.Second, func() bool { return strings.Contains(buf.String(), `msg="relay serving"`) }, "the start line")
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, `msg="relay serving"`) {
			if !strings.Contains(line+" ", want+" ") {
				t.Fatalf("the start line does not name the console (%s):\n%s", want, line)
			}
			return
		}
	}
}

// R25.6: an exec agent always gets RELAY_MCP_URL, agent sessions off too
// (relay_tool may refuse it then, but the URL is there).
func TestExecAgentGetsMCPURLWithAgentSessionsOff(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{AgentSessionsOff: true, Config: func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "env", Name: "Env", Type: config.TypeExec, Command: []string{"/usr/bin/env"}})
	}})
	s := r.NewSession(map[string]any{"provider": "env", "title": "env"})
	tr := waitEnded(r, r.Message(s.ID, "x"), 20*time.Second)
	if tr.Status != store.TurnDone {
		t.Fatalf("env turn: %s %q", tr.Status, tr.Error)
	}
	for _, want := range []string{"RELAY_URL=" + r.URL + "\n", "RELAY_MCP_URL=" + r.URL + "/mcp\n"} {
		if !strings.Contains(tr.Reply+"\n", want) {
			t.Errorf("the agent's environment lacks %q:\n%s", strings.TrimSpace(want), tr.Reply)
		}
	}
}
