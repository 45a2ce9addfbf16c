// Package asynqjobs is the asynq side of the relay's jobs (package jobs
// names them): the drain task, the Client the domain enqueues through and
// looks tasks up with, and the move of an older dataset's queues.
package asynqjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/otelx"
)

// NewDrainTask builds the task that runs a session's next turn; the task id
// is given so the recovery sweep can find it. The trace of ctx's span, if
// any, rides in the payload (R25.1).
func NewDrainTask(ctx context.Context, q jobs.Queues, session, taskID string) (*asynq.Task, error) {
	p := jobs.DrainPayload{Session: session}
	p.TP, p.TS = otelx.Inject(ctx)
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(jobs.TypeDrain, b, asynq.Queue(q.Turns), asynq.TaskID(taskID),
		asynq.MaxRetry(1000), asynq.Timeout(jobs.DrainTimeout)), nil
}

// Client enqueues the relay's jobs and looks them up.
type Client struct {
	c    *asynq.Client
	insp *asynq.Inspector
	q    jobs.Queues
}

// NewClient wraps an asynq client and inspector.
func NewClient(c *asynq.Client, insp *asynq.Inspector, q jobs.Queues) *Client {
	return &Client{c: c, insp: insp, q: q}
}

// EnqueueDrain enqueues a drain task with the given id; an id already taken is not an error.
func (c *Client) EnqueueDrain(ctx context.Context, session, taskID string) error {
	t, err := NewDrainTask(ctx, c.q, session, taskID)
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
		return fmt.Errorf("encode the payload of %s %s: %w", typ, id, err)
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
		if id != "" {
			return fmt.Errorf("enqueue %s %s: %w", typ, id, err)
		}
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
