package store

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Regression tests of defects found while testing the store's scripts
// (fixed: a write into a deleted session no longer recreates it, a renewal
// never releases, FinishTurn without fields works).

// PushTurn and FinishTurn HSET 'last' on sess:ID unconditionally, so a write
// after DeleteSession (a turn that outlives OwnerDeleteSession's bounded
// 15 s wait, or a prompt racing the delete) recreates a one-field session
// hash: GetSession then returns a Session with an empty ID instead of
// ErrNotFound, and the keys are orphaned.
func TestKnownBugWriteRecreatesDeletedSession(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	e.createSession(sid, base)
	tr := newTurn(sid, "user", "x", base)
	e.push(tr, "", 4, false, "d")
	_, _ = e.s.PopTurn(e.ctx, sid, "", base)
	if err := e.s.DeleteSession(e.ctx, sid, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.FinishTurn(e.ctx, sid, "", tr.ID, "", nil, base.Add(time.Minute), "status", TurnDone); err != nil {
		t.Fatal(err)
	}
	if s, err := e.s.GetSession(e.ctx, sid); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSession after a finish into a deleted session = %+v, %v; want ErrNotFound", s, err)
	}
}

// RenewLease passes ttl.Milliseconds() to the script, where 0 means release:
// a ttl under 1 ms deleted the owner's lease and still reported it renewed.
// The renewed lease lives 1 ms, so a loaded machine may let it expire before
// the read: the check fails only when every one of 5 tries finds it gone (the
// defect deleted it on every try).
func TestKnownBugRenewLeaseSubMillisecond(t *testing.T) {
	e := newEnv(t)
	var gone []string
	for range 5 {
		if ok, _ := e.s.AcquireLease(e.ctx, "s", "a", time.Minute); !ok {
			t.Fatal("AcquireLease")
		}
		ok, err := e.s.RenewLease(e.ctx, "s", "a", 500*time.Microsecond)
		holder, _ := e.s.LeaseHolder(e.ctx, "s")
		if !ok || holder == "a" {
			return
		}
		gone = append(gone, fmt.Sprintf("holder %q, err %v", holder, err))
		_ = e.s.ReleaseLease(e.ctx, "s", "a")
	}
	t.Errorf("RenewLease = true, but the lease is gone on every try: %v", gone)
}

// FinishTurn with no field/value pairs fails: the script's HSET gets no
// fields ("wrong number of arguments"), so cur, the message and the drain
// flag are not handled either.
func TestKnownBugFinishTurnWithoutFields(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	tr := newTurn(sid, "user", "x", base)
	e.push(tr, "", 4, false, "d")
	_, _ = e.s.PopTurn(e.ctx, sid, "", base)
	if _, err := e.s.FinishTurn(e.ctx, sid, "", tr.ID, "", nil, base); err != nil {
		t.Errorf("FinishTurn without fields = %v", err)
	}
}
