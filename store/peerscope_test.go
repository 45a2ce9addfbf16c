package store

import (
	"testing"
	"time"
)

// TestPeerTokenScopeKept (R18.35): a peer token's scope is kept with it and
// listed; a token stored before scopes existed (its JSON has no scope) is
// "all", as is one of an unknown scope.
func TestPeerTokenScopeKept(t *testing.T) {
	e := newEnv(t)
	at := time.UnixMilli(1_700_000_000_000).UTC()
	if err := e.s.AddPeerToken(e.ctx, "rpt_started", PeerToken{CreatedAt: at, Scope: PeerScopeStarted}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.AddPeerToken(e.ctx, "rpt_default", PeerToken{CreatedAt: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	// As an older relay wrote it.
	if err := e.rdb.HSet(e.ctx, e.key("peertok"), TokenHash("rpt_old"), `{"createdAt":"2023-11-14T22:13:22Z","label":"old"}`).Err(); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"rpt_started": "started", "rpt_default": "all", "rpt_old": "all", "rpt_none": ""} {
		if got, err := e.s.PeerTokenScope(e.ctx, tok); err != nil || got != want {
			t.Errorf("scope of %s: %q %v, want %q", tok, got, err, want)
		}
	}
	list, err := e.s.PeerTokens(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, x := range list {
		got[x.ID] = x.Scope
	}
	want := map[string]string{PeerTokenID("rpt_started"): "started", PeerTokenID("rpt_default"): "all", PeerTokenID("rpt_old"): "all"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("listed scope of %s: %q, want %q (%v)", id, got[id], w, got)
		}
	}
	if err := e.s.AddPeerPrompted(e.ctx, "Alpha", "s1"); err != nil {
		t.Fatal(err)
	}
	if ids, err := e.s.PeerPrompted(e.ctx, "alpha"); err != nil || len(ids) != 1 || ids[0] != "s1" {
		t.Errorf("sessions alpha prompted: %v %v", ids, err)
	}
}
