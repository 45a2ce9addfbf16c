package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// sends is the send action (R7.7): its checks in R3.4a's order (also the
// check a paired relay asks before its card, peercheck.go, R5.3), the
// billing switch (R7.8), the card for loop protection and ask/plan mode
// (R5.2.6, R5.2.3), the settings it writes before its prompt (R7.10), and
// the prompt queued and its reply waited for (R7.11) through the turn queue.
// It sees the store only as recordStore and reaches the rest of the relay
// only through sendsHost and the subsystems it points to.
type sends struct {
	st     recordStore
	log    *slog.Logger
	opts   *Options // the relay's: name
	turns  *turnQueue
	cards  *cards
	usage  *usage
	models *models // the providers (the billing partners), a model and effort checked
	relay  sendsHost
}

// sendsHost is what send asks of the rest of the relay: the target session
// (sessions.go).
type sendsHost = targets

// send queues a prompt into another session (R7.7) and waits for its reply
// (R7.11). Its checks run in R3.4a's order: shapes, target, self, rule
// limits, provider / model / effort, card; only then the effect.
func (sn *sends) send(ctx context.Context, c *caller, a *args) (*result, *Error) {
	in, pl, e := sn.sendChecks(ctx, c, a)
	if e != nil {
		return nil, e
	}
	defer func() {
		if !pl.queued {
			sn.cards.giveBack(ctx, pl.need, c) // nothing was sent: the prompt does not count (R5.2.6)
		}
	}()
	if e := sn.cardSend(ctx, c, in, pl); e != nil {
		return nil, e
	}
	res, e := sn.applySend(ctx, c, in, pl)
	if pl.loopUsed != nil {
		return sn.loopCardSend(ctx, c, in, pl, pl.loopUsed.Count)
	}
	return res, e
}

// sendArgs are send's arguments, their shapes checked.
type sendArgs struct {
	text                        string
	wait                        time.Duration
	note                        string // wait_seconds was capped
	mode, model, effort, provID string
}

// sendPlan is what send's checks found: the target, the provider its turn
// runs on, and the card's state.
type sendPlan struct {
	s         *store.Session
	switchTo  string // the billing partner the session switches to (R7.8), "" for none
	info      provider.Info
	modelNote string
	mode      string // the mode the prompt runs in (R7.10)
	need      *cardNeed
	queued    bool // the prompt was queued: its loop count stays taken
	// loopAtQueue: no card was asked, and the prompt's push takes its loop
	// count (or finds it used up).
	loopAtQueue bool
	loopUsed    *store.LoopUsedError // the push found the count used up: nothing was queued
}

// sendChecks are all of send's checks before its card: the arguments'
// shapes, then its rules (also the check a paired relay asks, R5.3).
func (sn *sends) sendChecks(ctx context.Context, c *caller, a *args) (*sendArgs, *sendPlan, *Error) {
	in, e := sn.parseSendArgs(ctx, a)
	if e != nil {
		return nil, nil, e
	}
	pl, e := sn.checkSend(ctx, c, a, in)
	if e != nil {
		return nil, nil, e
	}
	return in, pl, nil
}

// parseSendArgs reads send's arguments: shapes first (R3.4a).
func (sn *sends) parseSendArgs(ctx context.Context, a *args) (*sendArgs, *Error) {
	in := &sendArgs{}
	var e *Error
	if in.text, e = promptText(a, nothingSent); e != nil {
		return nil, e
	}
	if in.wait, in.note, e = sn.turns.waitArg(ctx, a, nothingSent); e != nil {
		return nil, e
	}
	if in.mode, e = a.str("mode"); e != nil {
		return nil, e
	}
	if in.model, e = a.str("model"); e != nil {
		return nil, e
	}
	if in.effort, e = a.str("effort"); e != nil {
		return nil, e
	}
	if in.provID, e = a.str("provider"); e != nil {
		return nil, e
	}
	if e := checkMode(in.mode, nothingSent); e != nil {
		return nil, e
	}
	return in, nil
}

