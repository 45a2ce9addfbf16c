package domain

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/oar/relay/store"
)

// A prompt whose caller waits for the reply (send, create_session with a
// wait) starts its session's drain in the process that queued it, when that
// process runs a worker and has a free slot: the reply's path then skips
// asynq's hop (enqueue, the wake-up, dequeue, done; about 1.6 ms of a
// send→reply at one client). Nothing else changes: the drain takes the
// session's lease and pops the queue in order like any worker's, the drain
// flag is set as for a queued task, and whatever the drain cannot finish
// (the lease is held elsewhere, the process is stopping, an error) goes to
// the queue as a drain task. A process that dies mid-turn leaves a flag
// without a lease, which the drain sweep restarts, as it does for a task.

// A prompt that may start its drain here reserves a slot before it is queued:
// its push then also takes the drain's first step (StartDrain) when it is the
// prompt that starts the drain, one round trip less.

// reserveDirect takes a slot for a drain started here; false when there is
// none (no worker here, every slot busy, or the process is stopping).
func (r *Relay) reserveDirect() bool {
	if r.direct == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false
	}
	select {
	case r.direct <- struct{}{}:
	default:
		return false // every slot busy: the queue spreads the work
	}
	r.directWG.Add(1)
	return true
}

// releaseDirect gives back a slot reserveDirect took and no drain used.
func (r *Relay) releaseDirect() {
	<-r.direct
	r.directWG.Done()
}

// runHere runs the session's drain from its first step d (taken for owner
// with the prompt's push) in this process, on the slot reserveDirect took.
func (r *Relay) runHere(sid, owner string, d *store.Drain) {
	r.warm.start(func() {
		defer r.releaseDirect()
		ctx := context.Background() // not the call's: the turn runs on when the caller leaves
		err := r.drainRecovered(sid, func() error { return r.drainFrom(ctx, sid, owner, d) })
		if err == nil {
			return
		}
		if !errors.Is(err, ErrRetryLater) {
			r.log.Warn("a drain started here failed; the queue takes it over", "session", id8(sid), "err", err)
		}
		if err := r.enqueueDrain(ctx, sid); err != nil {
			r.log.Warn("hand a drain to the queue; the sweep will restart it", "session", id8(sid), "err", err)
		}
	})
}

// enqueueDrain gives the session's drain to the queue as a new task: its
// id becomes the drain flag, then the task is enqueued.
func (r *Relay) enqueueDrain(ctx context.Context, sid string) error {
	next := "drain:" + sid + ":" + store.NewID(6)
	if err := r.st.SetDrainID(ctx, sid, next); err != nil {
		return fmt.Errorf("enqueue the drain of session %s: %w", id8(sid), err)
	}
	return r.enq.EnqueueDrain(ctx, sid, next)
}

// drainRecovered runs drain (a drain started here) with a panic turned into
// an error, as asynq does for a task: it must not take the process down.
func (r *Relay) drainRecovered(sid string, drain func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("a drain started here panicked", "session", id8(sid), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("drain of %s panicked: %v", id8(sid), p)
		}
	}()
	return drain()
}
