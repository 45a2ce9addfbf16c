package store

import (
	"testing"
	"time"
)

// setLinkScript: online/offline transitions are reported once, the last
// answer's time survives an outage, the reason goes with it.
func TestSetLink(t *testing.T) {
	e := newEnv(t)
	t0 := time.UnixMilli(1_800_000_000_000).UTC()
	steps := []struct {
		online      bool
		at          time.Time
		reason      string
		wantChanged bool
		wantSeen    time.Time
		wantReason  string
	}{
		{true, t0, "", true, t0, ""},                                                // first record
		{true, t0.Add(time.Second), "", false, t0.Add(time.Second), ""},             // still online
		{false, t0.Add(2 * time.Second), "down", true, t0.Add(time.Second), "down"}, // lost: seen kept
		{false, t0.Add(3 * time.Second), "still down", false, t0.Add(time.Second), "still down"},
		{true, t0.Add(4 * time.Second), "", true, t0.Add(4 * time.Second), ""}, // back
	}
	for i, st := range steps {
		changed, err := e.s.SetLink(e.ctx, "Build-Box", st.online, st.at, st.reason)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if changed != st.wantChanged {
			t.Errorf("step %d: changed %v, want %v", i, changed, st.wantChanged)
		}
		links, err := e.s.Links(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		l := links["build-box"]
		if l.Online != st.online || !l.LastSeenAt.Equal(st.wantSeen) || l.Reason != st.wantReason {
			t.Errorf("step %d: link %+v, want online %v seen %s reason %q", i, l, st.online, st.wantSeen, st.wantReason)
		}
	}
	if err := e.s.DropLink(e.ctx, "build-box"); err != nil {
		t.Fatal(err)
	}
	if links, _ := e.s.Links(e.ctx); len(links) != 0 {
		t.Errorf("after DropLink: %v", links)
	}
}

// Unlock: a mention overrides an agent's unlock, an agent's never downgrades a mention.
func TestUnlockByOwnerAndAgent(t *testing.T) {
	e := newEnv(t)
	if err := e.s.Unlock(e.ctx, "s1", false, "Bravo", "charlie"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Unlock(e.ctx, "s1", true, "charlie", "delta"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Unlock(e.ctx, "s1", false, "delta"); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.Unlocked(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"bravo": false, "charlie": true, "delta": true}
	if len(got) != len(want) {
		t.Fatalf("unlocked %v, want %v", got, want)
	}
	for k, v := range want {
		if byOwner, ok := got[k]; !ok || byOwner != v {
			t.Errorf("%s: %v (present %v), want by owner %v", k, byOwner, ok, v)
		}
	}
	if un, _, _ := e.s.UnlockState(e.ctx, "s1"); un["bravo"] == "" {
		t.Error("bravo should be unlocked")
	}
	if un, _, _ := e.s.UnlockState(e.ctx, "s2"); un["bravo"] != "" {
		t.Error("another conversation stays locked")
	}
	// With the pairings, in one round trip: the same answers.
	if err := e.s.AddPairing(e.ctx, &Pairing{Name: "charlie", URL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	un, ps, err := e.s.UnlockState(e.ctx, "s1")
	if err != nil || len(un) != len(want) || un["charlie"] != "owner" || un["bravo"] != "agent" || len(ps) != 1 || ps[0].Name != "charlie" {
		t.Fatalf("UnlockState: %v %v %v", un, ps, err)
	}
}
