package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/oar/relay/store"
)

// drainer is the drain subsystem (§18, R18.11): a session's turns run one at
// a time under its lease (Drain → drainFrom → run), the lease renewed while
// the provider works and every write after the start fenced by it, the turns
// this process runs (running, claims, endingNow) handed back at shutdown, a
// dead worker's turn resumed or put back, and a waited prompt's drain started
// here on a free slot (runHere). RunJob's drain job and Relay.Drain are its
// doors. It sees the store only as recordStore and drainStore, starts the
// tasks an agent asks for through the tasks subsystem, counts a turn's usage
// through the usage subsystem, and reaches the rest of the relay only
// through drainHost.
type drainer struct {
	st           drainerStore
	enq          Enqueuer
	log          *slog.Logger
	met          Metrics
	opts         *Options // the relay's: worker id, limits, timing
	now          func() time.Time
	pipeline     *pipeline
	tasks        *tasks // the tasks an agent starts (tasks.go)
	usage        *usage // a turn's usage and the model that ran (usage.go)
	updates      *updates
	hub          *hub
	warm         *warmGoroutines // drains started here run on kept goroutines (stacks.go)
	tokens       *tokens         // the turn tokens it mints (tokens.go)
	models       *models         // the providers
	drainHistory int             // last messages a drain reads with its turn: historyRead when a provider uses them, else 0
	relay        drainHost

	mu        sync.Mutex
	running   map[string]context.CancelCauseFunc // turn id -> cancel (turns this process runs)
	claims    map[string]bool                    // turn id -> its agent started: turns this process's drains took (resumable)
	endingNow map[string]bool                    // turns whose outcome a drain here is writing (finishEmit)
	stopping  bool
	direct    chan struct{} // slots of drains started here; nil: none
	directWG  sync.WaitGroup
}

// drainerStore is the store as the drain sees it.
type drainerStore interface {
	recordStore
	drainStore
}

// drainHost is what the drain asks of the rest of the relay: an agent's
// relay_tool calls (tool.go), the settings (relay.go), the folders rule
// (create.go), whether any relay is paired (pairing.go) and telling the
// console (notify.go).
type drainHost interface {
	CallTool(ctx context.Context, callerID string, raw json.RawMessage, d *Delivery) (json.RawMessage, bool)
	settings(ctx context.Context) (store.Settings, error)
	folderAllowed(dir string) (resolved, why string)
	anyPairing(ctx context.Context) bool
	notify(ctx context.Context, what string)
	ownerNotice(ctx context.Context, event, sid, title, text string)
	turnNotice(ctx context.Context, s *store.Session, id string, t *store.Turn, status store.TurnStatus, text string)
}

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
func (dr *drainer) reserveDirect() bool {
	if dr.direct == nil {
		return false
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if dr.stopping {
		return false
	}
	select {
	case dr.direct <- struct{}{}:
	default:
		return false // every slot busy: the queue spreads the work
	}
	dr.directWG.Add(1)
	return true
}

// releaseDirect gives back a slot reserveDirect took and no drain used.
func (dr *drainer) releaseDirect() {
	<-dr.direct
	dr.directWG.Done()
}

// runHere runs the session's drain from its first step d (taken for owner
// with the prompt's push) in this process, on the slot reserveDirect took.
func (dr *drainer) runHere(call context.Context, sid, owner string, d *store.Drain) {
	sc := trace.SpanContextFromContext(call) // R25.1: the turn's span joins the call's trace
	dr.warm.start(func() {
		defer dr.releaseDirect()
		// Not the call's context: the turn runs on when the caller leaves.
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		err := dr.drainRecovered(sid, func() error { return dr.drainFrom(ctx, sid, owner, d) })
		if err == nil {
			return
		}
		if !errors.Is(err, ErrRetryLater) {
			dr.log.Warn("a drain started here failed; the queue takes it over", "session", id8(sid), "err", err)
		}
		if err := dr.enqueueDrain(ctx, sid); err != nil {
			dr.log.Warn("hand a drain to the queue; the sweep will restart it", "session", id8(sid), "err", err)
		}
	})
}

// enqueueDrain gives the session's drain to the queue as a new task: its
// id becomes the drain flag, then the task is enqueued.
func (dr *drainer) enqueueDrain(ctx context.Context, sid string) error {
	next := "drain:" + sid + ":" + store.NewID(6)
	if err := dr.st.SetDrainID(ctx, sid, next); err != nil {
		return fmt.Errorf("enqueue the drain of session %s: %w", id8(sid), err)
	}
	return dr.enq.EnqueueDrain(ctx, sid, next)
}

// drainRecovered runs drain (a drain started here) with a panic turned into
// an error, as asynq does for a task: it must not take the process down.
func (dr *drainer) drainRecovered(sid string, drain func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			dr.log.Error("a drain started here panicked", "session", id8(sid), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("drain of %s panicked: %v", id8(sid), p)
		}
	}()
	return drain()
}
