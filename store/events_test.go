package store

import (
	"testing"
	"time"
)

func heldEvent(id string, at time.Time) *Event {
	return &Event{ID: id, Kind: "turn_end", Session: "s", At: at, Status: "done", Text: id}
}

func eventIDs(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

// HoldEvent keeps events for a subscription; the first hold sets the due time
// (first=true: the caller schedules the release) and later holds keep it,
// whether theirs is later or earlier. TakeHeld before the due time takes
// nothing and reports it; at or after it takes every held event in order and
// clears both keys.
func TestHoldEventTakeHeld(t *testing.T) {
	e := newEnv(t)
	sub := "sub_" + NewID(4)
	now := base
	due := now.Add(time.Minute)

	inForce, first, err := e.s.HoldEvent(e.ctx, sub, heldEvent("e1", now), due)
	if err != nil || !first || !inForce.Equal(due) {
		t.Fatalf("first HoldEvent = %v, %v, %v; want %v, true", inForce, first, err, due)
	}
	inForce, first, err = e.s.HoldEvent(e.ctx, sub, heldEvent("e2", now), due.Add(time.Minute))
	if err != nil || first || !inForce.Equal(due) {
		t.Errorf("later-due HoldEvent = %v, %v, %v; want %v (kept), false", inForce, first, err, due)
	}
	inForce, first, err = e.s.HoldEvent(e.ctx, sub, heldEvent("e3", now), due.Add(-30*time.Second))
	if err != nil || first || !inForce.Equal(due) {
		t.Errorf("earlier-due HoldEvent = %v, %v, %v; want %v (kept), false", inForce, first, err, due)
	}
	if n, d, err := e.s.HeldInfo(e.ctx, sub); err != nil || n != 3 || !d.Equal(due) {
		t.Errorf("HeldInfo = %d, %v, %v; want 3, %v", n, d, err, due)
	}

	// Early: nothing taken, the due time told.
	evs, d, err := e.s.TakeHeld(e.ctx, sub, due.Add(-time.Millisecond))
	if err != nil || evs != nil || !d.Equal(due) {
		t.Fatalf("early TakeHeld = %v, %v, %v; want nil, %v", evs, d, err, due)
	}
	if n, _, _ := e.s.HeldInfo(e.ctx, sub); n != 3 {
		t.Errorf("an early TakeHeld took events (%d left)", n)
	}

	// Due: all taken, in the order held.
	evs, d, err = e.s.TakeHeld(e.ctx, sub, due)
	if err != nil || !d.IsZero() {
		t.Fatalf("TakeHeld at the due time = %v, %v, %v", evs, d, err)
	}
	if got := eventIDs(evs); len(got) != 3 || got[0] != "e1" || got[1] != "e2" || got[2] != "e3" {
		t.Errorf("released %v, want [e1 e2 e3]", got)
	}
	if evs[0].Kind != "turn_end" || evs[0].Status != "done" || !evs[0].At.Equal(now) {
		t.Errorf("released event = %+v", evs[0])
	}
	if e.exists(e.key("held", sub)) || e.exists(e.key("due", sub)) {
		t.Error("held or due left after the release")
	}

	// Released once: a second take finds nothing.
	if evs, d, err := e.s.TakeHeld(e.ctx, sub, due.Add(time.Hour)); err != nil || evs != nil || !d.IsZero() {
		t.Errorf("second TakeHeld = %v, %v, %v; want nothing", evs, d, err)
	}
	// The next hold starts a new due time.
	due2 := due.Add(time.Hour)
	if inForce, first, _ := e.s.HoldEvent(e.ctx, sub, heldEvent("e4", now), due2); !first || !inForce.Equal(due2) {
		t.Errorf("HoldEvent after a release = %v, %v; want %v, true", inForce, first, due2)
	}
	if evs, _, _ := e.s.TakeHeld(e.ctx, sub, due2.Add(time.Minute)); len(evs) != 1 || evs[0].ID != "e4" {
		t.Errorf("late TakeHeld = %v, want [e4]", eventIDs(evs))
	}
	// Nothing ever held.
	if evs, d, err := e.s.TakeHeld(e.ctx, "sub_none", now); err != nil || evs != nil || !d.IsZero() {
		t.Errorf("TakeHeld of nothing = %v, %v, %v", evs, d, err)
	}
	if n, d, err := e.s.HeldInfo(e.ctx, "sub_none"); err != nil || n != 0 || !d.IsZero() {
		t.Errorf("HeldInfo of nothing = %d, %v, %v", n, d, err)
	}
}

// MoveHeld gives held events and their due time to a new subscription.
func TestMoveHeld(t *testing.T) {
	e := newEnv(t)
	from, to := "sub_"+NewID(4), "sub_"+NewID(4)
	due := base.Add(time.Minute)
	_, _, _ = e.s.HoldEvent(e.ctx, from, heldEvent("e1", base), due)
	_, _, _ = e.s.HoldEvent(e.ctx, from, heldEvent("e2", base), due)
	got, err := e.s.MoveHeld(e.ctx, from, to)
	if err != nil || !got.Equal(due) {
		t.Fatalf("MoveHeld = %v, %v; want %v", got, err, due)
	}
	if e.exists(e.key("held", from)) || e.exists(e.key("due", from)) {
		t.Error("the old subscription still holds")
	}
	if n, d, _ := e.s.HeldInfo(e.ctx, to); n != 2 || !d.Equal(due) {
		t.Errorf("HeldInfo(to) = %d, %v", n, d)
	}
	if got, err := e.s.MoveHeld(e.ctx, "sub_none", "sub_none2"); err != nil || !got.IsZero() {
		t.Errorf("MoveHeld of nothing = %v, %v; want zero", got, err)
	}
}

// MarkDelivered is true once per watcher and event; the set expires.
func TestMarkDelivered(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		w, ev string
		want  bool
	}{
		{"W1", "ev1", true}, {"W1", "ev1", false}, {"W2", "ev1", true}, {"W1", "ev2", true}, {"W2", "ev1", false},
	} {
		if got, err := e.s.MarkDelivered(e.ctx, c.w, c.ev); err != nil || got != c.want {
			t.Errorf("MarkDelivered(%s, %s) = %v, %v; want %v", c.w, c.ev, got, err, c.want)
		}
	}
	if d := e.pttl(e.key("dlv", "W1")); d <= 8*24*time.Hour-time.Minute || d > 8*24*time.Hour {
		t.Errorf("dlv PTTL = %v, want about 8 days", d)
	}
}

