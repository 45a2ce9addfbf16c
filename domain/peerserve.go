package domain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay/store"
)

// The peer protocol's serving side (§13): what another relay's agents may do
// here, under this relay's rules.

// PeerWatcherPrefix starts the stand-in id of a paired relay's conversation
// here (the watcher of its subscriptions, the asker of its asks).
const PeerWatcherPrefix = "peer:"

func peerConversation(relay, session string) string {
	return PeerWatcherPrefix + relay + ":" + session
}

// isPeerConversation reports a stand-in id: nothing is delivered to it here;
// its relay polls (R8.20, R10.5).
func isPeerConversation(id string) bool { return strings.HasPrefix(id, PeerWatcherPrefix) }

// PeerHello answers GET /peer/v1/hello (R13.3).
func (r *Relay) PeerHello(ctx context.Context) (Hello, error) {
	inst, err := r.st.Instance(ctx)
	if err != nil {
		return Hello{}, fmt.Errorf("answer a peer hello: %w", err)
	}
	pub := r.drainer.publicURL(ctx) // none known: left out (R23.8)
	return Hello{Name: r.opts.Name, Version: r.opts.Version, Instance: inst, Features: PeerFeatures, PublicURL: pub}, nil
}

// PeerCall performs POST /peer/v1/call: an action for an agent of a paired
// relay (R13.1). tok is the peer token the call came with: the first call
// ties it to the calling relay's name, and it never speaks for another.
func (r *Relay) PeerCall(ctx context.Context, tok string, raw []byte) (json.RawMessage, bool) {
	start := time.Now()
	action, c, a, e := r.peerCaller(ctx, tok, raw)
	if e != nil {
		sid := ""
		if c != nil {
			sid = c.s.ID
		}
		return r.envelope(action, sid, start, nil, e)
	}
	res, e := r.peerCheck(ctx, c, a)
	if e == nil {
		res, e = r.runLocal(ctx, c, a)
	}
	o := c.remote
	if e == nil && a.spec().promptsSession && res.session != "" {
		// A session its agents prompted: a "started" peer token reaches it (R18.35).
		if err := r.st.AddPeerPrompted(context.WithoutCancel(ctx), o.Relay, res.session); err != nil {
			r.log.Warn("record a session a paired relay prompted", "from", o.Relay, "session", id8(res.session), "err", err)
		}
	}
	if e != nil {
		r.log.Info("peer call refused", "action", action, "from", o.Relay, "code", e.Code)
	} else {
		r.log.Info("peer call", "action", action, "from", o.Relay, "session", id8(o.Session))
	}
	return r.envelope(action, c.s.ID, start, res, e)
}

// peerCaller reads a peer request's body {action, args, origin} (call and
// check): the origin must name a relay and a session, never this relay, and
// the token speaks only for the relay it was first tied to. It returns the
// action as the metrics name it, the stand-in caller and the arguments.
func (r *Relay) peerCaller(ctx context.Context, tok string, raw []byte) (string, *caller, *args, *Error) {
	var body PeerCallBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&body); err != nil {
		return "unknown", nil, nil, Errorf(CodeInvalidInput, "The peer call is not valid JSON ({action, args, origin}). Nothing was done.")
	}
	if body.Origin.Relay == "" || body.Origin.Session == "" {
		return "unknown", nil, nil, Errorf(CodeInvalidInput, "The peer call names no origin relay and session. Nothing was done.")
	}
	action := body.Action
	if !isAction(action) {
		action = "unknown"
	}
	bound, e := r.bindOrigin(ctx, tok, body.Origin.Relay)
	if e != nil {
		return action, nil, nil, e
	}
	m := map[string]json.RawMessage{}
	for k, v := range body.Args {
		m[k] = v
	}
	m["action"] = quoteJSON(body.Action)
	m["relay"] = quoteJSON("this")
	argRaw, err := json.Marshal(m)
	if err != nil {
		return action, nil, nil, internal("peerCaller: Marshal", err)
	}
	a, e := parseArgs(argRaw)
	if e != nil {
		return action, nil, nil, e
	}
	// The calling relay capped wait_seconds by its own longest wait (R7.11).
	a.peer = true
	o := body.Origin
	c := &caller{s: &store.Session{ID: peerConversation(o.Relay, o.Session), Title: o.Title, Model: o.Model, Mode: "agent"}, remote: &o}
	if a.spec().creates && !a.has("provider") {
		// R7.9: what the agent leaves out follows the caller's session where
		// this relay offers it: a provider with the caller's model, else the first.
		c.s.Provider = r.peerProvider(a, o.Model)
	}
	if e := r.scopeReach(ctx, tok, bound, c, a); e != nil {
		return action, c, a, e
	}
	return action, c, a, nil
}

// bindOrigin checks the relay a peer request speaks for: never this relay,
// and only the one its token was first tied to (the first call ties it). It
// returns the relay the token is tied to.
func (r *Relay) bindOrigin(ctx context.Context, tok, from string) (string, *Error) {
	if strings.EqualFold(from, r.opts.Name) || strings.EqualFold(from, "this") {
		r.log.Warn("peer call refused: it claims this relay's own name", "from", from)
		return "", Errorf(CodeAuth, "A paired relay cannot speak as %q: that is this relay's own name. Nothing was done.", from)
	}
	bound, err := r.tokens.bindPeerToken(ctx, tok, from)
	if errors.Is(err, store.ErrRelayNameTaken) {
		r.log.Warn("peer call refused: another peer token holds this relay's name", "from", from)
		return "", Errorf(CodeAuth, "Relay %q is paired here with another peer token; this token cannot speak for it. Nothing was done.", from)
	}
	if err != nil {
		return "", internal("peerCaller: bindPeerToken", err)
	}
	if !strings.EqualFold(bound, from) {
		r.log.Warn("peer call refused: the token belongs to another relay", "from", from, "token_of", bound)
		return "", Errorf(CodeAuth, "This peer token belongs to relay %q; it cannot speak for relay %q. Nothing was done.", bound, from)
	}
	return bound, nil
}

