package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// cards are the approval cards (R5.1, R5.2): a card shown in the caller's
// conversation that blocks the call until the owner allows or denies it or
// the longest wait per call runs out (on the work clock, Options.Timers),
// loop protection's count (R5.2.6), and the owner's list and decision. The
// tool actions and the schedules, subscriptions and asks ask their cards
// here. It sees the store only as recordStore and cardStore, hears a
// decision on the notification hub, and reaches the rest of the relay only
// through cardsHost.
type cards struct {
	st    cardsStore
	now   func() time.Time
	log   *slog.Logger
	met   Metrics
	opts  *Options // the relay's: name, limits, MaxWaitCap, Timers (a card's deadline)
	hub   *hub
	relay cardsHost
}

// cardsStore is the store as the cards see it.
type cardsStore interface {
	recordStore
	cardStore
}

// cardsHost is what the cards ask of the rest of the relay: the owner's
// settings (relay.go), releasing a conversation's held schedule firings
// once its card for a prompt is allowed (schedule.go) and telling the
// console (notify.go).
type cardsHost interface {
	settings(ctx context.Context) (store.Settings, error)
	releaseHeld(ctx context.Context, setter string, approved bool)
	notify(ctx context.Context, what string)
	ownerNotice(ctx context.Context, event, sid, title, text string)
}

// cardNeed collects why a call needs the owner's approval (R5.2).
type cardNeed struct {
	reasons []string
	flags   []string // per-conversation flags set when the owner allows
	loop    bool     // the loop-protection count is reset when allowed
	// counted: this call's prompt is counted toward loop protection (taken
	// atomically by loopCard, or after an allowed loop card); giveBack undoes
	// it when the prompt is not sent after all.
	counted bool
	relay   string // the paired relay the action goes to ("" = this relay)
}

func (n *cardNeed) add(reason string) { n.reasons = append(n.reasons, reason) }

func (n *cardNeed) needed() bool { return len(n.reasons) > 0 }

// drop takes back a reason and the flag its Allow would set.
func (n *cardNeed) drop(flag, reason string) {
	n.flags = slices.DeleteFunc(n.flags, func(f string) bool { return f == flag })
	n.reasons = slices.DeleteFunc(n.reasons, func(r string) bool { return r == reason })
}

// modeCard adds the ask/plan mode reason to a write action's card (R5.2.3).
func modeCard(n *cardNeed, c *caller, action string) {
	if specOf(action).write {
		addModeReason(n, c)
	}
}

// addModeReason adds the ask/plan mode reason when the caller's conversation
// is in one of those modes.
func addModeReason(n *cardNeed, c *caller) {
	if c.s.Mode == "ask" || c.s.Mode == "plan" {
		n.add(fmt.Sprintf("This conversation is in %s mode: every write action needs your approval.", c.s.Mode))
	}
}

// loopCard adds loop protection (R5.2.6).
// The prompt is counted at once when the count allows it (check and count in
// one atomic step, R18.6); otherwise a card asks, and Allow resets the count
// and counts this prompt.
func (cd *cards) loopCard(ctx context.Context, n *cardNeed, c *caller) *Error {
	if c.remote != nil {
		return nil // counted on the caller's relay (R13.1)
	}
	taken, cnt, err := cd.st.TakeLoop(ctx, c.s.ID, cd.opts.Limits.AgentPromptsBeforeCard)
	if err != nil {
		return internal("loopCard: TakeLoop", err)
	}
	if taken {
		n.counted = true
		return nil
	}
	addLoopReason(n, cnt)
	return nil
}

// addLoopReason adds loop protection's reason: cnt prompts were counted.
func addLoopReason(n *cardNeed, cnt int) {
	n.add(fmt.Sprintf("Loop protection: this conversation has sent %d prompts to other agents since you last wrote in it.", cnt))
	n.loop = true
}

// giveBack undoes the loop count of a prompt that was not sent after all.
func (cd *cards) giveBack(ctx context.Context, n *cardNeed, c *caller) {
	if !n.counted {
		return
	}
	n.counted = false
	if err := cd.st.GiveBackLoop(context.WithoutCancel(ctx), c.s.ID); err != nil {
		cd.log.Warn("give back loop count", "session", c.s.ID, "err", err)
	}
}

// maxWait is the relay's longest wait per tool call.
func (cd *cards) maxWait(ctx context.Context) time.Duration {
	st, err := cd.relay.settings(ctx)
	d := defaultMaxWait
	if err == nil && st.MaxWaitSeconds > 0 {
		d = time.Duration(st.MaxWaitSeconds) * time.Second
	}
	if cd.opts.MaxWaitCap > 0 && d > cd.opts.MaxWaitCap {
		d = cd.opts.MaxWaitCap
	}
	return d
}

// cardAsk is one approval card's request: why it is needed, the action and
// the session it is on, what the card says, and the sentence that ends the
// error on a refusal ("Nothing was sent.").
type cardAsk struct {
	need    *cardNeed // no reasons: no card
	action  string
	target  *string  // the session the action is on, if any
	lines   []string // the card's lines, above need's reasons
	nothing string
}

// askCard shows an approval card in the caller's conversation and blocks
// until the owner decides or the longest wait runs out (R5.1). ask.nothing
// ends the error sentence on a denial.
func (cd *cards) askCard(ctx context.Context, c *caller, ask *cardAsk) *Error {
	if !ask.need.needed() || c.remote != nil {
		return nil // a paired relay's agent had its cards on its own relay (R13.1)
	}
	// An external session's call is its own live turn (R17.7): it blocks until the owner decides.
	if c.turn == nil && !isExternal(c.s) {
		return Errorf(CodeNoActiveTurn, "%s needs the owner's approval, and a card can only be asked inside a running turn of this conversation; this session's agent has no running turn now. %s %s", ask.action, useExternal, ask.nothing)
	}
	card := cd.newCard(c, ask)
	ch, unsub := cd.hub.sub("card:" + card.ID)
	defer unsub()
	if e := cd.postCard(ctx, c, card); e != nil {
		return e
	}
	return cd.awaitCard(ctx, c, ask, card.ID, ch)
}

