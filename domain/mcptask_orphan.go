package domain

import (
	"context"
	"encoding/json"
	"time"

	"github.com/oar/relay/store"
)

// A task whose process was killed mid-call (R24.1): nothing in that process
// completes it, while its turn is recovered and ends elsewhere. tasks/get on
// any process completes it once the process that ran the call has not been
// seen for liveProcAge, as a graceful stop would have: with the result of a
// wait for its turn (wait_seconds 0: the reply if the turn ended, else its
// status and message_id), or, for a call still on the owner's card, an error
// that says nothing was sent (the card, which nobody waits on any more, is
// withdrawn). UpdateMCPTask applies only to a working task: of two processes
// completing it at once, one writes.

// orphanCheckAfter is how long a task must have been unchanged before
// tasks/get asks whether its process still lives (one HGET): a fresh task's
// process was alive a moment ago, and a normal poll costs nothing more.
const orphanCheckAfter = 15 * time.Second

// Results of a task whose process stopped while it waited on its card.
const (
	taskMsgCardGone    = "The relay process that ran this call stopped before the owner answered the approval card; the card was withdrawn. Nothing was sent."
	taskMsgCardAllowed = "The relay process that ran this call stopped right after the owner allowed the approval card; it is not known whether the action took effect."
)

// orphaned reports whether t is working but the process running its call
// (another one) has not been seen for liveProcAge.
func (r *Relay) orphaned(ctx context.Context, t *store.MCPTask) bool {
	if t.Status != store.MCPTaskWorking || t.Proc == "" || t.Proc == r.opts.WorkerID || r.now().Sub(t.Updated) < orphanCheckAfter {
		return false
	}
	seen, err := r.st.ProcSeen(ctx, t.Proc)
	if err != nil {
		r.log.Warn("mcp task: read its process", "task", id8(t.ID), "err", err)
		return false
	}
	return time.Since(seen) > liveProcAge
}

// completeOrphan completes t, whose process is gone, and returns the task as
// stored then (completed here, or by another process, or cancelled).
func (r *Relay) completeOrphan(ctx context.Context, t *store.MCPTask) *store.MCPTask {
	dl := NewDelivery()
	res, isErr := r.orphanResult(ctx, t, dl)
	ok, err := r.st.UpdateMCPTask(ctx, t.ID, store.MCPTaskChange{Status: store.MCPTaskCompleted, Result: res, IsError: isErr}, r.now())
	dl.Settle(ok && err == nil) // the reply counts as seen once stored (R18.12)
	if err != nil {
		r.log.Warn("mcp task: complete the task of a process that stopped", "task", id8(t.ID), "err", err)
		return t
	}
	r.log.Info("mcp task of a process that stopped completed", "task", id8(t.ID), "process", t.Proc, "applied", ok)
	cur, err := r.st.GetMCPTask(ctx, t.ID)
	if err != nil {
		return t
	}
	return cur
}

// orphanWait is the wait call a graceful stop would have made for an
// orphaned task's turn (its fields in the order the JSON had as a map).
type orphanWait struct {
	Action      string `json:"action"`
	MessageID   string `json:"message_id"`
	Relay       string `json:"relay"`
	Session     string `json:"session"`
	WaitSeconds int    `json:"wait_seconds"`
}

// orphanResult is the result a graceful stop would have given t's call.
func (r *Relay) orphanResult(ctx context.Context, t *store.MCPTask, d *Delivery) (json.RawMessage, bool) {
	start := time.Now()
	if t.Card || t.Turn == "" {
		return r.envelope("unknown", t.Owner, start, nil, r.orphanCardError(ctx, t.CardID))
	}
	turn, err := r.st.GetTurn(ctx, t.Turn)
	if err != nil {
		return r.envelope(actWait, t.Owner, start, nil, internal("orphan task: GetTurn", err))
	}
	raw, _ := json.Marshal(orphanWait{Action: actWait, MessageID: turn.ID, Relay: "this", Session: turn.Session})
	a, e := parseArgs(raw)
	if e != nil {
		return r.envelope(actWait, t.Owner, start, nil, e)
	}
	c, pre, err := r.loadCall(ctx, t.Owner, turn.Session)
	if err != nil {
		return r.envelope(actWait, t.Owner, start, nil, AsError(err))
	}
	a.pre, c.delivery = pre, d
	out, e := r.runLocal(ctx, c, a)
	return r.envelope(actWait, t.Owner, start, out, e)
}

// orphanCardError withdraws the card a stopped process's call waited on and
// says what became of the call.
func (r *Relay) orphanCardError(ctx context.Context, cardID string) *Error {
	if cardID != "" {
		c, ok, err := r.st.DecideCard(ctx, cardID, "withdrawn")
		if err == nil && !ok && c.Decision == "allow" {
			return Errorf(CodeInternal, taskMsgCardAllowed)
		}
		if ok {
			r.notify(ctx, "cards") // the owner's console drops it (R19.6)
		}
	}
	return Errorf(CodePermission, taskMsgCardGone)
}