// peerProvider picks the provider a paired relay's agent's session runs on
// when it names none: one that offers the caller's model; else the first,
// passed as the provider argument (its default model, not the caller's).
func (r *Relay) peerProvider(a *args, model string) string {
	ids := r.models.ids()
	for _, id := range ids {
		if model != "" && contains(r.models.providers[id].Info().Models, model) {
			return id
		}
	}
	if len(ids) > 0 {
		a.m["provider"] = quoteJSON(ids[0])
	}
	return ""
}

// acceptGated reports a call the accept setting switches off (R4.6).
func acceptGated(a *args) bool { return a.spec().acceptGated || a.intoSession() }

// peerCheck applies this relay's rules for another relay's agents before the action.
func (r *Relay) peerCheck(ctx context.Context, c *caller, a *args) (*result, *Error) {
	if a.spec().localOnly {
		return nil, Errorf(CodeUnsupported, "Schedules work on the agent's own relay only. Nothing was done.")
	}
	if a.asksHere() {
		return nil, Errorf(CodeInvalidInput, "An ask from another relay needs session: the session here it is about. Nothing was asked.")
	}
	st, err := r.settings(ctx)
	if err != nil {
		return nil, internal("peerCheck: settings", err)
	}
	if !st.AcceptAgentPrompts && acceptGated(a) {
		return nil, Errorf(CodeNotAccepting, "Relay %q does not accept prompts from other relays' agents: its owner turned that off. Listing and reading sessions, reading task output, wait, relay_info and usage still work. Nothing was done.", r.opts.Name)
	}
	if promptsAgent(a) {
		o := c.remote
		path := o.Path
		if len(path) == 0 || !strings.EqualFold(path[len(path)-1], o.Relay) {
			path = append(append([]string{}, path...), o.Relay)
		}
		if e := hopCheck(store.Origin{Path: path, Unlocked: o.Unlocked}, r.opts.Name, r.opts.Limits.Hops); e != nil {
			return nil, e
		}
	}
	return nil, nil
}

// PeerEventsFor answers GET /peer/v1/events (R13.2): the events of a
// subscription a paired relay's conversation holds here, after a cursor,
// waiting up to wait for the first one.
func (r *Relay) PeerEventsFor(ctx context.Context, tok, subID, after string, wait time.Duration) (*PeerEvents, error) {
	sub, err := r.st.GetSubscription(ctx, subID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !isPeerConversation(sub.Watcher)) {
		return nil, Errorf(CodeNotFound, "No subscription %q of another relay's agent here.", subID)
	}
	if err != nil {
		return nil, err
	}
	// Only the relay whose conversation holds it reads it (the token's relay).
	bound, err := r.tokens.peerBound(ctx, tok)
	if err != nil {
		return nil, err
	}
	if !peerOwns(bound, sub.Watcher) {
		return nil, Errorf(CodeNotFound, "No subscription %q of another relay's agent here.", subID)
	}
	if wait > 25*time.Second {
		wait = 25 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		evs, cursor, err := r.keptSubEvents(ctx, subID, after)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 || sub.EndReason != "" || !time.Now().Before(deadline) {
			out := &PeerEvents{Events: evs, Cursor: cursor}
			if len(evs) < peerEventsBatch {
				out.Ended = sub.EndReason
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return &PeerEvents{Events: []store.Event{}, Cursor: after}, nil
		case <-time.After(250 * time.Millisecond):
		}
		// A token revoked while its poll is open ends the poll (R18.20): the
		// revoke's "tokens" notification empties the cache, so this asks the
		// store again and finds it gone.
		if ok, err := r.PeerTokenValid(ctx, tok); err == nil && !ok {
			return nil, Errorf(CodeAuth, "This peer token was revoked.")
		}
		if s2, err := r.st.GetSubscription(ctx, subID); err == nil {
			sub = s2
		}
	}
}

// keptSubEvents reads up to peerEventsBatch events of a subscription's
// stream after a cursor, leaving out those that happened longer than
// replay_keep ago: each event is kept 7 days from when it happened, however
// many came after it (R8.21, R13.2; the stream's own expiry starts again
// with every event). The cursor passes what was left out; a full batch
// means more may follow.
func (r *Relay) keptSubEvents(ctx context.Context, subID, after string) ([]store.Event, string, error) {
	keep := r.opts.Timing.ReplayKeep
	out := []store.Event{}
	for {
		want := int64(peerEventsBatch - len(out))
		evs, cursor, err := r.st.SubEvents(ctx, subID, after, want)
		if err != nil {
			return nil, after, err
		}
		cutoff := r.now().Add(-keep)
		for _, ev := range evs {
			if keep > 0 && ev.At.Before(cutoff) {
				continue
			}
			out = append(out, ev)
		}
		after = cursor
		if int64(len(evs)) < want || len(out) == peerEventsBatch {
			return out, after, nil
		}
	}
}
