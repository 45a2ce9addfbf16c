package domain

import (
	"context"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// The doors: the Relay's methods that hand a call to one of its subsystems
// (api, web, the worker and the subsystems' hosts reach them through these).

// ---- asks.go

// Inbox (the asks' door for api, web and the peer routes): see
// [asks.Inbox].
func (r *Relay) Inbox(ctx context.Context) ([]*relay.InboxAsk, error) { return r.asks.Inbox(ctx) }

// RemoteAskCount (the asks' door for web): see [asks.RemoteAskCount].
func (r *Relay) RemoteAskCount(ctx context.Context) (int, error) { return r.asks.RemoteAskCount(ctx) }

// AnswerAsk (the asks' door for api and the peer routes): see
// [asks.AnswerAsk].
func (r *Relay) AnswerAsk(ctx context.Context, id string, in InboxAnswer) (*relay.AskAnswered, error) {
	return r.asks.AnswerAsk(ctx, id, in)
}

// ---- cards.go

// Cards (the cards' door for api and web): see [cards.Cards].
func (r *Relay) Cards(ctx context.Context) ([]*store.Card, error) { return r.cards.Cards(ctx) }

// DecideCard (the cards' door for api): see [cards.DecideCard].
func (r *Relay) DecideCard(ctx context.Context, id, decision string) (*store.Card, error) {
	return r.cards.DecideCard(ctx, id, decision)
}

// ---- create.go

// checkFolder applies the folders rule (the door for the owner's sessions
// and update_session).
func (r *Relay) checkFolder(dir, nothing string) (string, *Error) {
	return r.creates.checkFolder(dir, nothing)
}

// folderAllowed checks a session's folder after symbolic links (the door
// for the drain's host).
func (r *Relay) folderAllowed(dir string) (resolved, why string) { return r.creates.folderAllowed(dir) }

// ---- drainer.go

// Drain runs the next queued turn of a session (the drain's door for tests
// and tools; jobs come through RunJob).
func (r *Relay) Drain(ctx context.Context, sid string) error { return r.drainer.Drain(ctx, sid) }

// Shutdown hands this process's running turns back to their queues; call it
// before stopping the worker (graceful shutdown, nothing lost).
func (r *Relay) Shutdown() { r.drainer.Shutdown() }

// ---- groups.go

// CreateGroup is the owner's POST /groups (the groups' door).
func (r *Relay) CreateGroup(ctx context.Context, name string) (*relay.GroupCreated, error) {
	return r.groups.CreateGroup(ctx, name)
}

// Groups lists every group for the owner, empty ones too.
func (r *Relay) Groups(ctx context.Context) ([]*relay.Group, error) { return r.groups.Groups(ctx) }

// RenameGroup is the owner's PATCH /groups/{id}.
func (r *Relay) RenameGroup(ctx context.Context, id, name string) (*relay.Group, error) {
	return r.groups.RenameGroup(ctx, id, name)
}

// SetGroupOrder is the owner's PUT /groups/order (R23.7).
func (r *Relay) SetGroupOrder(ctx context.Context, ids []string) ([]*relay.Group, error) {
	return r.groups.SetGroupOrder(ctx, ids)
}

// DissolveGroup is the owner's DELETE /groups/{id}.
func (r *Relay) DissolveGroup(ctx context.Context, id string) (*relay.GroupDissolved, error) {
	return r.groups.DissolveGroup(ctx, id)
}

// ---- pairing.go

// Pair pairs this relay with another (POST /api/v1/relays; the link's door).
func (r *Relay) Pair(ctx context.Context, in PairRequest) (*relay.PairedRelay, error) {
	return r.link.Pair(ctx, in)
}

// Relays lists the pairings (GET /api/v1/relays).
func (r *Relay) Relays(ctx context.Context) ([]*relay.PairedRelay, error) { return r.link.Relays(ctx) }

// PatchRelay changes a pairing's level, URL or token.
func (r *Relay) PatchRelay(ctx context.Context, name string, in RelayPatch) (*relay.PairedRelay, error) {
	return r.link.PatchRelay(ctx, name, in)
}

// Unpair removes a pairing (DELETE /api/v1/relays/{name}).
func (r *Relay) Unpair(ctx context.Context, name string) (*relay.Unpaired, error) {
	return r.link.Unpair(ctx, name)
}

// ---- pipeline.go

// Fanout fans an event out to the subscriptions that take it (the fan-out
// job's work; RunJob is the door, bench calls it directly).
func (r *Relay) Fanout(ctx context.Context, ev *store.Event) error { return r.pipeline.Fanout(ctx, ev) }

// ---- queue.go

// queue is the door to the turn queue for the delivery pipeline's host (the
// event prompt): the pipeline is built before the turn queue, which points
// to it.
func (r *Relay) queue(ctx context.Context, p prompt) (*store.Turn, error) {
	return r.turns.queue(ctx, p)
}

// ---- reads.go

// Sessions names several sessions in one read (the reads' door for web).
func (r *Relay) Sessions(ctx context.Context, ids []string) ([]*relay.SessionRef, error) {
	return r.reads.Sessions(ctx, ids)
}

// ---- remote.go

func (r *Relay) endMirror(ctx context.Context, s *store.Subscription, reason string) {
	r.remote.endMirror(ctx, s, reason)
}

func (r *Relay) remoteUnsubscribe(ctx context.Context, p *store.Pairing, s *store.Subscription) bool {
	return r.remote.remoteUnsubscribe(ctx, p, s)
}

func (r *Relay) remoteWithdraw(ctx context.Context, p *store.Pairing, a *store.RemoteAsk) bool {
	return r.remote.remoteWithdraw(ctx, p, a)
}

func (r *Relay) unsubscribeMirror(ctx context.Context, sub *store.Subscription) (*relay.Ended, error) {
	return r.remote.unsubscribeMirror(ctx, sub)
}

// ---- schedule.go

// RecoverSchedules (the schedules' door for app at start): see
// [schedules.RecoverSchedules].
func (r *Relay) RecoverSchedules(ctx context.Context) error { return r.schedules.RecoverSchedules(ctx) }

// Schedules lists the active schedules (the owner's view).
func (r *Relay) Schedules(ctx context.Context) ([]*relay.Schedule, error) {
	return r.schedules.Schedules(ctx)
}

// CancelSchedule ends a schedule as the owner.
func (r *Relay) CancelSchedule(ctx context.Context, id string) (*relay.Ended, error) {
	return r.schedules.CancelSchedule(ctx, id)
}

// releaseHeld (the schedules' door for the cards, cardsHost): see
// [schedules.releaseHeld].
func (r *Relay) releaseHeld(ctx context.Context, setter string, approved bool) {
	r.schedules.releaseHeld(ctx, setter, approved)
}

// ---- steer.go

// AnswerQuestion is the owner's answer to a question card (owner API).
func (r *Relay) AnswerQuestion(ctx context.Context, sid, qid string, choices []string, answer string) (*store.Question, error) {
	return r.steer.answerOwner(ctx, sid, qid, choices, answer)
}

// StopTurn stops a session's running turn (the owner's Stop); queued
// prompts stay queued (R7.15).
func (r *Relay) StopTurn(ctx context.Context, sid string) (bool, error) {
	return r.steer.stopTurn(ctx, sid)
}

// Archive archives a session: its running turn stops and queued prompts are dropped when reached.
func (r *Relay) Archive(ctx context.Context, sid string) error {
	return r.steer.retire(ctx, sid, "archived")
}

// ---- subscribe.go

// Unsubscribe (the subscriptions' door for api): see
// [subscriptions.Unsubscribe].
func (r *Relay) Unsubscribe(ctx context.Context, id string) (*relay.Ended, error) {
	return r.subs.Unsubscribe(ctx, id)
}

// endSubscription (the subscriptions' door for the pipeline, pipelineHost):
// see [subscriptions.endSubscription].
func (r *Relay) endSubscription(ctx context.Context, sub *store.Subscription, reason string) error {
	return r.subs.endSubscription(ctx, sub, reason)
}

// ---- tokens.go

// SessionForToken (the tokens' door for api's /mcp): see [tokens.SessionForToken].
func (r *Relay) SessionForToken(ctx context.Context, token string) (string, bool, error) {
	return r.tokens.SessionForToken(ctx, token)
}

// NewPeerToken issues a peer token (POST /api/v1/peer-tokens) of a scope:
// "all" (also ""), or "started" (R18.35).
func (r *Relay) NewPeerToken(ctx context.Context, label, scope string) (*relay.PeerTokenIssued, error) {
	return r.tokens.NewPeerToken(ctx, label, scope)
}

// PeerTokenValid reports whether a bearer token is a peer token of this relay.
func (r *Relay) PeerTokenValid(ctx context.Context, tok string) (bool, error) {
	return r.tokens.PeerTokenValid(ctx, tok)
}

// PeerTokens lists the peer tokens this relay issued (GET /api/v1/peer-tokens).
func (r *Relay) PeerTokens(ctx context.Context) ([]store.PeerTokenInfo, error) {
	return r.tokens.PeerTokens(ctx)
}

// RevokePeerToken revokes a peer token (DELETE /api/v1/peer-tokens/{id}).
func (r *Relay) RevokePeerToken(ctx context.Context, id string) (*relay.PeerTokenRevoked, error) {
	return r.tokens.RevokePeerToken(ctx, id)
}
