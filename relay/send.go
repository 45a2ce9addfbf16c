package relay

import (
	"context"
	"fmt"

	"github.com/oar/relay/store"
)

func (r *Relay) send(ctx context.Context, c *caller, a *args) (*result, *Error) {
	// Shapes first (R3.4a).
	text, e := promptText(a, nothingSent)
	if e != nil {
		return nil, e
	}
	wait, note, e := r.waitArg(ctx, a, nothingSent)
	if e != nil {
		return nil, e
	}
	mode, e := a.str("mode")
	if e != nil {
		return nil, e
	}
	model, e := a.str("model")
	if e != nil {
		return nil, e
	}
	effort, e := a.str("effort")
	if e != nil {
		return nil, e
	}
	provID, e := a.str("provider")
	if e != nil {
		return nil, e
	}
	if e := checkMode(mode, nothingSent); e != nil {
		return nil, e
	}
	// Target, self.
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s is archived; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "send cannot target the calling conversation itself. %s", nothingSent)
	}
	if isExternal(s) {
		return nil, notPromptable(s, nothingSent)
	}
	// Rule limits: the 4-at-work cap (checked again atomically when queued).
	if e := r.precheckCap(ctx, s); e != nil {
		return nil, e
	}
	// Provider switch (R7.8), model, effort.
	target := s.Provider
	switchTo := ""
	if provID != "" && provID != s.Provider {
		cur, ok := r.providers[s.Provider]
		partner := ""
		if ok {
			partner = cur.Info().SwitchTo
		}
		p, ok2 := r.providers[provID]
		if !ok2 || (partner != provID && p.Info().SwitchTo != s.Provider) {
			return nil, Errorf(CodeProviderUnavailable, "Provider %q is not set up as a billing partner of %q on relay %q. %s", provID, s.Provider, r.opts.Name, nothingSent).
				With("remoteCode", remoteName(provID)+"_NOT_CONFIGURED")
		}
		target, switchTo = provID, provID
	}
	p, e := r.provider(target, nothingSent)
	if e != nil {
		return nil, e
	}
	if e := r.checkAvailable(p, nothingSent); e != nil { // R17.1
		return nil, e
	}
	if e := r.checkCap(ctx, target, r.partnerOf(s.Provider), switchTo != "", nothingSent); e != nil { // R7.8
		return nil, e
	}
	info := p.Info()
	checkM := model
	if switchTo != "" && checkM == "" {
		checkM = s.Model
	}
	modelNote, e := r.checkModel(info, checkM, nothingSent, false)
	if e != nil {
		return nil, e
	}
	if e := r.checkEffort(info, effort, nothingSent); e != nil {
		return nil, e
	}
	// Card.
	if mode == "" {
		mode = c.s.Mode // a send without mode passes the caller's own mode (R7.10)
	}
	need := &cardNeed{}
	modeCard(need, c, "send")
	if e := r.loopCard(ctx, need, c); e != nil {
		return nil, e
	}
	queued := false
	defer func() {
		if !queued {
			r.giveBack(ctx, need, c) // nothing was sent: the prompt does not count (R5.2.6)
		}
	}()
	lines := []string{fmt.Sprintf("Send to %q (%s): %s", s.Title, id8(s.ID), excerpt(text, 200)),
		settingsLine(firstNonEmpty(model, s.Model), firstNonEmpty(effort, s.Effort), mode)}
	if switchTo != "" {
		lines = append(lines, "Switches billing to "+info.Name)
	}
	tid := s.ID
	if e := r.askCard(ctx, c, need, "send", &tid, lines, nothingSent); e != nil {
		return nil, e
	}
	// Effect. It completes even if the caller's client goes away now (its
	// context ends on a disconnect, R18.12); only the wait for the reply ends.
	waitCtx := ctx
	ctx = context.WithoutCancel(ctx)
	// Read the session again: a card may have taken minutes.
	s, err := r.st.GetSession(ctx, s.ID)
	if err != nil {
		return nil, internal(err)
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s was archived meanwhile; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	// The settings the prompt changes, written before it is queued (the turn
	// runs with them) and put back if the queue refuses it: a rejected message
	// switches nothing (R7.8).
	changes, undo := map[string]any{}, map[string]any{}
	change := func(field, old, nw string) {
		if nw != "" && nw != old {
			changes[field], undo[field] = nw, old
		}
	}
	change("mode", s.Mode, mode)
	change("model", s.Model, model)
	change("effort", s.Effort, effort)
	change("provider", s.Provider, switchTo)
	if len(changes) > 0 {
		if err := r.st.SetSessionFields(ctx, s.ID, changes); err != nil {
			return nil, internal(err)
		}
	}
	t, err := r.queue(ctx, s, text, "agent", r.fromRef(c), c.origin(r.opts.Name), c.s.ID, true, wait)
	if err != nil {
		if len(undo) > 0 {
			if uerr := r.st.SetSessionFields(context.WithoutCancel(ctx), s.ID, undo); uerr != nil {
				r.log.Error("undo settings of a refused send", "session", s.ID, "err", uerr)
			}
		}
		return nil, AsError(err)
	}
	queued = true
	t, e = r.sent(waitCtx, c, t, wait, "the prompt was queued (message_id "+t.ID+")")
	if e != nil {
		return nil, e
	}
	res := newResult(s.ID, "")
	r.turnResult(ctx, res, t)
	if note != "" {
		res.set("note", note)
	}
	if modelNote != "" {
		res.note("modelNote", modelNote)
	}
	return res, nil
}

func (r *Relay) precheckCap(ctx context.Context, s *store.Session) *Error {
	orch := r.orchestrator(s)
	if orch == "" {
		return nil
	}
	cur, err := r.st.CurrentTurn(ctx, s.ID)
	if err != nil {
		return internal(err)
	}
	q, err := r.st.QueuedTurns(ctx, s.ID)
	if err != nil {
		return internal(err)
	}
	if cur != "" || len(q) > 0 {
		return nil // busy already: the prompt just queues
	}
	n, err := r.st.BusyCount(ctx, orch)
	if err != nil {
		return internal(err)
	}
	if n >= r.opts.Limits.ActiveSessions {
		return Errorf(CodeSessionLimit, "%d sessions started by the same conversation already have a turn queued or running; the limit is %d. Wait for one to finish. %s",
			n, r.opts.Limits.ActiveSessions, nothingSent)
	}
	return nil
}
