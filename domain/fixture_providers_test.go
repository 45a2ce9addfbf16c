package domain

// Fixture helpers of the rule suites moved down from relaytest in issue 24
// step 3 (caps, models, updates, prompts, delivery, tasks): a fixture with
// the providers of a config besides the built-in scripted one (their caps
// and Claude traits as app builds them) and a cap on the longest wait, and
// a few look-ups the relaytest versions made through the owner API.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// r2Options is what newR2Fixture adds to fixtureOptions.
type r2Options struct {
	providers  []config.Provider // after the built-in scripted provider, as a config lists them
	maxWaitCap time.Duration     // Options.MaxWaitCap (0: none)
}

// newR2Fixture is newFixture with ro's providers and wait cap. The
// providers are built as app builds them (scripted, exec and the agent CLIs
// here); a provider's monthly cap and session traits go to the relay's
// Options as app puts them.
func newR2Fixture(t testing.TB, fo fixtureOptions, ro r2Options) *fixture {
	t.Helper()
	caps, traits := map[string]Cap{}, map[string]SessionTraits{}
	for _, p := range ro.providers {
		if p.MonthlyCap > 0 {
			caps[p.ID] = Cap{Amount: p.MonthlyCap, Unit: p.CapUnit}
		}
		traits[p.ID] = SessionTraits{Claude: p.ClaudeSessions(), CompactWindowZero: p.CompactWindowZero, AlwaysThinks: p.AlwaysThinks}
	}
	fo.caps, fo.traits, fo.maxWaitCap = caps, traits, ro.maxWaitCap
	fo.extra = func(cfg *config.Config) ([]provider.Provider, error) {
		var provs []provider.Provider
		for _, p := range ro.providers {
			switch p.Type {
			case config.TypeScripted:
				provs = append(provs, provider.NewScripted(provider.Info{ID: p.ID, Name: p.Name, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo}))
			case config.TypeExec:
				provs = append(provs, provider.NewExec(provider.ExecConfig{ID: p.ID, Name: p.Name, Command: p.Command, Models: p.Models,
					DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Env: p.Env}))
			case config.TypeClaudeCode, config.TypeCodex, config.TypeGeminiCLI:
				cli, err := provider.NewCLI(provider.CLIConfig{ID: p.ID, Name: p.Name, Type: p.Type, Command: p.Command, Args: p.Args,
					Env: p.Env, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo,
					Silence: cfg.Timing.AgentSilence})
				if err != nil {
					return provs, fmt.Errorf("provider %s: %w", p.ID, err)
				}
				provs = append(provs, cli)
			default:
				return provs, fmt.Errorf("provider %s: type %s is not built by the fixture", p.ID, p.Type)
			}
		}
		return provs, nil
	}
	return newFixture(t, fo)
}

// r2Scripted is a config's scripted provider with id, name and models
// (the first model the default).
func r2Scripted(id, name string, models ...string) config.Provider {
	p := config.ScriptedProvider()
	p.ID, p.Name = id, name
	if len(models) > 0 {
		p.Models, p.DefaultModel = models, models[0]
	}
	return p
}

// r2Usage is caller's usage entry of provider id.
func (f *fixture) r2Usage(caller, id string) map[string]any {
	f.t.Helper()
	env := f.ok(caller, map[string]any{"action": "usage", "relay": "this"})
	ps, _ := env["providers"].([]any)
	for _, p := range ps {
		if pv, _ := p.(map[string]any); pv["id"] == id {
			return pv
		}
	}
	f.t.Fatalf("usage has no provider %s: %v", id, env)
	return nil
}

// r2Total is list_sessions' total of scope "all" as caller.
func (f *fixture) r2Total(caller string) any {
	f.t.Helper()
	return f.ok(caller, map[string]any{"action": "list_sessions", "relay": "this", "scope": "all", "limit": 200})["total"]
}

// r2Turn is a turn's record.
func (f *fixture) r2Turn(id string) *store.Turn {
	f.t.Helper()
	tr, err := f.r.Turn(f.ctx, id)
	if err != nil {
		f.t.Fatalf("turn %s: %v", id, err)
	}
	return tr
}

// r2Texts is the texts of a session's messages of role, oldest first.
func (f *fixture) r2Texts(sid, role string) []string {
	f.t.Helper()
	var out []string
	for _, m := range f.history(sid, role) {
		out = append(out, m.Text)
	}
	return out
}

// r2Advance moves the clock on by d for actAuto's worker: the jobs that
// became due run as if one had been added (its loop looks at the clock when
// a job comes).
func (f *fixture) r2Advance(d time.Duration) {
	f.clk.Advance(d)
	select {
	case f.enq.added <- struct{}{}:
	default:
	}
}

// r2Message waits (actAuto running the jobs) for a message of sid of role
// containing frag and returns it.
func (f *fixture) r2Message(sid, role, frag string) store.Message {
	f.t.Helper()
	var got store.Message
	f.actUntil("a "+role+" message in "+sid+" containing "+frag, func() bool {
		for _, m := range f.history(sid, role) {
			if strings.Contains(m.Text, frag) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}
