package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/peer"
	"github.com/oar/relay/store"
)

// The peer protocol's client side (§13) is package peer: hello, call, check,
// the event stream of a subscription and the inbox on a paired relay, over
// HTTP. The domain asks it through PeerClient and reads the answers here.

// peerLink is the paired relays' link subsystem (§13): the requests to
// them (PeerClient, each counted and its error read as the domain's), the
// link state this process last recorded per relay (R13.4), hello (R13.1a),
// and the poller of remote subscriptions, asks and link state (peerpoll.go,
// on a bounded pool). It sees the store only as recordStore and peerStore,
// delivers polled events through the pipeline, and reaches the rest of the
// relay only through peerLinkHost.
type peerLink struct {
	st       peerLinkStore
	peers    PeerClient
	log      *slog.Logger
	met      Metrics
	opts     *Options // the relay's: name, timing
	now      func() time.Time
	pipeline *pipeline
	relay    peerLinkHost

	linkMu     sync.Mutex
	linkOnline map[string]time.Time // paired relay (lower case) -> when this process last recorded it online (link)
	pollWake   chan struct{}        // a token when this process paired a relay (peerLoop rests while nothing is paired)
}

// peerLinkStore is the store as the link sees it.
type peerLinkStore interface {
	recordStore
	peerStore
}

// peerLinkHost is what the link asks of the rest of the relay: end a
// remote subscription's mirror (remote.go), unsubscribe or withdraw an ask
// on a paired relay (mirrors.go) and tell the console (notify.go).
type peerLinkHost interface {
	endMirror(ctx context.Context, s *store.Subscription, reason string)
	remoteUnsubscribe(ctx context.Context, p *store.Pairing, s *store.Subscription) bool
	remoteWithdraw(ctx context.Context, p *store.Pairing, a *store.RemoteAsk) bool
	notify(ctx context.Context, what string)
}

// PeerFeatures are what this relay serves on /peer/v1 (R13.3).
var PeerFeatures = []string{"call", "events", "asks", "inbox", "exclude", "task_output", "update_session", "billing_switch", "groups", "check"}

const (
	helloTimeout    = peer.HelloTimeout // R13.1a: pairing tries hello for 5 s
	peerEventsBatch = peer.EventsBatch  // events per poll request
)

// The protocol's wire types, the package peer's: both sides use them.
type (
	// Hello is a relay's answer to GET /peer/v1/hello.
	Hello = peer.Hello
	// PeerOrigin is the calling agent and its chain, sent with every call (R13.1, R4.7, R4.8).
	PeerOrigin = peer.Origin
	// PeerCallBody is the body of POST /peer/v1/call.
	PeerCallBody = peer.CallBody
	// PeerEvents is the answer of GET /peer/v1/events.
	PeerEvents = peer.Events
)

// PeerClient is what the domain asks of paired relays: one method per
// request of the peer protocol. An error is a *peer.Error (its code is one
// of this package's) or an unexpected failure (REMOTE_RELAY_INTERNAL).
// Package peer's Client is the one a process uses (app wires it,
// Options.Peers); tests may give another.
type PeerClient interface {
	Hello(ctx context.Context, to peer.Target, timeout time.Duration) (*peer.Hello, error)
	CallRaw(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]json.RawMessage, error)
	Check(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]json.RawMessage, error)
	Events(ctx context.Context, to peer.Target, sub, after string, wait, timeout time.Duration) (*peer.Events, error)
	Inbox(ctx context.Context, to peer.Target, timeout time.Duration) ([]map[string]json.RawMessage, error)
	AnswerInbox(ctx context.Context, to peer.Target, id string, in peer.InboxAnswer, timeout time.Duration) (map[string]json.RawMessage, error)
}

// noPeers is the PeerClient of a Relay built without one: no paired relay
// can be reached.
type noPeers struct{}

func (noPeers) fail(to peer.Target) error {
	return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q cannot be reached: this process has no peer client. Nothing was done.", to.Name)}
}

func (n noPeers) Hello(_ context.Context, to peer.Target, _ time.Duration) (*peer.Hello, error) {
	return nil, n.fail(to)
}

func (n noPeers) CallRaw(_ context.Context, to peer.Target, _ peer.CallBody, _ time.Duration) (map[string]json.RawMessage, error) {
	return nil, n.fail(to)
}

func (n noPeers) Check(_ context.Context, to peer.Target, _ peer.CallBody, _ time.Duration) (map[string]json.RawMessage, error) {
	return nil, n.fail(to)
}

func (n noPeers) Events(_ context.Context, to peer.Target, _, _ string, _, _ time.Duration) (*peer.Events, error) {
	return nil, n.fail(to)
}

