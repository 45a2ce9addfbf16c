package domain

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay/store"
)

// MCP Tasks (R24.1). A relay_tool call of a client that takes tasks runs as
// CallTool does, on its own goroutine, until it comes to wait: on the
// owner's approval card (askCard) or on a turn's reply with a wait left
// (waitTurnOn). There the wait tells the call's task run (waitBegins), which
// writes the task to the store; CallToolTask then returns the task at once
// while the call runs on, and the call's result, when it returns, becomes
// the task's. The wait itself is the blocking call's: nothing is waited on
// twice, and a result is exactly the one the blocking call would have
// returned. A call that ends without waiting returns its result as CallTool
// does. tasks/cancel ends the call's context (from any process: the
// notification "mcptask:ID"), which ends the wait as a client that gave up.

// ToolTask is a call made a task, as tasks/get answers it.
type ToolTask struct {
	ID            string
	Status        string // TaskWorking, TaskCompleted or TaskCancelled
	StatusMessage string
	Created       time.Time
	Updated       time.Time
	TTL           time.Duration   // from Created until the task may be gone
	Result        json.RawMessage // completed: the call's result envelope
	IsError       bool
}

// Task statuses as ToolTask names them.
const (
	TaskWorking   = store.MCPTaskWorking
	TaskCompleted = store.MCPTaskCompleted
	TaskCancelled = store.MCPTaskCancelled
)

// ErrNoTask is a task that is not there: never made, expired, or another
// session's (the same answer for each).
var ErrNoTask = errors.New("no such task")

// MCPTaskPollInterval is how often a client is asked to poll tasks/get.
const MCPTaskPollInterval = 2 * time.Second

// Status messages of a working task.
const (
	taskMsgCard   = "waiting for the owner's approval"
	taskMsgQueued = "queued"
	taskMsgRun    = "running"
	taskMsgCancel = "cancelled: the call stopped waiting; the turn goes on"
)

