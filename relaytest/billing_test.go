package relaytest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oar/relay/config"
)

// billingProviders are copilot (dotted ids) and claude / claude-api, billing
// partners that both list claude-opus-5-5 (R24.6).
func billingProviders(c *config.Config) {
	scripted := func(id, billing, switchTo string, models ...string) config.Provider {
		return config.Provider{ID: id, Name: id, Type: config.TypeScripted, Models: models, DefaultModel: models[0],
			Billing: billing, SwitchTo: switchTo}
	}
	c.Providers = append(c.Providers,
		scripted("copilot", "", "", "claude-opus-5.5"),
		scripted("claude", config.BillingSubscription, "claude-api", "claude-opus-5-5"),
		scripted("claude-api", config.BillingAPIKey, "", "claude-opus-5-5"))
}

// R24.6: a billing partner is not a second owner of a model id
// (CLAUDE_PROVIDER_REQUIRED where claude and claude-api both list it); the
// card of a send with provider says "Switches billing to API key" /
// "Switches billing to subscription"; relay_info's recentCwds holds the
// owner's sessions' folders too.
func TestBillingWordsR24_6(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: billingProviders})
	ext := r.NewSession(map[string]any{"provider": "external", "title": "lead"})
	m := r.Connect(ext.Token, nil)

	env := m.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "provider": "copilot", "model": "claude-opus-5-5"}, "REMOTE_RELAY_UNKNOWN_MODEL")
	if env["remoteCode"] != "CLAUDE_PROVIDER_REQUIRED" || !strings.Contains(fmt.Sprint(env["error"]), `pass provider "claude"`) {
		t.Fatalf("create_session with Claude's spelling on copilot: %v", env)
	}

	// The owner's session in a folder of its own: relay_info lists it.
	dir := filepath.Join(r.Config.Folders[0], "owner-project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sub := r.NewSession(map[string]any{"provider": "claude", "title": "on subscription", "cwd": dir})
	api := r.NewSession(map[string]any{"provider": "claude-api", "title": "on api key"})
	info := m.MustOK(map[string]any{"action": "relay_info", "relay": "this"})
	if !strings.Contains(fmt.Sprint(info["recentCwds"]), dir) {
		t.Fatalf("recentCwds without the owner's session's folder %s: %v", dir, info["recentCwds"])
	}

	// In ask mode every send asks a card; it names the billing switched to.
	if st := r.Owner(http.MethodPatch, "/api/v1/sessions/"+ext.ID, map[string]any{"mode": "ask"}, nil); st != http.StatusOK {
		t.Fatalf("patch mode: %d", st)
	}
	for _, c := range []struct{ session, provider, want string }{
		{sub.ID, "claude-api", "Switches billing to API key"},
		{api.ID, "claude", "Switches billing to subscription"},
	} {
		done := make(chan map[string]any, 1)
		go func() {
			env, _ := callNoFail(m, map[string]any{"action": "send", "relay": "this", "session": c.session, "text": "x", "provider": c.provider, "wait_seconds": 0})
			done <- env
		}()
		card := r.WaitCard(ext.ID)
		r.Decide(card["id"].(string), "deny")
		<-done
		if !strings.Contains(fmt.Sprint(card["lines"]), c.want) {
			t.Errorf("card of a send with provider %s: %v, want %q", c.provider, card["lines"], c.want)
		}
	}
}
