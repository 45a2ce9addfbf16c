package store

import (
	"testing"
	"time"
)

// UpgradeKeyTags moves PREFIX:NAME:… to {PREFIX}:NAME:… once (values and
// TTLs kept, a key already in the new format wins), leaves the keys of a
// prefix that starts with this one's and ":" alone, fills the queued event
// turns, and sets the marker (R21.2, issue 23 item 3).
func TestUpgradeKeyTags(t *testing.T) {
	e := newEnv(t)
	old := e.prefix + ":"
	t.Cleanup(func() {
		for _, k := range []string{old + "other:sess:x", old + "sess:keep"} {
			e.rdb.Del(e.ctx, k)
		}
	})
	e.rdb.HSet(e.ctx, old+"settings", "maxWaitSeconds", "600")
	e.rdb.HSet(e.ctx, old+"sess:s1", "id", "s1", "title", "old")
	e.rdb.Set(e.ctx, old+"lease:s1", "w1", time.Hour)
	e.rdb.RPush(e.ctx, old+"q:s1", "t1", "t2")
	e.rdb.HSet(e.ctx, old+"turn:t1", "id", "t1", "role", "event")
	e.rdb.HSet(e.ctx, old+"turn:t2", "id", "t2", "role", "agent")
	e.rdb.HSet(e.ctx, old+"other:sess:x", "id", "x") // prefix P:other's
	e.rdb.Set(e.ctx, old+"sess:keep", "old", 0)      // also in the new format: the new one wins
	e.rdb.Set(e.ctx, e.key("sess", "keep"), "new", 0)

	n, err := e.s.UpgradeKeyTags(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Errorf("moved %d keys, want 6", n)
	}
	if v := e.rdb.HGet(e.ctx, e.key("sess", "s1"), "title").Val(); v != "old" {
		t.Errorf("session title %q after the move", v)
	}
	if ttl := e.rdb.PTTL(e.ctx, e.key("lease", "s1")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("lease TTL %v after the move, want its hour", ttl)
	}
	if q := e.rdb.LRange(e.ctx, e.key("q", "s1"), 0, -1).Val(); len(q) != 2 || q[0] != "t1" {
		t.Errorf("queue %v after the move", q)
	}
	if ev := e.rdb.SMembers(e.ctx, e.key("qev", "s1")).Val(); len(ev) != 1 || ev[0] != "t1" {
		t.Errorf("queued event turns %v, want [t1]", ev)
	}
	if v := e.get(e.key("sess", "keep")); v != "new" {
		t.Errorf("a key present in both formats: %q, want the new one", v)
	}
	for _, k := range []string{old + "settings", old + "sess:s1", old + "lease:s1", old + "q:s1", old + "turn:t1", old + "sess:keep"} {
		if e.exists(k) {
			t.Errorf("%s left", k)
		}
	}
	if !e.exists(old + "other:sess:x") {
		t.Errorf("another prefix's key was moved")
	}
	if done, err := e.s.KeyFormatDone(e.ctx); err != nil || !done {
		t.Fatalf("marker: %v %v", done, err)
	}
	// Once: a key of the old format written later stays.
	e.rdb.Set(e.ctx, old+"sess:late", "x", time.Minute)
	t.Cleanup(func() { e.rdb.Del(e.ctx, old+"sess:late") })
	if n, err := e.s.UpgradeKeyTags(e.ctx); err != nil || n != 0 || !e.exists(old+"sess:late") {
		t.Errorf("second run: %d, %v", n, err)
	}
}

// A fresh dataset is marked without a scan.
func TestUpgradeKeyTagsFresh(t *testing.T) {
	e := newEnv(t)
	if n, err := e.s.UpgradeKeyTags(e.ctx); err != nil || n != 0 {
		t.Fatalf("fresh: %d, %v", n, err)
	}
	if done, _ := e.s.KeyFormatDone(e.ctx); !done {
		t.Fatal("no marker on a fresh dataset")
	}
}
