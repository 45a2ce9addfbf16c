package store

import (
	"context"
	"time"
)

// The store's tests were written against the two ways a turn used to
// finish; both are now EndTurn (one script, one path). These keep their
// calls as they were, with the turn's fields passed as written there.

// FinishTurn is EndTurn without an event (no notification), the turn's
// fields as key/value pairs; it returns whether more turns are queued.
func (s *Store) FinishTurn(ctx context.Context, sid, orchestrator, turnID, fence string, msg *Message, at time.Time, kv ...any) (bool, error) {
	r, err := s.endTurn(ctx, &TurnEnd{Session: sid, Orchestrator: orchestrator, Turn: turnID, Fence: fence, Msg: msg, At: at}, kv)
	if err != nil {
		return false, err
	}
	return r.More, nil
}

// FinishTurnEmit is EndTurn with the turn's event ev, the turn's fields as
// key/value pairs.
func (s *Store) FinishTurnEmit(ctx context.Context, sid, orchestrator, turnID, fence string, msg *Message, at time.Time, ev *Event, releaseOwner string, u *UsageAdd, kv ...any) (more, watched, released bool, ended *Turn, err error) {
	r, err := s.endTurn(ctx, &TurnEnd{Session: sid, Orchestrator: orchestrator, Turn: turnID, Fence: fence, Msg: msg, At: at,
		Event: ev, ReleaseOwner: releaseOwner, Usage: u}, kv)
	if err != nil {
		return false, false, false, nil, err
	}
	return r.More, r.Watched, r.Released, r.Turn, nil
}
