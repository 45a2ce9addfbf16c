package store

import (
	"errors"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// A drain's writes after its turn started are fenced by the lease it holds
// (issue 20 item 8): once another drain holds the session's lease, or the
// turn was ended by someone else, the outcome, its message, event and usage,
// a partial reply and a requeue are refused whole (ErrFenced) and nothing
// is written; the drain that holds the lease writes as before.
func TestWritesFencedByTheLease(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	t1, t2 := newTurn("s1", "agent", "one", base), newTurn("s1", "agent", "two", base)
	e.push(t1, "orch", 4, true, "d1")
	e.push(t2, "orch", 4, true, "d1")
	now := base.Add(time.Second)
	d, err := e.s.StartDrain(e.ctx, "s1", "paused", 50*time.Millisecond, now, 0)
	if err != nil || d.State != DrainStarted || d.Turn.ID != t1.ID {
		t.Fatalf("StartDrain = %+v, %v", d, err)
	}
	// The paused drain's lease runs out; another drain takes the session.
	if e.mini != nil {
		e.mini.FastForward(time.Second)
	}
	// (A real server: as soon as the 50 ms lease expired; the embedded store
	// counts TTLs down in steps of 250 ms.)
	var leased bool
	if !testwait.Poll(3*time.Second, 50*time.Millisecond, func() bool {
		ok, err := e.s.AcquireLease(e.ctx, "s1", "other", time.Minute)
		if err != nil {
			t.Fatalf("the other drain's lease: %v, %v", ok, err)
		}
		leased = ok
		return ok
	}) {
		t.Fatalf("the other drain's lease: %v, %v", leased, nil)
	}
	at := base.Add(2 * time.Second)
	msg := &Message{ID: "m-late", Role: "assistant", Text: "late reply", CreatedAt: at}
	ev := &Event{ID: "ev_late", Kind: "turn_end", Session: "s1", Turn: t1.ID, Status: "done", At: at}
	u := &UsageAdd{Provider: "p1", InputTokens: 10, OutputTokens: 20}
	events := func() int64 { n, _ := e.s.rdb.XLen(e.ctx, e.s.k("events")).Result(); return n }
	evBefore := events()

	if _, _, _, _, err := e.s.FinishTurnEmit(e.ctx, "s1", "orch", t1.ID, "paused", msg, at, ev, "paused", u, "status", TurnDone, "reply", "late reply", "ended", ms(at)); !errors.Is(err, ErrFenced) {
		t.Fatalf("FinishTurnEmit by the paused drain = %v, want ErrFenced", err)
	}
	if _, err := e.s.FinishTurn(e.ctx, "s1", "orch", t1.ID, "paused", msg, at, "status", TurnError, "error", "x"); !errors.Is(err, ErrFenced) {
		t.Fatalf("FinishTurn by the paused drain = %v, want ErrFenced", err)
	}
	if err := e.s.SetTurnPartial(e.ctx, "s1", t1.ID, "paused", "half a late reply", at); !errors.Is(err, ErrFenced) {
		t.Fatalf("SetTurnPartial by the paused drain = %v, want ErrFenced", err)
	}
	if err := e.s.RequeueTurnBy(e.ctx, "s1", t1.ID, "paused"); !errors.Is(err, ErrFenced) {
		t.Fatalf("RequeueTurnBy by the paused drain = %v, want ErrFenced", err)
	}
	tr, _ := e.s.GetTurn(e.ctx, t1.ID)
	if tr.Status != TurnRunning || tr.Reply != "" || tr.Partial != "" {
		t.Fatalf("after refused writes the turn is %s, reply %q, partial %q; want running, nothing written", tr.Status, tr.Reply, tr.Partial)
	}
	if msgs, _ := e.s.LastMessages(e.ctx, "s1", 10); len(msgs) != 2 {
		t.Fatalf("messages after refused writes: %d, want the 2 prompts only", len(msgs))
	}
	if got := events(); got != evBefore {
		t.Fatalf("events after refused writes: %d, want %d", got, evBefore)
	}
	if use, _ := e.s.Usage(e.ctx, "p1"); use["turns"] != 0 {
		t.Fatalf("usage counted by a refused write: %v", use)
	}
	if q, _ := e.s.QueuedTurns(e.ctx, "s1"); len(q) != 1 {
		t.Fatalf("queue after a refused requeue: %v, want only turn two", q)
	}

	// The drain holding the lease ends the turn (as the sweep's drain does:
	// "the worker running this turn stopped").
	if _, err := e.s.FinishTurn(e.ctx, "s1", "orch", t1.ID, "other", nil, at, "status", TurnError, "error", "stopped"); err != nil {
		t.Fatalf("FinishTurn by the lease holder: %v", err)
	}
	// Even holding the lease again, the first drain cannot write an outcome
	// of a turn that another already ended.
	_ = e.s.ReleaseLease(e.ctx, "s1", "other")
	if ok, _ := e.s.AcquireLease(e.ctx, "s1", "paused", time.Minute); !ok {
		t.Fatal("the paused drain could not take the free lease")
	}
	if _, _, _, _, err := e.s.FinishTurnEmit(e.ctx, "s1", "orch", t1.ID, "paused", msg, at, ev, "paused", u, "status", TurnDone, "reply", "late reply", "ended", ms(at)); !errors.Is(err, ErrFenced) {
		t.Fatalf("FinishTurnEmit of a turn another drain ended = %v, want ErrFenced", err)
	}
	if tr, _ := e.s.GetTurn(e.ctx, t1.ID); tr.Status != TurnError || tr.Reply != "" {
		t.Fatalf("the ended turn became %s %q", tr.Status, tr.Reply)
	}
}

// A fenced FinishTurn whose answer was lost and that its drain runs again
// (go-redis retries, finishLater) is the same step: no error, the same
// "more", nothing written twice; it is not taken for fenced.
func TestFinishTurnRetriedIsNotFenced(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	t1, t2 := newTurn("s1", "agent", "one", base), newTurn("s1", "agent", "two", base)
	e.push(t1, "orch", 4, true, "d1")
	e.push(t2, "orch", 4, true, "d1")
	if d, err := e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, base.Add(time.Second), 0); err != nil || d.State != DrainStarted {
		t.Fatalf("StartDrain = %+v, %v", d, err)
	}
	at := base.Add(2 * time.Second)
	msg := &Message{ID: "m-err", Role: "event", Text: "The turn ended with an error: boom", CreatedAt: at}
	for try := range 2 {
		more, err := e.s.FinishTurn(e.ctx, "s1", "orch", t1.ID, "w1", msg, at, "status", TurnError, "error", "boom", "ended", ms(at))
		if err != nil || !more {
			t.Fatalf("try %d: FinishTurn = %v, %v; want more and no error", try+1, more, err)
		}
	}
	if msgs, _ := e.s.LastMessages(e.ctx, "s1", 10); len(msgs) != 3 {
		t.Fatalf("%d messages after the step ran twice, want the 2 prompts and one outcome", len(msgs))
	}
}