func (n noPeers) Inbox(_ context.Context, to peer.Target, _ time.Duration) ([]map[string]json.RawMessage, error) {
	return nil, n.fail(to)
}

func (n noPeers) AnswerInbox(_ context.Context, to peer.Target, _ string, _ peer.InboxAnswer, _ time.Duration) (map[string]json.RawMessage, error) {
	return nil, n.fail(to)
}

// peerTarget is where a pairing's requests go.
func peerTarget(p *store.Pairing) peer.Target {
	return peer.Target{Name: p.Name, URL: p.URL, Token: p.Token}
}

// peerMetrics is what the metrics count of peer requests (paired-relay link
// state and poll errors, §16).
type peerMetrics interface{ PeerRequest(kind, code string) }

// peerDone is a peer request's error as the domain's, counted by kind
// (hello, call, check, events, inbox) and outcome.
func (pk *peerLink) peerDone(kind string, err error) *Error {
	var e *Error
	if err != nil {
		var pe *peer.Error
		if errors.As(err, &pe) {
			// The code of another relay's error answer is data (R18.32).
			e = closedPeerError(&Error{Code: pe.Code, Msg: pe.Msg})
		} else {
			e = internal("peer request", err)
		}
	}
	if pm, ok := pk.met.(peerMetrics); ok {
		code := "ok"
		if e != nil {
			code = e.Code
		}
		pm.PeerRequest(kind, code)
	}
	return e
}

// hello asks a relay who it is.
func (pk *peerLink) hello(ctx context.Context, name, base, token string, timeout time.Duration) (*Hello, *Error) {
	h, err := pk.peers.Hello(ctx, peer.Target{Name: name, URL: base, Token: token}, timeout)
	if e := pk.peerDone("hello", err); e != nil {
		return nil, e
	}
	if h.Name == "" {
		return nil, Errorf(CodeOffline, "Relay %q answered hello without a name: it is not a relay. Nothing was done.", name)
	}
	return h, nil
}

// linkRefresh is how often a process records again that a paired relay it
// keeps reaching answered (its "seen" time): not on every call.
const linkRefresh = time.Second

// link records whether a paired relay answered (list_relays shows it).
func (pk *peerLink) link(ctx context.Context, p *store.Pairing, e *Error) {
	online, reason := e == nil, ""
	if e != nil {
		if e.Code != CodeOffline && e.Code != CodeAuth {
			return // it answered: a refusal under its rules says nothing about the link
		}
		reason = e.Msg
	}
	key := strings.ToLower(p.Name)
	pk.linkMu.Lock()
	if at, ok := pk.linkOnline[key]; online && ok && time.Since(at) < linkRefresh {
		pk.linkMu.Unlock()
		return // recorded online by this process a moment ago
	}
	delete(pk.linkOnline, key) // set again once this write is done
	pk.linkMu.Unlock()
	changed, err := pk.st.SetLink(context.WithoutCancel(ctx), p.Name, online, pk.now(), reason)
	if err != nil {
		pk.log.Warn("record link state", "relay", p.Name, "err", err)
		return
	}
	if online {
		pk.linkMu.Lock()
		pk.linkOnline[key] = time.Now()
		pk.linkMu.Unlock()
	}
	if changed && online {
		pk.log.Info("paired relay online", "relay", p.Name)
	} else if changed {
		pk.log.Warn("paired relay offline", "relay", p.Name, "reason", reason)
	}
}

// peerCall performs an action on a paired relay and returns its envelope.
func (pk *peerLink) peerCall(ctx context.Context, p *store.Pairing, body PeerCallBody, timeout time.Duration) (peerAnswer, *Error) {
	env, err := pk.peers.CallRaw(ctx, peerTarget(p), body, timeout)
	e := pk.peerDone("call", err)
	pk.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	pa := encodedAnswer(env)
	if found, _ := answerOK(pa); !found {
		return nil, Errorf(CodeOffline, "Relay %q answered without a result envelope. Nothing is known to have been done.", p.Name)
	}
	return pa, nil
}

func (pk *peerLink) peerEvents(ctx context.Context, p *store.Pairing, sub, after string, wait time.Duration) (*PeerEvents, *Error) {
	out, err := pk.peers.Events(ctx, peerTarget(p), sub, after, wait, wait+pk.opts.Timing.PeerTimeout)
	e := pk.peerDone("events", err)
	pk.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	return out, nil
}

// The owner's pairing (§12, R13.1a): pair, list, change, unpair.

