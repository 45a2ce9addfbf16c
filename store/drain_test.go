package store

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// SetDrainID writes the flag and the index together (keeping a TTL the flag
// had); DrainFlags reads both and drops index entries whose flag is gone.
func TestDrainFlags(t *testing.T) {
	e := newEnv(t)
	if got, err := e.s.DrainFlags(e.ctx); err != nil || len(got) != 0 {
		t.Fatalf("DrainFlags on nothing = %v, %v", got, err)
	}
	e.push(newTurn("a", "user", "x", base), "", 4, false, "da")
	if err := e.s.SetDrainID(e.ctx, "b", "db"); err != nil {
		t.Fatal(err)
	}
	if e.get(e.key("drain", "b")) != "db" || !e.isMember(e.key("drains"), "b") {
		t.Fatal("SetDrainID did not write the flag and the index")
	}
	// A new id for a flag already set replaces it, in the index once.
	if err := e.s.SetDrainID(e.ctx, "a", "da2"); err != nil {
		t.Fatal(err)
	}
	// A stale entry: indexed, flag gone.
	if err := e.rdb.SAdd(e.ctx, e.key("drains"), "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.DrainFlags(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "da2", "b": "db"}; !maps.Equal(got, want) {
		t.Errorf("DrainFlags = %v, want %v", got, want)
	}
	if e.isMember(e.key("drains"), "ghost") {
		t.Error("the stale entry was not dropped from the index")
	}
	if n := e.scard(e.key("drains")); n != 2 {
		t.Errorf("drains has %d members, want 2", n)
	}

	// SetDrainID keeps a TTL the flag had (SET KEEPTTL).
	if err := e.rdb.Set(e.ctx, e.key("drain", "c"), "old", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SetDrainID(e.ctx, "c", "dc"); err != nil {
		t.Fatal(err)
	}
	if d := e.pttl(e.key("drain", "c")); d <= 0 || d > time.Hour {
		t.Errorf("PTTL after SetDrainID = %v, want the hour kept", d)
	}
}

// The drop of a stale entry is conditional: an entry whose flag is set again
// meanwhile stays (the script DrainFlags runs for each gone flag).
func TestDropDrainKeepsAFlagSetAgain(t *testing.T) {
	e := newEnv(t)
	if err := e.s.SetDrainID(e.ctx, "a", "d1"); err != nil {
		t.Fatal(err)
	}
	if err := dropDrainScript.Run(e.ctx, e.rdb, []string{e.key("drains"), e.key("drain", "a")}, "a").Err(); err != nil {
		t.Fatal(err)
	}
	if !e.isMember(e.key("drains"), "a") {
		t.Error("an entry whose flag is set was dropped")
	}
	e.rdb.Del(e.ctx, e.key("drain", "a"))
	if err := dropDrainScript.Run(e.ctx, e.rdb, []string{e.key("drains"), e.key("drain", "a")}, "a").Err(); err != nil {
		t.Fatal(err)
	}
	if e.isMember(e.key("drains"), "a") {
		t.Error("an entry whose flag is gone was kept")
	}
}

// IndexDrainFlags indexes flags written without the index (older relays),
// only of its own prefix, and never the index key itself.
func TestIndexDrainFlags(t *testing.T) {
	e := newEnv(t)
	for _, sid := range []string{"x", "y", "z"} {
		if err := e.rdb.Set(e.ctx, e.key("drain", sid), "d-"+sid, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.SetDrainID(e.ctx, "w", "d-w"); err != nil { // already indexed
		t.Fatal(err)
	}
	// Another store whose prefix starts with ours: its flags are not ours.
	other := New(e.rdb, e.prefix+":other")
	if err := other.SetDrainID(e.ctx, "q", "d-q"); err != nil {
		t.Fatal(err)
	}
	n, err := e.s.IndexDrainFlags(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("IndexDrainFlags = %d, want 4 (every flag found)", n)
	}
	members, _ := e.rdb.SMembers(e.ctx, e.key("drains")).Result()
	slices.Sort(members)
	if want := []string{"w", "x", "y", "z"}; !slices.Equal(members, want) {
		t.Errorf("drains = %v, want %v", members, want)
	}
	got, err := e.s.DrainFlags(e.ctx)
	if err != nil || len(got) != 4 || got["x"] != "d-x" {
		t.Errorf("DrainFlags after indexing = %v, %v", got, err)
	}
}

// A lease is taken by one owner; only that owner renews or releases it; it
// expires with its TTL.
func TestLease(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	lk := e.key("lease", sid)
	if ok, err := e.s.AcquireLease(e.ctx, sid, "a", 30*time.Second); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if ok, _ := e.s.AcquireLease(e.ctx, sid, "b", 30*time.Second); ok {
		t.Fatal("a second owner acquired a held lease")
	}
	if h, _ := e.s.LeaseHolder(e.ctx, sid); h != "a" {
		t.Errorf("LeaseHolder = %q, want a", h)
	}
	if d := e.pttl(lk); d <= 0 || d > 30*time.Second {
		t.Errorf("lease PTTL = %v, want at most 30s", d)
	}
	if ok, err := e.s.RenewLease(e.ctx, sid, "b", time.Minute); err != nil || ok {
		t.Errorf("RenewLease by another owner = %v, %v; want false", ok, err)
	}
	if d := e.pttl(lk); d > 30*time.Second {
		t.Errorf("another owner's renew extended the lease to %v", d)
	}
	if ok, err := e.s.RenewLease(e.ctx, sid, "a", time.Minute); err != nil || !ok {
		t.Errorf("RenewLease by the owner = %v, %v; want true", ok, err)
	}
	if d := e.pttl(lk); d <= 30*time.Second || d > time.Minute {
		t.Errorf("PTTL after the owner's renew = %v, want about a minute", d)
	}
	if err := e.s.ReleaseLease(e.ctx, sid, "b"); err != nil {
		t.Fatal(err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, sid); h != "a" {
		t.Errorf("another owner released the lease (holder %q)", h)
	}
	if err := e.s.ReleaseLease(e.ctx, sid, "a"); err != nil {
		t.Fatal(err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, sid); h != "" {
		t.Errorf("holder after release = %q", h)
	}
	if ok, _ := e.s.RenewLease(e.ctx, sid, "a", time.Minute); ok {
		t.Error("a released lease was renewed")
	}
	if ok, _ := e.s.AcquireLease(e.ctx, sid, "b", 30*time.Second); !ok {
		t.Error("the lease could not be taken after its release")
	}

	// Expiry: a dead owner's lease goes by itself, and it cannot renew it then.
	sid2 := "s" + NewID(4)
	if ok, _ := e.s.AcquireLease(e.ctx, sid2, "a", 200*time.Millisecond); !ok {
		t.Fatal("AcquireLease")
	}
	if !e.expire(400*time.Millisecond, func() bool { h, _ := e.s.LeaseHolder(e.ctx, sid2); return h == "" }) {
		h, _ := e.s.LeaseHolder(e.ctx, sid2)
		t.Errorf("holder after the TTL = %q", h)
	}
	if ok, _ := e.s.RenewLease(e.ctx, sid2, "a", time.Minute); ok {
		t.Error("an expired lease was renewed")
	}
	if ok, _ := e.s.AcquireLease(e.ctx, sid2, "b", time.Minute); !ok {
		t.Error("an expired lease could not be taken")
	}
}