// checkSend applies send's rules in order: target, self, the 4-at-work cap,
// provider switch, model and effort.
func (sn *sends) checkSend(ctx context.Context, c *caller, a *args, in *sendArgs) (*sendPlan, *Error) {
	// Target, self.
	s, e := sn.relay.target(ctx, a, "session")
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
	if e := sn.turns.precheckCap(ctx, s); e != nil {
		return nil, e
	}
	// Provider switch (R7.8), model, effort.
	target := s.Provider
	switchTo := ""
	if in.provID != "" && in.provID != s.Provider {
		cur, ok := sn.models.providers[s.Provider]
		partner := ""
		if ok {
			partner = cur.Info().SwitchTo
		}
		p, ok2 := sn.models.providers[in.provID]
		if !ok2 || (partner != in.provID && p.Info().SwitchTo != s.Provider) {
			return nil, Errorf(CodeProviderUnavailable, "Provider %q is not set up as a billing partner of %q on relay %q. %s", in.provID, s.Provider, sn.opts.Name, nothingSent).
				With("remoteCode", remoteName(in.provID)+"_NOT_CONFIGURED")
		}
		target, switchTo = in.provID, in.provID
	}
	p, e := sn.models.provider(target, nothingSent)
	if e != nil {
		return nil, e
	}
	if e := sn.usage.checkAvailable(p, nothingSent); e != nil { // R17.1
		return nil, e
	}
	if e := sn.usage.checkCap(ctx, target, sn.usage.partnerOf(s.Provider), switchTo != "", nothingSent); e != nil { // R7.8
		return nil, e
	}
	info := p.Info()
	checkM := in.model
	if switchTo != "" && checkM == "" {
		checkM = s.Model
	}
	modelNote, e := sn.models.checkModel(info, checkM, nothingSent, false)
	if e != nil {
		return nil, e
	}
	if e := sn.models.checkEffort(info, in.effort, nothingSent); e != nil {
		return nil, e
	}
	mode := in.mode
	if mode == "" {
		mode = c.s.Mode // a send without mode passes the caller's own mode (R7.10)
	}
	return &sendPlan{s: s, switchTo: switchTo, info: info, modelNote: modelNote, mode: mode, need: &cardNeed{}}, nil
}

// cardSend asks the owner when a card is needed: loop protection (R5.2.6),
// ask/plan mode (R5.2.3).
// With no other reason for a card and no setting to write first, the loop
// count is taken by the prompt's push (loopAtQueue): one round trip less, and
// a prompt that is not queued is never counted; a used-up count then asks the
// loop card (loopCardSend).
func (sn *sends) cardSend(ctx context.Context, c *caller, in *sendArgs, pl *sendPlan) *Error {
	modeCard(pl.need, c, "send")
	if changes, _ := sendChanges(pl.s, in, pl); !pl.need.needed() && c.remote == nil && len(changes) == 0 {
		// Nothing is written before the push: a used-up count leaves nothing to undo.
		pl.loopAtQueue = true
		return nil
	}
	if e := sn.cards.loopCard(ctx, pl.need, c); e != nil {
		return e
	}
	return sn.askSendCard(ctx, c, in, pl)
}

// askSendCard asks the owner about the send for the reasons in pl.need.
func (sn *sends) askSendCard(ctx context.Context, c *caller, in *sendArgs, pl *sendPlan) *Error {
	s := pl.s
	lines := []string{sendCardLine(s, in.text), settingsLine(firstNonEmpty(in.model, s.Model), firstNonEmpty(in.effort, s.Effort), pl.mode)}
	if pl.switchTo != "" {
		lines = append(lines, "Switches billing to "+LineValue(sn.billingTo(pl.info), fieldModel))
	}
	tid := s.ID
	return sn.cards.askCard(ctx, c, &cardAsk{need: pl.need, action: "send", target: &tid, lines: lines, nothing: nothingSent})
}

// billingTo is what a billing switch onto provider p is called on its card
// (R7.8, R24.6): the billing its config says ("API key", "subscription"),
// else the provider's name.
func (sn *sends) billingTo(p provider.Info) string {
	switch sn.opts.Traits[p.ID].Billing {
	case config.BillingAPIKey:
		return "API key"
	case config.BillingSubscription:
		return "subscription"
	}
	return p.Name
}

// sendCardLine is a send card's first line: the target and the prompt (R18.16: one line).
func sendCardLine(s *store.Session, text string) string {
	return fmt.Sprintf(`Send to "%s" (%s): %s`, LineValue(s.Title, fieldTitle), lineID(s.ID), LineValue(text, fieldExcerpt))
}