// Pair pairs this relay with another (R13.1a): the URL is checked, hello is
// tried for 5 s; on success its own name is the default name; without an
// answer the pairing is kept offline only when a name was given.
func (pk *peerLink) Pair(ctx context.Context, in PairRequest) (*relay.PairedRelay, error) {
	u, host, err := checkPeerURL(in.URL)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Token) == "" {
		return nil, Errorf(CodeInvalidInput, "token is required: a peer token made on the other relay (POST /api/v1/peer-tokens there). Nothing was paired.")
	}
	perm := strings.ToLower(strings.TrimSpace(in.Permission))
	if perm == "" {
		perm = "full" // R4.5: new pairings start at full
	}
	if _, ok := levelRank[perm]; !ok {
		return nil, Errorf(CodeInvalidInput, "permission must be one of %s (got %q). Nothing was paired.", strings.Join(Levels, ", "), in.Permission)
	}
	name := strings.TrimSpace(in.Name)
	if name != "" {
		if e := pk.checkRelayName(name); e != nil {
			return nil, e
		}
	}
	base := u.String()
	if pk.opts.BaseURL != "" && strings.EqualFold(strings.TrimRight(pk.opts.BaseURL, "/"), base) {
		return nil, Errorf(CodeInvalidInput, "url %q is this relay itself; pair it with another relay. Nothing was paired.", base)
	}
	p := &store.Pairing{Name: name, URL: base, Host: host, Token: strings.TrimSpace(in.Token), Permission: perm, PairedAt: pk.now()}
	label := name
	if label == "" {
		label = host
	}
	h, e := pk.hello(ctx, label, base, p.Token, helloTimeout)
	switch {
	case e == nil:
		self, err := pk.st.Instance(ctx)
		if err != nil {
			return nil, fmt.Errorf("pair with %s: %w", label, err)
		}
		if h.Instance != "" && h.Instance == self {
			return nil, Errorf(CodeInvalidInput, "url %q leads back to this relay itself; pair it with another relay. Nothing was paired.", base)
		}
		if p.Name == "" {
			p.Name = h.Name
			if e := pk.checkRelayName(p.Name); e != nil {
				return nil, Errorf(CodeInvalidInput, "The relay at %q calls itself %q, which cannot be used here (%s); give a name. Nothing was paired.", base, h.Name, e.Msg)
			}
		}
		p.RemoteName, p.Instance, p.Version, p.Features, p.PublicURL = h.Name, h.Instance, h.Version, append([]string{}, h.Features...), h.PublicURL
	case e.Code == CodeAuth:
		return nil, Errorf(CodeAuth, "The relay at %q rejects this token. Make a new one there (POST /api/v1/peer-tokens) and pair again. Nothing was paired.", base)
	case p.Name == "":
		return nil, Errorf(CodeOffline, "The relay at %q did not answer hello within 5 s (%s). Give a name to pair it while it is offline. Nothing was paired.", base, e.Msg)
	default:
	}
	if err := pk.st.AddPairing(ctx, p); errors.Is(err, store.ErrExists) {
		return nil, Errorf(CodeInvalidInput, "A relay named %q is paired already; give another name or remove that pairing first. Nothing was paired.", p.Name)
	} else if err != nil {
		return nil, err
	}
	pk.link(ctx, p, e)
	pk.wakePoll()
	pk.log.Info("relay paired", "relay", p.Name, "url", base, "online", e == nil, "permission", p.Permission)
	links, _ := pk.st.Links(ctx)
	return pairingView(p, links), nil
}

func (pk *peerLink) checkRelayName(name string) *Error {
	if !relayNameRE.MatchString(name) {
		return Errorf(CodeInvalidInput, "name %q must be 1–63 letters, digits, '.', '_' or '-', starting with a letter or digit. Nothing was paired.", name)
	}
	if strings.EqualFold(name, "this") || strings.EqualFold(name, pk.opts.Name) {
		return Errorf(CodeInvalidInput, "name %q is this relay's own; give the paired relay another name. Nothing was paired.", name)
	}
	return nil
}

func pairingView(p *store.Pairing, links map[string]store.Link) *relay.PairedRelay {
	l := links[strings.ToLower(p.Name)]
	m := &relay.PairedRelay{Name: p.Name, URL: p.URL, Host: p.Host, Online: l.Online, Version: p.Version,
		Permission: p.Permission, PairedAt: tsPtr(p.PairedAt), LastSeenAt: tsPtr(l.LastSeenAt)}
	if p.RemoteName != "" && !strings.EqualFold(p.RemoteName, p.Name) {
		m.RemoteName = p.RemoteName
	}
	if !l.Online && l.Reason != "" {
		m.OfflineReason = l.Reason
	}
	return m
}

