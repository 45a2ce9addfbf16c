package domain

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

// R18.11: a push that took its turn for a drain here and whose answer was
// lost (go-redis ran it again, or gave up) gives the turn back: at the head of
// its queue, the lease released, the drain handed to the queue. A turn no
// drain of this call took is left alone.
func TestUndoStartGivesTheTurnBack(t *testing.T) {
	t.Parallel()
	st, rdb := testStore(t)
	enq := &jobRecorder{}
	r := New(st, enq, nil, Options{Name: "desk", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	if err := rdb.HSet(ctx, store.KeyBase("t")+"sess:s1", "id", "s1").Err(); err != nil {
		t.Fatal(err)
	}
	tr := &store.Turn{ID: store.NewID(16), Session: "s1", Role: "agent", Text: "x", CreatedAt: time.Now()}
	o := store.QueueOpts{Limit: 4, DrainID: "drain:s1:a", StartOwner: "w:x", LeaseTTL: time.Minute}
	if q, err := st.QueueTurn(ctx, tr, o); err != nil || q.Drain == nil || q.Drain.State != store.DrainStarted {
		t.Fatalf("push: %+v %v", q, err)
	}
	// Another owner's turn, or none: nothing changes.
	r.turns.undoStart(ctx, "s1", tr.ID, "w:other", &store.Queued{Again: true, Drainer: "w:x"})
	if h, _ := st.LeaseHolder(ctx, "s1"); h != "w:x" || enq.count("drain:s1") != 0 {
		t.Fatalf("another owner's turn was touched: lease %q, drains %d", h, enq.count("drain:s1"))
	}
	// The answer was lost (nil: not known whether it ran): read, then given back.
	r.turns.undoStart(ctx, "s1", tr.ID, "w:x", nil)
	if cur, _ := st.CurrentTurn(ctx, "s1"); cur != "" {
		t.Fatalf("turn %s still current", cur)
	}
	if q, _ := st.QueuedTurns(ctx, "s1"); len(q) != 1 || q[0] != tr.ID {
		t.Fatalf("queue %v", q)
	}
	if got, _ := st.GetTurn(ctx, tr.ID); got.Status != store.TurnQueued {
		t.Fatalf("turn %s", got.Status)
	}
	if h, _ := st.LeaseHolder(ctx, "s1"); h != "" {
		t.Fatalf("lease still held by %q", h)
	}
	if n := enq.count("drain:s1"); n != 1 {
		t.Fatalf("%d drains enqueued, want 1", n)
	}
}