// MarkDelivered racing for one event and watcher: exactly one wins.
func TestMarkDeliveredConcurrent(t *testing.T) {
	e := newEnv(t)
	wins := make(chan bool, 20)
	for range 20 {
		go func() {
			ok, err := e.s.MarkDelivered(e.ctx, "W", "ev")
			if err != nil {
				t.Error(err)
			}
			wins <- ok
		}()
	}
	n := 0
	for range 20 {
		if <-wins {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d deliveries of one event, want 1", n)
	}
}

// BufferGroup opens one coalescing window; TakeBuffer takes the buffer only
// for the open window (or now, urgent) and clears it.
func TestBufferAndTake(t *testing.T) {
	e := newEnv(t)
	end := base.Add(10 * time.Second)
	opened, win, err := e.s.BufferGroup(e.ctx, "W", Batch{Kind: "plain", Events: []Event{{ID: "a"}}}, end)
	if err != nil || !opened || !win.Equal(end) {
		t.Fatalf("first BufferGroup = %v, %v, %v", opened, win, err)
	}
	opened, win, _ = e.s.BufferGroup(e.ctx, "W", Batch{Kind: "plain", Events: []Event{{ID: "b"}}}, end.Add(time.Minute))
	if opened || !win.Equal(end) {
		t.Errorf("second BufferGroup = %v, %v; want false, %v", opened, win, end)
	}
	if got, _ := e.s.TakeBuffer(e.ctx, "W", end.Add(time.Minute)); len(got) != 0 {
		t.Errorf("TakeBuffer for a window not open took %d", len(got))
	}
	got, err := e.s.TakeBuffer(e.ctx, "W", end)
	if err != nil || len(got) != 2 || got[0].Events[0].ID != "a" || got[1].Events[0].ID != "b" {
		t.Fatalf("TakeBuffer = %+v, %v", got, err)
	}
	if e.exists(e.key("buf", "W")) || e.exists(e.key("win", "W")) {
		t.Error("buffer or window left")
	}
	// Urgent: taken now, whatever the window.
	_, _, _ = e.s.BufferGroup(e.ctx, "W", Batch{Kind: "plain"}, end)
	if got, _ := e.s.TakeBuffer(e.ctx, "W", time.Time{}); len(got) != 1 {
		t.Errorf("urgent TakeBuffer took %d, want 1", len(got))
	}

	// The wake-limit summary uses the same script on wl / wlnext.
	at := base.Add(time.Hour)
	if first, due, _ := e.s.HoldForSummary(e.ctx, "W", []Batch{{Kind: "plain"}, {Kind: "digest"}}, at); !first || !due.Equal(at) {
		t.Errorf("HoldForSummary = %v, %v", first, due)
	}
	if first, due, _ := e.s.HoldForSummary(e.ctx, "W", []Batch{{Kind: "quiet"}}, at.Add(time.Hour)); first || !due.Equal(at) {
		t.Errorf("second HoldForSummary = %v, %v", first, due)
	}
	if got, _ := e.s.TakeSummary(e.ctx, "W"); len(got) != 3 || got[2].Kind != "quiet" {
		t.Errorf("TakeSummary = %+v", got)
	}
	if d, _ := e.s.SummaryDue(e.ctx, "W"); !d.IsZero() {
		t.Errorf("SummaryDue after the take = %v", d)
	}
}
