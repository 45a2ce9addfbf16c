package domain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// Peer tokens in the owner API (R18.20) and what a peer token reaches
// (R18.21).

// PeerTokens lists the peer tokens this relay issued (GET /api/v1/peer-tokens):
// id, the relay bound at first use, createdAt, lastUsedAt; never the token.
func (r *Relay) PeerTokens(ctx context.Context) ([]store.PeerTokenInfo, error) {
	return r.st.PeerTokens(ctx)
}

// RevokePeerToken revokes a peer token (DELETE /api/v1/peer-tokens/{id}): at
// once in every process (the "tokens" notification empties every process's
// token caches), and the relay name it was bound to is free again.
func (r *Relay) RevokePeerToken(ctx context.Context, id string) (*relay.PeerTokenRevoked, error) {
	ok, err := r.st.RevokePeerToken(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("revoke peer token %s: %w", id, err)
	}
	if !ok {
		return nil, Errorf(CodeNotFound, "No peer token %q. Nothing was revoked.", id)
	}
	r.dropTokens()
	if err := r.st.Notify(ctx, "tokens"); err != nil {
		r.log.Warn("peer token revoked, but other processes were not told (they notice within 30 s)", "err", err)
	}
	r.log.Info("peer token revoked", "id", id)
	return &relay.PeerTokenRevoked{ID: strings.ToLower(id), Revoked: true}, nil
}

// peerTouchEvery is how often a process records a peer token's lastUsedAt.
const peerTouchEvery = time.Minute

// touchPeerToken records that tok was used, at most once a minute per process.
func (r *Relay) touchPeerToken(ctx context.Context, tok string) {
	now := time.Now()
	r.peerTokMu.Lock()
	e, ok := r.peerToks[tok]
	due := ok && now.Sub(e.touched) >= peerTouchEvery
	if due {
		e.touched = now
		r.peerToks[tok] = e
	}
	r.peerTokMu.Unlock()
	if due {
		if err := r.st.TouchPeerToken(ctx, tok, r.now()); err != nil {
			r.log.Warn("record a peer token's last use", "err", err)
		}
	}
}

// peerBound is the relay a peer token is bound to ("" before its first call).
func (r *Relay) peerBound(ctx context.Context, tok string) (string, error) {
	r.peerTokMu.Lock()
	e := r.peerToks[tok]
	r.peerTokMu.Unlock()
	if e.bound != "" {
		return e.bound, nil
	}
	return r.st.PeerTokenRelay(ctx, tok)
}

// peerOwns reports whether a conversation id here is a stand-in of relay's.
func peerOwns(relay, conv string) bool {
	return relay != "" && strings.HasPrefix(strings.ToLower(conv), PeerWatcherPrefix+strings.ToLower(relay)+":")
}

// PeerInbox answers GET /peer/v1/inbox: the open asks the token's relay's
// conversations made here, for that relay's inbox. Never the asks this
// relay's own agents put to their owner (R18.21).
func (r *Relay) PeerInbox(ctx context.Context, tok string) ([]*relay.InboxAsk, error) {
	bound, err := r.peerBound(ctx, tok)
	if err != nil {
		return nil, err
	}
	all, err := r.Inbox(ctx)
	if err != nil {
		return nil, err
	}
	out := []*relay.InboxAsk{}
	for _, a := range all {
		if peerOwns(bound, a.Asker) {
			out = append(out, a)
		}
	}
	return out, nil
}

// PeerAnswer answers an ask of this relay from a paired relay's inbox: only
// an ask the token's relay's conversation made here (R18.21); any other is
// not found.
func (r *Relay) PeerAnswer(ctx context.Context, tok, id string, in InboxAnswer, via string) (*relay.AskAnswered, error) {
	bound, err := r.peerBound(ctx, tok)
	if err != nil {
		return nil, err
	}
	ak, err := r.st.GetAsk(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !peerOwns(bound, ak.Asker)) {
		return nil, Errorf(CodeNotFound, "No ask %q. Nothing was done.", id)
	}
	if err != nil {
		return nil, err
	}
	in.Via = via
	return r.AnswerAsk(ctx, id, in)
}
