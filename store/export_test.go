package store

import (
	"context"
	"time"
)

// The store's methods only its own tests call.

// Reserve makes sid busy in its orchestrator's semaphore before the session
// exists (create_session), failing with ErrSessionLimit when full.
func (s *Store) Reserve(ctx context.Context, orchestrator, sid string, limit int) error {
	return s.ReserveUnder(ctx, orchestrator, sid, limit, 0)
}

// PushTurn appends the prompt message, creates the turn record and queues it
// on its session (and moves the session's last activity), atomically with the
// 4-at-work check (enforce) for the session's orchestrator: a refused prompt
// leaves nothing behind. Prompts queue last, in the order their messages
// were appended; an event message (role "event") is queued next instead,
// after the events already waiting (R8.15). It
// returns whether the caller must enqueue a drain task with id drainID.
func (s *Store) PushTurn(ctx context.Context, t *Turn, orchestrator string, limit int, enforce bool, drainID string) (bool, error) {
	q, err := s.pushTurn(ctx, t, QueueOpts{Orchestrator: orchestrator, Limit: limit, Enforce: enforce, DrainID: drainID}, false)
	if err != nil {
		return false, err
	}
	return q.Start, nil
}

// PopTurn takes the session's next queued turn and marks it running; "" when
// the queue is empty (the session then leaves its orchestrator's semaphore
// and the drain flag is cleared).
func (s *Store) PopTurn(ctx context.Context, sid, orchestrator string, now time.Time) (string, error) {
	return s.PopTurnBy(ctx, sid, orchestrator, now, "")
}