// newCard makes the card of ask: on the relay the action runs on, its lines
// then need's reasons.
func (cd *cards) newCard(c *caller, ask *cardAsk) *store.Card {
	cardRelay := cd.opts.Name
	if ask.need.relay != "" {
		cardRelay = ask.need.relay
	}
	return &store.Card{ID: "card_" + store.NewID(8), Session: c.s.ID, Action: ask.action, Relay: cardRelay,
		Target: ask.target, Lines: append(append([]string{}, ask.lines...), ask.need.reasons...), CreatedAt: cd.now()}
}

// postCard saves the card and tells the owner's console, the owner and the
// MCP client's task that it waits.
func (cd *cards) postCard(ctx context.Context, c *caller, card *store.Card) *Error {
	if err := cd.st.SaveCard(ctx, card); err != nil {
		return internal("askCard: SaveCard", err)
	}
	if cd.met != nil {
		cd.met.CardDecided("asked")
	}
	cd.log.Info("card asked", "card", card.ID, "session", id8(c.s.ID), "action", card.Action)
	cd.relay.notify(ctx, "cards")
	// R23.10: the owner is told; R24.1: an MCP client that takes tasks has its task now.
	cd.relay.ownerNotice(ctx, relay.NoticeCard, c.s.ID, c.s.Title, card.Action+": "+strings.Join(card.Lines, " · "))
	waitBegins(ctx, card.ID, "")
	return nil
}

// awaitCard waits for the owner's decision on card id (ch rings when it is
// decided), the end of the call, or the longest wait.
func (cd *cards) awaitCard(ctx context.Context, c *caller, ask *cardAsk, id string, ch <-chan struct{}) *Error {
	deadline := cd.opts.Timers.NewTimer(cd.maxWait(ctx))
	defer deadline.Stop()
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	for {
		cur, err := cd.st.GetCard(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return internal("askCard: GetCard", err)
		}
		if cur != nil && cur.Decision != "" {
			return cd.cardDecided(ctx, c, ask, id, cur.Decision)
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-ctx.Done():
			cd.withdrawCard(id)
			return Errorf(CodePermission, "The call ended before the owner answered the approval card. %s", ask.nothing)
		case <-deadline.C():
			cd.withdrawCard(id)
			cd.recordDecision(c, ask, id, "timeout")
			return Errorf(CodePermission, "%s needs the owner's approval and the owner did not answer in time; the card was withdrawn. %s", ask.action, ask.nothing)
		}
	}
}

// recordDecision counts and logs the decision on card id.
func (cd *cards) recordDecision(c *caller, ask *cardAsk, id, decision string) {
	if cd.met != nil {
		cd.met.CardDecided(decision)
	}
	cd.log.Info("card decided", "card", id, "session", id8(c.s.ID), "action", ask.action, "decision", decision)
}

// cardDecided is the answer to the owner's decision on card id: a denial
// is an error, an allow records what it covers.
func (cd *cards) cardDecided(ctx context.Context, c *caller, ask *cardAsk, id, decision string) *Error {
	cd.recordDecision(c, ask, id, decision)
	if decision != "allow" {
		return Errorf(CodePermission, "The owner denied %s. %s", ask.action, ask.nothing)
	}
	for _, f := range ask.need.flags {
		if err := cd.st.SetFlag(ctx, c.s.ID, f); err != nil {
			return internal("askCard: SetFlag", err)
		}
	}
	if ask.need.loop {
		if err := cd.st.ResetLoop(ctx, c.s.ID); err != nil {
			return internal("askCard: ResetLoop", err)
		}
		if _, err := cd.st.IncrLoop(ctx, c.s.ID); err != nil {
			return internal("askCard: IncrLoop", err)
		}
		ask.need.counted = true
	}
	if specOf(ask.action).promptCard {
		cd.relay.releaseHeld(ctx, c.s.ID, true) // the owner allowed this agent's card for a prompt to another agent (R9.6)
	}
	return nil
}

func (cd *cards) withdrawCard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
	defer cancel()
	if _, _, err := cd.st.DecideCard(ctx, id, "withdrawn"); err != nil {
		cd.log.Warn("withdraw card", "card", id, "err", err)
	}
	cd.relay.notify(ctx, "cards") // the owner's console drops it (R19.6)
}

// Cards lists the pending approval cards (owner API).
func (cd *cards) Cards(ctx context.Context) ([]*store.Card, error) {
	return cd.st.PendingCards(ctx)
}

// DecideCard is the owner's Allow / Deny.
func (cd *cards) DecideCard(ctx context.Context, id, decision string) (*store.Card, error) {
	decision = strings.ToLower(strings.TrimSpace(decision))
	if decision != "allow" && decision != "deny" {
		return nil, Errorf(CodeInvalidInput, `decision must be "allow" or "deny" (got %q). Nothing was decided.`, decision)
	}
	c, ok, err := cd.st.DecideCard(ctx, id, decision)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No card %q. Nothing was decided.", id)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Errorf(CodeInvalidInput, "Card %s was already decided (%s). Nothing was changed.", id, c.Decision)
	}
	if err := cd.st.Notify(ctx, "card:"+id); err != nil {
		return nil, fmt.Errorf("announce the decision of card %s: %w", id, err)
	}
	return c, nil
}
