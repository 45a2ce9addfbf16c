package domain

import (
	"testing"
	"time"

	"github.com/oar/relay/config"
)

// R24.7, R9.6: the owner's message to an external session releases the
// schedule firings it held (its loop count used up) as any owner message
// does, though no turn runs in it.
func TestRulesExternalOwnerMessageReleasesHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn, limits: func(l *config.Limits) { l.AgentPromptsBeforeCard = 2 }})
	a := f.session(NewSession{Title: "my client", Provider: ProviderExternal})
	b := f.session(NewSession{Title: "target"})
	env := f.ok(a, map[string]any{"action": "schedule", "session": b, "text": "ping", "title": "Ping", "every_minutes": 1,
		"at": f.clk.Now().Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)})
	id, _ := env["schedule_id"].(string)
	until := func(what string, cond func(map[string]any) bool) {
		t.Helper()
		for i := 0; !cond(f.listedSchedules(a)[id]); i++ {
			if i > 300 {
				t.Fatalf("%s: not in 5 minutes: %v", what, f.listedSchedules(a)[id])
			}
			f.schJobs(time.Second, b)
		}
	}
	until("the second firing to be held", func(cur map[string]any) bool { return cur["heldForApproval"] == true })
	if n := len(f.history(b, "schedule")); n != 1 {
		t.Fatalf("%d firings before the hold, want 1", n)
	}
	f.prompt(a, "go on")
	until("the held firing to be released", func(cur map[string]any) bool { n, _ := cur["firedCount"].(float64); return n >= 2 })
	if n := len(f.history(b, "schedule")); n != 2 {
		t.Fatalf("%d firings after the owner wrote, want 2", n)
	}
}
