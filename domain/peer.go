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
	st    peerLinkStore
	peers PeerClient
	log   *slog.Logger
	met   Metrics
	opts  *Options // the relay's: name, timing
	now   func() time.Time
	dl    *pipeline
	relay peerLinkHost

	linkMu     sync.Mutex
	linkOnline map[string]time.Time // paired relay (lower case) -> when this process last recorded it online (link)
}

// peerLinkStore is the store as the link sees it.
type peerLinkStore interface {
	recordStore
	peerStore
}

// peerLinkHost is what the link asks of the rest of the relay: end a
// remote subscription's mirror (remote.go), unsubscribe on a paired relay
// (mirrors.go) and tell the console (notify.go).
type peerLinkHost interface {
	endMirror(ctx context.Context, s *store.Subscription, reason string)
	remoteUnsubscribe(ctx context.Context, p *store.Pairing, s *store.Subscription) bool
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
	Call(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]any, error)
	Check(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]json.RawMessage, error)
	Events(ctx context.Context, to peer.Target, sub, after string, wait, timeout time.Duration) (*peer.Events, error)
	Inbox(ctx context.Context, to peer.Target, timeout time.Duration) ([]map[string]any, error)
	AnswerInbox(ctx context.Context, to peer.Target, id string, in peer.InboxAnswer, timeout time.Duration) (map[string]any, error)
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

func (n noPeers) Call(_ context.Context, to peer.Target, _ peer.CallBody, _ time.Duration) (map[string]any, error) {
	return nil, n.fail(to)
}

func (n noPeers) Check(_ context.Context, to peer.Target, _ peer.CallBody, _ time.Duration) (map[string]json.RawMessage, error) {
	return nil, n.fail(to)
}

func (n noPeers) Events(_ context.Context, to peer.Target, _, _ string, _, _ time.Duration) (*peer.Events, error) {
	return nil, n.fail(to)
}

func (n noPeers) Inbox(_ context.Context, to peer.Target, _ time.Duration) ([]map[string]any, error) {
	return nil, n.fail(to)
}

func (n noPeers) AnswerInbox(_ context.Context, to peer.Target, _ string, _ peer.InboxAnswer, _ time.Duration) (map[string]any, error) {
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
			e = &Error{Code: pe.Code, Msg: pe.Msg}
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
func (pk *peerLink) peerCall(ctx context.Context, p *store.Pairing, body PeerCallBody, timeout time.Duration) (map[string]any, *Error) {
	env, err := pk.peers.Call(ctx, peerTarget(p), body, timeout)
	e := pk.peerDone("call", err)
	pk.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	if _, ok := env["ok"].(bool); !ok {
		return nil, Errorf(CodeOffline, "Relay %q answered without a result envelope. Nothing is known to have been done.", p.Name)
	}
	return env, nil
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
