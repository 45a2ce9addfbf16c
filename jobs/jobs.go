// Package jobs is the contract between who enqueues work and who handles it:
// asynq task type names, payloads, constructors and enqueue options.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// TypeDrain runs the next queued turn of one session.
const TypeDrain = "session:drain"

// DrainPayload names the session whose next turn runs.
type DrainPayload struct {
	Session string `json:"session"`
}

// Event delivery task types (fan-out, timed releases, coalescing flushes,
// wake-limit summaries, heartbeats, the stall scan).
const (
	TypeFanout    = "event:fanout"
	TypeRelease   = "event:release"
	TypeFlush     = "event:flush"
	TypeSummary   = "event:summary"
	TypeHeartbeat = "event:heartbeat"
	TypeStallScan = "event:stallscan"
	// TypeFire fires one occurrence of a schedule.
	TypeFire = "schedule:fire"
)

// Queues names the asynq queues of one relay (their names carry the relay's
// key prefix so several relays or tests can share one Redis).
type Queues struct {
	Turns  string
	Events string
}

// QueuesFor returns the queue names for a key prefix: PREFIX}:turns and
// PREFIX}:events. asynq keeps a queue's keys under asynq:{QUEUE}:…, and
// Redis Cluster hashes a key on what stands between its first "{" and the
// first "}" after it: asynq:{PREFIX}:turns}:pending hashes on PREFIX, as the
// relay's own keys ({PREFIX}:…) do. So both queues and all the relay's keys
// share one hash slot, and the two queues stay apart (asynq weighs them,
// and their depths are the relay_queue_* metrics).
func QueuesFor(prefix string) Queues {
	return Queues{Turns: prefix + "}:turns", Events: prefix + "}:events"}
}

// All lists the queue names.
func (q Queues) All() []string { return []string{q.Turns, q.Events} }

// DrainTimeout is the asynq timeout of a drain task. It is longer than the
// longest max_turn_seconds (86,400 s): the relay itself ends a turn that runs
// too long, counted from the turn's start with the setting as it is then
// (R18.13), so a queue timeout never ends or restarts a running turn.
const DrainTimeout = 25 * time.Hour

// NewDrainTask builds the task that runs a session's next turn; the task id
// is given so the recovery sweep can find it.
func NewDrainTask(q Queues, session, taskID string) (*asynq.Task, error) {
	b, err := json.Marshal(DrainPayload{Session: session})
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(TypeDrain, b, asynq.Queue(q.Turns), asynq.TaskID(taskID),
		asynq.MaxRetry(1000), asynq.Timeout(DrainTimeout)), nil
}

// Client enqueues the relay's jobs and looks them up.
type Client struct {
	c    *asynq.Client
	insp *asynq.Inspector
	q    Queues
}

// NewClient wraps an asynq client and inspector.
func NewClient(c *asynq.Client, insp *asynq.Inspector, q Queues) *Client {
	return &Client{c: c, insp: insp, q: q}
}

// EnqueueDrain enqueues a drain task with the given id; an id already taken is not an error.
func (c *Client) EnqueueDrain(ctx context.Context, session, taskID string) error {
	t, err := NewDrainTask(c.q, session, taskID)
	if err != nil {
		return err
	}
	_, err = c.c.EnqueueContext(ctx, t)
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue drain %s: %w", session, err)
	}
	return nil
}

// Enqueue enqueues an event-delivery job of type typ with a JSON payload on
// the events queue; id (optional) makes it unique, at (optional) delays it.
func (c *Client) Enqueue(ctx context.Context, typ string, payload any, id string, at time.Time) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	opts := []asynq.Option{asynq.Queue(c.q.Events), asynq.MaxRetry(25), asynq.Timeout(5 * time.Minute)}
	if id != "" {
		opts = append(opts, asynq.TaskID(id))
	}
	if !at.IsZero() {
		opts = append(opts, asynq.ProcessAt(at))
	}
	_, err = c.c.EnqueueContext(ctx, asynq.NewTask(typ, b, opts...))
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", typ, err)
	}
	return nil
}

// DrainTaskExists reports whether the drain task is still in the queue (pending,
// scheduled, retrying or active).
// DrainTaskWaiting reports whether a drain task with this id waits to run
// (pending, scheduled or retrying). An active task is not waiting: either a
// live worker runs it (and holds the session's lease) or its worker died.
func (c *Client) DrainTaskWaiting(ctx context.Context, taskID string) (bool, error) {
	info, err := c.insp.GetTaskInfo(c.q.Turns, taskID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.State == asynq.TaskStatePending || info.State == asynq.TaskStateScheduled || info.State == asynq.TaskStateRetry, nil
}

// DrainTaskExists reports whether a drain task with this id is still pending, scheduled, retrying or active.
func (c *Client) DrainTaskExists(ctx context.Context, taskID string) (bool, error) {
	info, err := c.insp.GetTaskInfo(c.q.Turns, taskID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.State != asynq.TaskStateCompleted && info.State != asynq.TaskStateArchived, nil
}
