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

// R8.8, R8.19: the digest's lastDigestAt is written on the record as stored:
// an end written between the delivery's read and this write stays, and a
// record gone meanwhile is not brought back.
func TestSetLastDigestKeepsAnEnd(t *testing.T) {
	e := newEnv(t)
	sub := &Subscription{ID: "sub_dg", Watcher: "w1", Sessions: []string{"s1"}, DigestMinutes: 60, CreatedAt: time.Now().UTC()}
	if err := e.s.SaveSubscription(e.ctx, sub); err != nil {
		t.Fatal(err)
	}
	stale := *sub // the flush's copy, read before the digest went out
	ended := *sub
	ended.EndReason, ended.EndedAt = "unsubscribed", time.Now().UTC()
	if err := e.s.SaveSubscription(e.ctx, &ended); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	if err := e.s.SetLastDigest(e.ctx, &stale, at); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetSubscription(e.ctx, sub.ID)
	if err != nil || got.EndReason != "unsubscribed" || !got.LastDigestAt.Equal(at) {
		t.Fatalf("after the digest of an ended subscription: %+v %v, want it ended with lastDigestAt %s", got, err, at)
	}
	if !stale.LastDigestAt.Equal(at) {
		t.Errorf("the caller's copy: lastDigestAt %s, want %s", stale.LastDigestAt, at)
	}
	gone := Subscription{ID: "sub_dg_gone", Watcher: "w1"}
	if err := e.s.SetLastDigest(e.ctx, &gone, at); err != nil {
		t.Fatal(err)
	}
	if e.exists(e.key("sub", "sub_dg_gone")) {
		t.Fatalf("the digest brought a missing subscription back")
	}
}

// R8.19: an end is written on the record as stored: the first end's reason
// stays, a cursor or lastDigestAt written meanwhile is kept, the indexes
// follow, and a record gone meanwhile comes back ended.
func TestEndSubscriptionKeepsTheFirstEnd(t *testing.T) {
	e := newEnv(t)
	sub := &Subscription{ID: "sub_end", Watcher: "w1", Sessions: []string{"s1"}, CreatedAt: time.Now().UTC()}
	if err := e.s.SaveSubscription(e.ctx, sub); err != nil {
		t.Fatal(err)
	}
	first, second := *sub, *sub // two enders' copies, read while live
	dg := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	if err := e.s.SetLastDigest(e.ctx, &Subscription{ID: sub.ID}, dg); err != nil { // written meanwhile
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)
	if ended, err := e.s.EndSubscription(e.ctx, &first, "unsubscribed", at); err != nil || !ended {
		t.Fatalf("first end: %v %v, want true", ended, err)
	}
	if ended, err := e.s.EndSubscription(e.ctx, &second, "archived", at.Add(time.Minute)); err != nil || ended {
		t.Fatalf("second end: %v %v, want false", ended, err)
	}
	if second.EndReason != "unsubscribed" || !second.EndedAt.Equal(at) {
		t.Errorf("the second ender's copy: %q at %s, want the first end's", second.EndReason, second.EndedAt)
	}
	got, err := e.s.GetSubscription(e.ctx, sub.ID)
	if err != nil || got.EndReason != "unsubscribed" || !got.LastDigestAt.Equal(dg) {
		t.Fatalf("stored after two ends: %+v %v, want the first reason and lastDigestAt %s", got, err, dg)
	}
	if live, err := e.s.WatcherSubscriptions(e.ctx, "w1"); err != nil || len(live) != 0 {
		t.Fatalf("the watcher's live subscriptions after the end: %d %v", len(live), err)
	}
	gone := &Subscription{ID: "sub_end_gone", Watcher: "w1", Sessions: []string{"s1"}}
	if ended, err := e.s.EndSubscription(e.ctx, gone, "archived", at); err != nil || !ended {
		t.Fatalf("end of a missing record: %v %v", ended, err)
	}
	if got, err := e.s.GetSubscription(e.ctx, gone.ID); err != nil || got.EndReason != "archived" {
		t.Fatalf("a missing record after its end: %+v %v", got, err)
	}
}
