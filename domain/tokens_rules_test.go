package domain

import (
	"encoding/json"
	"testing"
	"time"
)

// TestRulesArchiveRevokesTokenEverywhere (R18.2), moved down from
// relaytest/hardening_test.go (issue 24 step 3): archiving a session
// revokes its token at once in every process — here two Relays on one
// store, each with its own token cache; a token is checked as the api
// checks a bearer token (SessionForToken: refused is the api's 401).
func TestRulesArchiveRevokesTokenEverywhere(t *testing.T) {
	f := newFixture(t, fixtureOptions{settings: agentSessionsOn})
	r2 := f.r3Process(fixtureOptions{settings: agentSessionsOn}) // a second process of the same relay
	procs := []*Relay{f.r, r2}
	newSession := func(r *Relay, title string) (id, tok string) {
		t.Helper()
		d, err := r.OwnerCreateSession(f.ctx, NewSession{Title: title})
		if err != nil {
			t.Fatalf("create %s: %v", title, err)
		}
		return d.ID, d.Token
	}
	knows := func(r *Relay, sid, tok string) {
		t.Helper()
		if got, ok, err := r.SessionForToken(f.ctx, tok); err != nil || !ok || got != sid {
			t.Fatalf("token of %s on %s: %q %v %v", sid, r.WorkerID(), got, ok, err)
		}
	}
	refused := func(r *Relay, tok, what string) {
		t.Helper()
		r3Eventually(t, 2*time.Second, what+" on "+r.WorkerID(), func() bool {
			_, ok, err := r.SessionForToken(f.ctx, tok)
			return err == nil && !ok
		})
	}
	a, aTok := newSession(f.r, "to be archived")
	b, bTok := newSession(f.r, "bystander")
	// Both processes know (and cache) the token.
	for _, r := range procs {
		knows(r, a, aTok)
	}

	if _, err := f.r.OwnerArchive(f.ctx, a); err != nil {
		t.Fatalf("archive: %v", err)
	}
	for _, r := range procs {
		refused(r, aTok, "an archived session's token still works")
	}
	knows(r2, b, bTok) // a live session's token
	// An agent's archive revokes too.
	c, cTok := newSession(r2, "archived by an agent")
	knows(f.r, c, cTok)
	raw, err := json.Marshal(map[string]any{"action": "archive", "relay": "this", "session": c})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := r2.CallTool(f.ctx, b, raw, nil)
	var env map[string]any
	if err := json.Unmarshal(out, &env); err != nil || env["ok"] != true {
		t.Fatalf("archive by an agent: %s %v", out, err)
	}
	refused(f.r, cTok, "the token of a session an agent archived still works")
}