// sendChanges are the session settings a send writes before its prompt is
// queued (R7.8, R7.10), and their old values.
func sendChanges(s *store.Session, in *sendArgs, pl *sendPlan) (changes, undo map[string]string) {
	changes, undo = map[string]string{}, map[string]string{}
	change := func(field, old, nw string) {
		if nw != "" && nw != old {
			changes[field], undo[field] = nw, old
		}
	}
	change("mode", s.Mode, pl.mode)
	change("model", s.Model, in.model)
	change("effort", s.Effort, in.effort)
	change("provider", s.Provider, pl.switchTo)
	return changes, undo
}

// loopCardSend is a send whose push found the loop count used up (nothing was
// written): it asks the loop card (R5.2.6) and, allowed, sends again (the
// card counted the prompt).
func (sn *sends) loopCardSend(ctx context.Context, c *caller, in *sendArgs, pl *sendPlan, count int) (*result, *Error) {
	pl.loopAtQueue, pl.loopUsed = false, nil
	addLoopReason(pl.need, count)
	if e := sn.askSendCard(ctx, c, in, pl); e != nil {
		return nil, e
	}
	return sn.applySend(ctx, c, in, pl)
}

// applySend writes the prompt's settings, queues it and waits for the reply.
func (sn *sends) applySend(ctx context.Context, c *caller, in *sendArgs, pl *sendPlan) (*result, *Error) {
	// Effect. It completes even if the caller's client goes away now (its
	// context ends on a disconnect, R18.12); only the wait for the reply ends.
	waitCtx := ctx
	ctx = context.WithoutCancel(ctx)
	// Read the session again when a card was asked: it may have taken
	// minutes. Without a card the checks just read it.
	s := pl.s
	if pl.need.needed() {
		var err error
		if s, err = sn.st.GetSession(ctx, pl.s.ID); err != nil {
			return nil, internal("applySend: GetSession", err)
		}
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s was archived meanwhile; it takes no prompts. %s", id8(s.ID), nothingSent)
	}
	// The settings the prompt changes, written before it is queued (the turn
	// runs with them) and put back if the queue refuses it: a rejected message
	// switches nothing (R7.8).
	changes, undo := sendChanges(s, in, pl)
	if len(changes) > 0 {
		if err := sn.st.SetSessionFields(ctx, s.ID, changes); err != nil {
			return nil, internal("applySend: SetSessionFields", err)
		}
	}
	// Listen for the turn's notifications before it can run: the wait then
	// needs no first read of the turn.
	id := store.NewID(16)
	ch, unsub := sn.turns.listen(id)
	defer unsub()
	loopOf := ""
	if pl.loopAtQueue {
		loopOf = c.s.ID
	}
	t, err := sn.turns.queue(ctx, prompt{id: id, s: s, text: in.text, role: "agent", from: sn.turns.fromRef(c), origin: c.origin(sn.opts.Name),
		caller: c.s.ID, enforce: true, waitFor: in.wait, loopOf: loopOf})
	if err != nil {
		if len(undo) > 0 {
			if uerr := sn.st.SetSessionFields(context.WithoutCancel(ctx), s.ID, undo); uerr != nil {
				sn.log.Error("undo settings of a refused send", "session", s.ID, "err", uerr)
			}
		}
		if used := (*store.LoopUsedError)(nil); errors.As(err, &used) {
			pl.loopUsed = used // send asks the loop card and sends again
			return nil, nil
		}
		return nil, AsError(err)
	}
	pl.queued = true
	// The wait was marked when the prompt was queued (waitFor).
	if t, err = sn.turns.await(waitCtx, turnWait{id: id, d: in.wait, own: true, delivery: c.delivery, ch: ch, queued: t}); err != nil {
		return nil, internalAfter(err, "the prompt was queued (message_id "+id+")")
	}
	res := newResult(s.ID, "")
	pr := sn.turns.turnResult(ctx, res, t)
	pr.Note = in.note
	if pl.modelNote != "" {
		pr.ModelNote = joinNote(pr.ModelNote, pl.modelNote)
	}
	return res, nil
}
