package store

import (
	"testing"
	"time"
)

// R8.19, R8.23: a paired relay's poller saves its cursor only while the
// mirror is live; an end written between its read and its write stays.
func TestSaveLiveSubscription(t *testing.T) {
	e := newEnv(t)
	sub := &Subscription{ID: "sub_live", Watcher: "w1", Relay: "bravo", Sessions: []string{"s1"}, CreatedAt: time.Now().UTC()}
	if err := e.s.SaveSubscription(e.ctx, sub); err != nil {
		t.Fatal(err)
	}
	stale := *sub // the poller's copy, read while live

	// Live: written, cursor and all.
	stale.Cursor = "5-0"
	if ok, err := e.s.SaveLiveSubscription(e.ctx, &stale); err != nil || !ok {
		t.Fatalf("save while live: %v %v, want true", ok, err)
	}
	if got, err := e.s.GetSubscription(e.ctx, sub.ID); err != nil || got.Cursor != "5-0" {
		t.Fatalf("after the live save: %+v %v", got, err)
	}

	// Ended meanwhile (the owner unpaired): the stale copy writes nothing.
	ended := stale
	ended.EndReason, ended.EndedAt = "unpaired", time.Now().UTC()
	if err := e.s.SaveSubscription(e.ctx, &ended); err != nil {
		t.Fatal(err)
	}
	stale.Cursor = "9-0"
	if ok, err := e.s.SaveLiveSubscription(e.ctx, &stale); err != nil || ok {
		t.Fatalf("save after the end: %v %v, want false", ok, err)
	}
	got, err := e.s.GetSubscription(e.ctx, sub.ID)
	if err != nil || got.EndReason != "unpaired" || got.Cursor != "5-0" {
		t.Fatalf("the ended record after a stale save: %+v %v", got, err)
	}
	if live, err := e.s.RemoteSubscriptions(e.ctx); err != nil || len(live) != 0 {
		t.Fatalf("remote subscriptions polled after the end: %d %v", len(live), err)
	}

	// Gone: nothing written.
	gone := Subscription{ID: "sub_gone", Watcher: "w1", Relay: "bravo"}
	if ok, err := e.s.SaveLiveSubscription(e.ctx, &gone); err != nil || ok {
		t.Fatalf("save of a missing subscription: %v %v, want false", ok, err)
	}
	if e.exists(e.key("sub", "sub_gone")) {
		t.Fatalf("a missing subscription was written")
	}
}
