package web

import (
	"context"

	"github.com/oar/relay"
)

// reads is what one page request read through the domain: the page, the
// sessions list beside it and the nav's counts all need the pending cards,
// the question cards, the open asks and the active sessions, and each is
// read once per request (a live refresh renders the whole page again).
type reads struct {
	active    cached[[]*relay.SessionItem]
	cards     cached[[]*relay.Card]
	questions cached[[]questionView]
	inbox     cached[[]*relay.InboxAsk]
	schedules cached[[]*relay.Schedule]
}

// cached is a value read once; a failed read is tried again.
type cached[T any] struct {
	v  T
	ok bool
}

func (c *cached[T]) get(read func() (T, error)) (T, error) {
	if !c.ok {
		v, err := read()
		if err != nil {
			return v, err
		}
		c.v, c.ok = v, true
	}
	return c.v, nil
}

func (c *console) activeSessions(ctx context.Context, v *view) ([]*relay.SessionItem, error) {
	return v.rd.active.get(func() ([]*relay.SessionItem, error) {
		items, _, err := c.r.SessionList(ctx, "active", listLimit)
		return items, err
	})
}

func (c *console) allCards(ctx context.Context, v *view) ([]*relay.Card, error) {
	return v.rd.cards.get(func() ([]*relay.Card, error) { return c.r.Cards(ctx) })
}

// allQuestions lists the pending question cards of the active sessions.
func (c *console) allQuestions(ctx context.Context, v *view) ([]questionView, error) {
	return v.rd.questions.get(func() ([]questionView, error) {
		sessions, err := c.activeSessions(ctx, v)
		if err != nil {
			return nil, err
		}
		return c.questions(ctx, sessions)
	})
}

func (c *console) inbox(ctx context.Context, v *view) ([]*relay.InboxAsk, error) {
	return v.rd.inbox.get(func() ([]*relay.InboxAsk, error) { return c.r.Inbox(ctx) })
}

func (c *console) schedules(ctx context.Context, v *view) ([]*relay.Schedule, error) {
	return v.rd.schedules.get(func() ([]*relay.Schedule, error) { return c.r.Schedules(ctx) })
}
