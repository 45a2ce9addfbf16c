package domain

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// jobRecorder records the delivery jobs the domain schedules; nothing else
// of the Enqueuer is used here.
type jobRecorder struct {
	Enqueuer

	mu   sync.Mutex
	jobs []string
}

func (j *jobRecorder) Enqueue(_ context.Context, typ string, _ any, _ string, _ time.Time) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.jobs = append(j.jobs, typ)
	return nil
}

// EnqueueDrain records a drain task as the job "drain:SESSION".
func (j *jobRecorder) EnqueueDrain(_ context.Context, session, _ string) error {
	return j.Enqueue(context.Background(), "drain:"+session, nil, "", time.Time{})
}

// testStore is a store on a miniredis of the test's own (key prefix "t").
func testStore(t *testing.T) (*store.Store, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return store.New(rdb, "t"), rdb
}

func (j *jobRecorder) count(typ string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, x := range j.jobs {
		if x == typ {
			n++
		}
	}
	return n
}

// R8.18, R18.12: endWait marks a reply seen (and drops the turn_ends held
// meanwhile) only once the call's result reached the caller: at once without
// a delivery hook (in-process calls), else when the transport settles; a
// result that did not reach the caller releases the held turn_end.
func TestEndWaitSeenOnlyOnceDelivered(t *testing.T) {
	t.Parallel()
	st, rdb := testStore(t)
	rec := &jobRecorder{}
	r := New(st, rec, nil, Options{Name: "desk", Timing: config.Timing{Coalesce: 30 * time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()

	// waitingTurn is a finished turn whose caller waits, with its turn_end held
	// (each for a watcher of its own: a release opens that watcher's window).
	waitingTurn := func() string {
		t.Helper()
		id := store.NewID(16)
		watcher := "w-" + id
		// A finished turn's record, written directly (prefix "t", as testStore's).
		if err := rdb.HSet(ctx, store.KeyBase("t")+"turn:"+id, "id", id, "status", string(store.TurnDone), "caller", watcher).Err(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetWaiting(ctx, id, time.Minute); err != nil {
			t.Fatal(err)
		}
		ev := store.Event{ID: "ev-" + id, Kind: EvTurnEnd, Session: "target", Turn: id, Status: string(store.TurnDone), Text: "x"}
		if err := st.HoldEcho(ctx, id, store.Batch{Kind: "plain", Sub: "sub_1", Events: []store.Event{ev}}, watcher); err != nil {
			t.Fatal(err)
		}
		return id
	}
	state := func(id string) (seen, waiting bool) {
		t.Helper()
		tr, err := st.GetTurn(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		waiting, err = st.Waiting(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Waited, waiting
	}
	released := func() int { return rec.count(jobs.TypeFlush) }

	t.Run("in-process: seen at once", func(t *testing.T) {
		id := waitingTurn()
		before := released()
		if err := r.pipeline.endWait(ctx, nil, id, true); err != nil {
			t.Fatal(err)
		}
		if seen, waiting := state(id); !seen || waiting {
			t.Fatalf("seen %v, still waiting %v; want seen and the wait ended", seen, waiting)
		}
		if released() != before {
			t.Fatalf("the held turn_end was released")
		}
	})

	t.Run("delivered: seen once settled", func(t *testing.T) {
		id := waitingTurn()
		before := released()
		d := NewDelivery()
		if err := r.pipeline.endWait(ctx, d, id, true); err != nil {
			t.Fatal(err)
		}
		if seen, waiting := state(id); seen || !waiting {
			t.Fatalf("before the result was written: seen %v, waiting %v; want not seen, still held", seen, waiting)
		}
		d.Settle(true)
		d.Settle(false) // a second settle does nothing
		if seen, waiting := state(id); !seen || waiting {
			t.Fatalf("after delivery: seen %v, still waiting %v; want seen and the wait ended", seen, waiting)
		}
		if released() != before {
			t.Fatalf("the held turn_end was released though the reply reached the caller")
		}
	})

	t.Run("not delivered: turn_end released", func(t *testing.T) {
		id := waitingTurn()
		before := released()
		d := NewDelivery()
		if err := r.pipeline.endWait(ctx, d, id, true); err != nil {
			t.Fatal(err)
		}
		d.Settle(false)
		if seen, waiting := state(id); seen || waiting {
			t.Fatalf("after a failed delivery: seen %v, still waiting %v; want neither", seen, waiting)
		}
		if released() != before+1 {
			t.Fatalf("the held turn_end was not released (%d flush jobs, want %d)", released(), before+1)
		}
	})

	t.Run("no reply: released without settling", func(t *testing.T) {
		id := waitingTurn()
		before := released()
		d := NewDelivery()
		if err := r.pipeline.endWait(ctx, d, id, false); err != nil {
			t.Fatal(err)
		}
		if seen, waiting := state(id); seen || waiting {
			t.Fatalf("seen %v, still waiting %v; want neither", seen, waiting)
		}
		if released() != before+1 {
			t.Fatalf("the held turn_end was not released")
		}
	})
}
