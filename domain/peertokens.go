package domain

import (
	"context"
	"errors"
	"strings"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// What a peer token reaches (R18.21). The peer tokens themselves, in the
// owner API (R18.20), are the tokens subsystem's (tokens.go).

// peerOwns reports whether a conversation id here is a stand-in of relay's.
func peerOwns(relay, conv string) bool {
	return relay != "" && strings.HasPrefix(strings.ToLower(conv), PeerWatcherPrefix+strings.ToLower(relay)+":")
}

// PeerInbox answers GET /peer/v1/inbox: the open asks the token's relay's
// conversations made here, for that relay's inbox. Never the asks this
// relay's own agents put to their owner (R18.21).
func (r *Relay) PeerInbox(ctx context.Context, tok string) ([]*relay.InboxAsk, error) {
	bound, err := r.tok.peerBound(ctx, tok)
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
	bound, err := r.tok.peerBound(ctx, tok)
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