// Relays lists the pairings (GET /api/v1/relays).
func (pk *peerLink) Relays(ctx context.Context) ([]*relay.PairedRelay, error) {
	ps, err := pk.st.Pairings(ctx)
	if err != nil {
		return nil, fmt.Errorf("list paired relays: %w", err)
	}
	links, err := pk.st.Links(ctx)
	if err != nil {
		return nil, fmt.Errorf("list paired relays: %w", err)
	}
	out := []*relay.PairedRelay{}
	for _, p := range ps {
		out = append(out, pairingView(p, links))
	}
	return out, nil
}

// PatchRelay changes a pairing's level, URL or token.
func (pk *peerLink) PatchRelay(ctx context.Context, name string, in RelayPatch) (*relay.PairedRelay, error) {
	p, err := pk.st.GetPairing(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No paired relay is named %q. Nothing was changed.", name)
	}
	if err != nil {
		return nil, err
	}
	if in.Permission == nil && in.URL == nil && in.Token == nil {
		return nil, Errorf(CodeInvalidInput, "Give permission, url or token to change. Nothing was changed.")
	}
	if in.Permission != nil {
		perm := strings.ToLower(strings.TrimSpace(*in.Permission))
		if _, ok := levelRank[perm]; !ok {
			return nil, Errorf(CodeInvalidInput, "permission must be one of %s (got %q). Nothing was changed.", strings.Join(Levels, ", "), *in.Permission)
		}
		p.Permission = perm
	}
	if in.URL != nil {
		u, host, err := checkPeerURL(*in.URL)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Msg = strings.Replace(e.Msg, "Nothing was paired.", "Nothing was changed.", 1)
			}
			return nil, err
		}
		p.URL, p.Host = u.String(), host
	}
	if in.Token != nil {
		if strings.TrimSpace(*in.Token) == "" {
			return nil, Errorf(CodeInvalidInput, "token may not be empty. Nothing was changed.")
		}
		p.Token = strings.TrimSpace(*in.Token)
	}
	if err := pk.st.SavePairing(ctx, p); err != nil {
		return nil, fmt.Errorf("update pairing %s: %w", p.Name, err)
	}
	pk.log.Info("pairing changed", "relay", p.Name, "permission", p.Permission)
	links, _ := pk.st.Links(ctx)
	return pairingView(p, links), nil
}

// Unpair removes a pairing; subscriptions and asks this relay's
// conversations hold there end (R8.19 unpaired, R10.8), on that relay too
// while it can still be reached, and the answer counts both.
func (pk *peerLink) Unpair(ctx context.Context, name string) (*relay.Unpaired, error) {
	p, err := pk.st.GetPairing(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No paired relay is named %q. Nothing was changed.", name)
	}
	if err != nil {
		return nil, err
	}
	ended, untold := 0, 0
	subs, err := pk.st.RemoteSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("unpair %s: %w", p.Name, err)
	}
	for _, s := range subs {
		if strings.EqualFold(s.Relay, p.Name) {
			// Ended here first: the poller, seeing it end there, keeps this reason.
			pk.relay.endMirror(ctx, s, "unpaired")
			// Tell the other side while it can still be reached (best effort, short).
			if !pk.relay.remoteUnsubscribe(ctx, p, s) {
				untold++
			}
			ended++
		}
	}
	asks, err := pk.st.RemoteAsks(ctx)
	if err != nil {
		return nil, fmt.Errorf("unpair %s: %w", p.Name, err)
	}
	endedAsks := 0
	for _, a := range asks {
		if strings.EqualFold(a.Relay, p.Name) {
			// The ask is kept there: it ends there, out of that relay's inbox (R10.8).
			if !pk.relay.remoteWithdraw(ctx, p, a) {
				untold++
			}
			if ok, err := pk.st.DeleteRemoteAsk(ctx, a.Relay, a.ID); err == nil && ok {
				endedAsks++
			}
		}
	}
	if _, err := pk.st.DeletePairing(ctx, p.Name); err != nil {
		return nil, fmt.Errorf("unpair %s: %w", p.Name, err)
	}
	if err := pk.st.DropLink(ctx, p.Name); err != nil {
		pk.log.Warn("drop link state", "relay", p.Name, "err", err)
	}
	pk.log.Info("relay unpaired", "relay", p.Name, "subscriptions_ended", ended, "asks_ended", endedAsks, "not_told", untold)
	out := &relay.Unpaired{Name: p.Name, Removed: true, SubscriptionsEnded: ended, AsksEnded: endedAsks}
	if untold > 0 {
		out.Note = fmt.Sprintf("Relay %q did not answer: %d of them ended here only; it stops keeping their events within %s of the last one, and its owner can dismiss the asks there.",
			p.Name, untold, pk.opts.Timing.ReplayKeep.Round(time.Hour))
	}
	return out, nil
}