// envelopePanic is the result of a task's call that panicked.
var envelopePanic = json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"The relay hit an unexpected error; its log has the detail. It is not known whether the action took effect."}`)

type waitHookKey struct{}

// taskRun is one call that becomes a task once it waits.
type taskRun struct {
	r        *Relay
	caller   string
	delivery *Delivery          // the call's own: settled once its result is stored (or not)
	cancel   context.CancelFunc // ends the call's context: tasks/cancel
	made     chan struct{}      // closed once the task is written

	stopWatch func() // ends watchCancel (set with task)

	mu   sync.Mutex
	task *store.MCPTask // nil until the call waited
}

// waitBegins tells the call's task run, when it has one, that the call
// waits now: on the owner's card cardID or on turn's reply.
func waitBegins(ctx context.Context, cardID, turn string) {
	if tr, ok := ctx.Value(waitHookKey{}).(*taskRun); ok {
		tr.waiting(ctx, cardID, turn)
	}
}

// waiting makes the task on the call's first wait and records what a later
// one waits on. A task that cannot be written leaves the call blocking.
func (tr *taskRun) waiting(ctx context.Context, cardID, turn string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := tr.r.now()
	card := cardID != ""
	if tr.task != nil {
		if _, err := tr.r.st.UpdateMCPTask(ctx, tr.task.ID, store.MCPTaskChange{Status: store.MCPTaskWorking, Card: &card, CardID: cardID, Turn: turn}, now); err != nil {
			tr.r.log.Warn("mcp task: record its wait", "task", id8(tr.task.ID), "err", err)
		}
		return
	}
	t := &store.MCPTask{ID: "task_" + store.NewID(24), Owner: tr.caller, Status: store.MCPTaskWorking, Card: card, CardID: cardID, Turn: turn,
		Proc: tr.r.opts.WorkerID, Created: now, Updated: now}
	if err := tr.r.st.CreateMCPTask(ctx, t); err != nil {
		tr.r.log.Warn("mcp task: create; the call blocks instead", "err", err)
		return
	}
	tr.task = t
	tr.watchCancel(t.ID)
	close(tr.made)
}

// watchCancel ends the call's context once its task is cancelled, from any
// process (the notification "mcptask:ID").
func (tr *taskRun) watchCancel(id string) {
	ch, unsub := tr.r.hub.sub("mcptask:" + id)
	ctx, stop := context.WithCancel(context.Background())
	tr.stopWatch = stop
	go func() {
		defer unsub()
		for {
			select {
			case <-ch:
				rctx, cancel := context.WithTimeout(ctx, detachedWriteTimeout)
				t, err := tr.r.st.GetMCPTask(rctx, id)
				cancel()
				if err == nil && t.Status == store.MCPTaskCancelled {
					tr.cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
}

// CallToolTask is CallTool for a client that takes MCP Tasks (R24.1): a
// call that comes to wait returns its task at once (task set, no result)
// and runs on; its result becomes the task's. A call that ends without
// waiting returns its result as CallTool does. d settles that result's
// delivery; a task's is settled once its result is stored. ended, when not
// nil, is called once the call has ended (a task's too).
func (r *Relay) CallToolTask(ctx context.Context, callerID string, raw json.RawMessage, d *Delivery, ended func()) (json.RawMessage, bool, *ToolTask) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// A relay that stops ends the wait: the task completes with what the
	// call has then (its turn queued or running, its message_id to wait on).
	endWithRelay := context.AfterFunc(r.lifeCtx(), cancel)
	tr := &taskRun{r: r, caller: callerID, delivery: NewDelivery(), cancel: cancel, made: make(chan struct{})}
	// Until the call is a task, a client that goes away ends it (as CallTool).
	unwatch := context.AfterFunc(ctx, func() {
		if !tr.isTask() {
			cancel()
		}
	})
	type outcome struct {
		res   json.RawMessage
		isErr bool
	}
	done := make(chan outcome, 1)
	r.taskRuns.Add(1)
	go func() {
		defer r.taskRuns.Done()
		if ended != nil {
			defer ended()
		}
		defer endWithRelay()
		defer cancel()
		res, isErr := tr.run(context.WithValue(runCtx, waitHookKey{}, tr), raw)
		if !tr.isTask() {
			done <- outcome{res, isErr}
			return
		}
		unwatch()
		tr.finish(res, isErr)
	}()
	select {
	case o := <-done:
		unwatch()
		tr.settle(d)
		return o.res, o.isErr, nil
	case <-tr.made:
		return nil, false, r.toolTask(ctx, tr.snapshot())
	}
}

// lifeCtx is the context of the relay's life (Start's), which ends when the
// relay stops; the background for a relay not started (tests of the domain
// alone).
func (r *Relay) lifeCtx() context.Context {
	if r.life == nil {
		return context.Background()
	}
	return r.life
}

// settle settles the delivery of a call that ended without coming to wait:
// once d has delivered its result, or at once for a call without one.
func (tr *taskRun) settle(d *Delivery) {
	if d != nil {
		d.after(tr.delivery.Settle)
	} else {
		tr.delivery.Settle(true)
	}
}

// run is CallTool, a panic turned into REMOTE_RELAY_INTERNAL (it runs on a
// goroutine of its own).
func (tr *taskRun) run(ctx context.Context, raw json.RawMessage) (res json.RawMessage, isErr bool) {
	defer func() {
		if p := recover(); p != nil {
			tr.r.log.Error("mcp task: panic in tool call", "session", tr.caller, "panic", p, "stack", string(debug.Stack()))
			res, isErr = envelopePanic, true
		}
	}()
	return tr.r.CallTool(ctx, tr.caller, raw, tr.delivery)
}

func (tr *taskRun) isTask() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.task != nil
}

func (tr *taskRun) snapshot() *store.MCPTask {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	cp := *tr.task
	cp.Expires = cp.Updated.Add(store.MCPTaskWorkingTTL)
	return &cp
}

// finish stores the call's result as its task's, unless the task was
// cancelled; the reply counts as seen only when it was stored (R18.12).
func (tr *taskRun) finish(res json.RawMessage, isErr bool) {
	tr.stopWatch()
	ctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
	defer cancel()
	id := tr.task.ID
	ok, err := tr.r.st.UpdateMCPTask(ctx, id, store.MCPTaskChange{Status: store.MCPTaskCompleted, Result: res, IsError: isErr}, tr.r.now())
	if err != nil {
		tr.r.log.Error("mcp task: store its result", "task", id8(id), "err", err)
	}
	tr.delivery.Settle(ok && err == nil)
}

// ToolTask answers tasks/get: the task of callerID's call (R24.1); ErrNoTask
// for none, one expired or another session's.
func (r *Relay) ToolTask(ctx context.Context, callerID, id string) (*ToolTask, error) {
	t, err := r.ownTask(ctx, callerID, id)
	if err != nil {
		return nil, err
	}
	if r.orphaned(ctx, t) {
		t = r.completeOrphan(ctx, t)
	}
	return r.toolTask(ctx, t), nil
}

func (r *Relay) ownTask(ctx context.Context, callerID, id string) (*store.MCPTask, error) {
	if !strings.HasPrefix(id, "task_") {
		return nil, ErrNoTask
	}
	t, err := r.st.GetMCPTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && t.Owner != callerID {
		return nil, ErrNoTask
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// toolTask is a task record as tasks/get answers it.
func (r *Relay) toolTask(ctx context.Context, t *store.MCPTask) *ToolTask {
	out := &ToolTask{ID: t.ID, Status: t.Status, Created: t.Created, Updated: t.Updated}
	if !t.Expires.IsZero() {
		out.TTL = t.Expires.Sub(t.Created)
	}
	switch t.Status {
	case store.MCPTaskCompleted:
		out.Result, out.IsError = t.Result, t.IsError
	case store.MCPTaskCancelled:
		out.StatusMessage = taskMsgCancel
	default:
		out.StatusMessage = r.waitStatus(ctx, t)
	}
	return out
}

// waitStatus says what a working task waits on: the owner's card, its
// turn queued, running (the partial reply's first line) or on a question.
func (r *Relay) waitStatus(ctx context.Context, t *store.MCPTask) string {
	if t.Card || t.Turn == "" {
		return taskMsgCard
	}
	turn, err := r.st.GetTurn(ctx, t.Turn)
	if err != nil {
		return taskMsgRun
	}
	switch {
	case turn.Status == store.TurnQueued:
		return taskMsgQueued
	case turn.Question != "":
		return "waiting on a question card"
	case strings.TrimSpace(turn.Partial) != "":
		line, _, _ := strings.Cut(strings.TrimSpace(turn.Partial), "\n")
		return taskMsgRun + ": " + excerpt(line, 200)
	}
	return taskMsgRun
}

// CancelToolTask answers tasks/cancel: the call stops waiting (the turn goes
// on) and its task becomes cancelled; a task that already ended stays as it
// is. ErrNoTask as ToolTask.
func (r *Relay) CancelToolTask(ctx context.Context, callerID, id string) error {
	if _, err := r.ownTask(ctx, callerID, id); err != nil {
		return err
	}
	ok, err := r.st.UpdateMCPTask(ctx, id, store.MCPTaskChange{Status: store.MCPTaskCancelled}, r.now())
	if errors.Is(err, store.ErrNotFound) {
		return ErrNoTask
	}
	if err != nil {
		return err
	}
	if ok {
		r.hub.fire("mcptask:" + id) // a call here stops at once
		r.notify(ctx, "mcptask:"+id)
	}
	return nil
}
