package relaytest

import (
	"strings"
	"testing"

	"github.com/oar/relay/config"
)

// R7.10 (issue 13): update_session's note names every setting given that does
// nothing for the session's provider — for every provider, not only scripted.
func TestUpdateSessionNotesIgnoredSettings(t *testing.T) {
	r := Start(t, Options{Config: func(c *config.Config) {
		c.Providers = append(c.Providers,
			config.Provider{ID: "fx", Name: "Effort exec", Type: config.TypeExec, Command: []string{"/bin/echo", "{effort}"},
				Models: []string{"m1"}, Efforts: []string{"low", "high"}},
			config.Provider{ID: "plain", Name: "Plain exec", Type: config.TypeExec, Command: []string{"/bin/echo"},
				Models: []string{"m1"}, Efforts: []string{"low", "high"}})
	}})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	first, _ := r.InTurn(a, map[string]any{"action": "create_session", "relay": "this", "text": "hi", "wait_seconds": 15}, "allow")
	mustEnvOK(t, first)
	sessions := map[string]string{"scripted": str(first["session"])}
	for _, p := range []string{"fx", "plain"} {
		env := m.MustOK(map[string]any{"action": "create_session", "relay": "this", "text": "hi", "provider": p, "wait_seconds": 15})
		sessions[p] = str(env["session"])
	}
	upd := func(prov string, extra map[string]any) map[string]any {
		args := map[string]any{"action": "update_session", "relay": "this", "session": sessions[prov]}
		for k, v := range extra {
			args[k] = v
		}
		return m.MustOK(args)
	}
	all := map[string]any{"effort": "high", "thinking_enabled": "on", "thinking_display": "summarized", "auto_compact_window": 200000}

	env := upd("scripted", all)
	wantEq(t, "scripted note", env["note"], "effort does nothing for the Scripted provider (scripted); stored for later turns. "+
		"thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions (Claude API sessions included) and change nothing for the Scripted provider (scripted); stored for later turns.")
	env = upd("fx", all)
	wantHas(t, "exec with {effort} note", env["note"], "thinking_enabled, thinking_display, auto_compact_window apply only to Claude sessions (Claude API sessions included) and change nothing for the Effort exec provider (exec)")
	if strings.Contains(str(env["note"]), "effort does") {
		t.Errorf("effort reaches fx's command, yet the note names it: %v", env["note"])
	}
	env = upd("plain", map[string]any{"effort": "low"})
	wantEq(t, "exec without {effort} note", env["note"], "effort does nothing for the Plain exec provider (exec); stored for later turns.")
	env = upd("fx", map[string]any{"effort": "low"})
	if n, has := env["note"]; has {
		t.Errorf("a setting the provider uses got a note: %v", n)
	}
	// The rounded auto_compact_window note, in full (issue 13, untested before).
	env = upd("fx", map[string]any{"auto_compact_window": 120000})
	wantEq(t, "rounded window note", env["note"], "auto_compact_window 120000 was rounded to 100000, the nearest allowed value. "+
		"auto_compact_window applies only to Claude sessions (Claude API sessions included) and changes nothing for the Effort exec provider (exec); stored for later turns.")
	wantEq(t, "window", obj(t, env["settings"], "settings")["auto_compact_window"], float64(100000))
}
