package asynqjobs

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/oar/relay/jobs"
)

// MoveOldQueues moves the waiting tasks (pending, scheduled, retry) of the
// old queues of prefix to the current ones, each with its id, type,
// payload, retries allowed, timeout, deadline, retention and due time, then
// deletes the old queues (a task left active there belonged to a process
// that is gone: the relay's recovery starts its drain again). Queues that
// do not exist are skipped. It returns how many tasks moved.
func MoveOldQueues(insp *asynq.Inspector, c *asynq.Client, prefix string) (int, error) {
	known, err := insp.Queues()
	if err != nil {
		return 0, err
	}
	from, to := jobs.OldQueuesFor(prefix), jobs.QueuesFor(prefix)
	moved := 0
	for i, old := range from.All() {
		if !slices.Contains(known, old) {
			continue
		}
		dst := to.All()[i]
		lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListScheduledTasks, insp.ListRetryTasks}
		for _, list := range lists {
			for {
				tasks, err := list(old, asynq.PageSize(500))
				if err != nil {
					return moved, fmt.Errorf("list %s: %w", old, err)
				}
				if len(tasks) == 0 {
					break
				}
				for _, t := range tasks {
					opts := []asynq.Option{asynq.Queue(dst), asynq.TaskID(t.ID), asynq.MaxRetry(t.MaxRetry)}
					if t.Timeout > 0 {
						opts = append(opts, asynq.Timeout(t.Timeout))
					}
					if !t.Deadline.IsZero() {
						opts = append(opts, asynq.Deadline(t.Deadline))
					}
					if t.Retention > 0 {
						opts = append(opts, asynq.Retention(t.Retention))
					}
					if t.NextProcessAt.After(time.Now()) {
						opts = append(opts, asynq.ProcessAt(t.NextProcessAt))
					}
					if _, err := c.Enqueue(asynq.NewTask(t.Type, t.Payload), opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
						return moved, fmt.Errorf("move task %s to %s: %w", t.ID, dst, err)
					}
					if err := insp.DeleteTask(old, t.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
						return moved, fmt.Errorf("delete task %s of %s: %w", t.ID, old, err)
					}
					moved++
				}
			}
		}
		if err := insp.DeleteQueue(old, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			return moved, fmt.Errorf("delete queue %s: %w", old, err)
		}
	}
	return moved, nil
}
