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
	bound, err := r.tokens.peerBound(ctx, tok)
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
	bound, err := r.tokens.peerBound(ctx, tok)
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

// peerReach is what an agent of a paired relay whose peer token has scope
// "started" reaches (R18.35): the sessions that relay's agents started here
// (startedBy) or prompted (send).
type peerReach struct {
	relay    string
	prompted map[string]bool
}

// has reports whether the caller reaches session s; a nil reach reaches every one.
func (p *peerReach) has(s *store.Session) bool {
	if p == nil {
		return true
	}
	return (s.StartedBy != nil && strings.EqualFold(s.StartedBy.Relay, p.relay)) || p.prompted[s.ID]
}

// scopeReach sets what a peer call reaches by its token's scope (R18.35)
// and refuses, before anything else, a call naming a session it does not
// reach: such a session is not found, as if it were not there. Calls of a
// token with the default scope reach every session as the rules allow.
func (r *Relay) scopeReach(ctx context.Context, tok, bound string, c *caller, a *args) *Error {
	scope, err := r.tokens.peerScope(ctx, tok)
	if err != nil {
		return internal("scopeReach: peerScope", err)
	}
	if scope != store.PeerScopeStarted {
		return nil
	}
	if c.reach, err = r.startedReach(ctx, bound); err != nil {
		return internal("scopeReach: PeerPrompted", err)
	}
	return r.reachesNamed(ctx, c.reach, a)
}

// reachesNamed refuses a call that names a session reach does not reach,
// in its session or a subscribe's sessions, or an answer_question that
// names no session (R18.35).
func (r *Relay) reachesNamed(ctx context.Context, reach *peerReach, a *args) *Error {
	if a.action == "answer_question" && !a.has("session") {
		return Errorf(CodeInvalidInput, "answer_question on relay %q needs session: the session whose question it answers (this relay reaches only the sessions your relay's agents started or prompted). %s", r.opts.Name, nothingSent)
	}
	if ref, _ := a.str("session"); ref != "" {
		if e := r.reaches(ctx, reach, ref); e != nil {
			return e
		}
	}
	if actionKnown[a.action]["sessions"] { // subscribe's sessions to watch
		return r.reachesSubscribed(ctx, reach, a)
	}
	return nil
}

// startedReach is what agents of the paired relay bound reach with a token
// of scope "started" (R18.35): the sessions they started or prompted here.
func (r *Relay) startedReach(ctx context.Context, bound string) (*peerReach, error) {
	ids, err := r.st.PeerPrompted(ctx, bound)
	if err != nil {
		return nil, err
	}
	reach := &peerReach{relay: bound, prompted: map[string]bool{}}
	for _, id := range ids {
		reach.prompted[id] = true
	}
	return reach, nil
}

// reaches refuses the session ref when reach does not reach it: to the
// caller it is not found (R18.35).
func (r *Relay) reaches(ctx context.Context, reach *peerReach, ref string) *Error {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return e
	}
	if !reach.has(s) {
		return Errorf(CodeNotFound, "Relay %q has no session %q. Nothing was done.", r.opts.Name, normRef(ref))
	}
	return nil
}

// reachesSubscribed refuses a subscribe naming "all" or a session reach
// does not reach (R18.35).
func (r *Relay) reachesSubscribed(ctx context.Context, reach *peerReach, a *args) *Error {
	refs, _ := a.strs("sessions")
	for _, ref := range refs {
		if strings.EqualFold(ref, "all") {
			return Errorf(CodeForbidden, "Relay %q lets your relay's agents reach only the sessions they started or prompted here; name those sessions instead of \"all\". %s", r.opts.Name, nothingSubscribed)
		}
		if e := r.reaches(ctx, reach, ref); e != nil {
			return e
		}
	}
	return nil
}

// reachable keeps of sessions those c reaches (R18.35).
func (c *caller) reachable(ss []*store.Session) []*store.Session {
	if c.reach == nil {
		return ss
	}
	out := ss[:0:0]
	for _, s := range ss {
		if s != nil && c.reach.has(s) {
			out = append(out, s)
		}
	}
	return out
}
