package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oar/relay/peer"
)

// The codes package peer makes are this package's.
func TestPeerCodes(t *testing.T) {
	for got, want := range map[string]string{peer.CodeOffline: CodeOffline, peer.CodeAuth: CodeAuth, peer.CodeUnsupported: CodeUnsupported} {
		if got != want {
			t.Errorf("peer code %q, domain code %q", got, want)
		}
	}
}

type peerCount struct {
	Metrics
	kinds, codes []string
}

func (m *peerCount) PeerRequest(kind, code string) {
	m.kinds, m.codes = append(m.kinds, kind), append(m.codes, code)
}

// helloPeer answers hello with h or err.
type helloPeer struct {
	PeerClient
	h   *peer.Hello
	err error
	to  peer.Target
}

func (p *helloPeer) Hello(_ context.Context, to peer.Target, _ time.Duration) (*peer.Hello, error) {
	p.to = to
	return p.h, p.err
}

// TestPeerAnswers: what the peer client answers becomes the domain's error
// with the same code and sentence, counted by kind; anything else is INTERNAL.
func TestPeerAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        *peer.Hello
		err      error
		code     string // "" for no error
		msg      string
		counted  string
		wantName string
	}{
		{name: "ok", h: &peer.Hello{Name: "alpha"}, counted: "ok", wantName: "alpha"},
		{name: "peer error", err: &peer.Error{Code: CodeAuth, Msg: `Relay "alpha" rejects this relay's peer token (HTTP 401).`},
			code: CodeAuth, msg: `Relay "alpha" rejects this relay's peer token (HTTP 401).`, counted: CodeAuth},
		{name: "unexpected", err: errors.New("encode the body"), code: CodeInternal,
			msg: "Something went wrong inside the relay; the log has the detail. Nothing was done.", counted: CodeInternal},
		{name: "no name", h: &peer.Hello{}, code: CodeOffline,
			msg: `Relay "alpha" answered hello without a name: it is not a relay. Nothing was done.`, counted: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &peerCount{}
			pc := &helloPeer{h: tc.h, err: tc.err}
			r := New(nil, nil, nil, Options{Metrics: m, Peers: pc})
			h, e := r.link.hello(context.Background(), "alpha", "http://127.0.0.1:1", "tok", time.Second)
			if pc.to != (peer.Target{Name: "alpha", URL: "http://127.0.0.1:1", Token: "tok"}) {
				t.Errorf("target %+v", pc.to)
			}
			switch {
			case tc.code == "" && (e != nil || h == nil || h.Name != tc.wantName):
				t.Fatalf("hello %+v, %v", h, e)
			case tc.code != "" && (e == nil || e.Code != tc.code || e.Msg != tc.msg):
				t.Fatalf("error %v, want %s: %s", e, tc.code, tc.msg)
			}
			if len(m.kinds) != 1 || m.kinds[0] != "hello" || m.codes[0] != tc.counted {
				t.Errorf("counted %v %v, want hello %s", m.kinds, m.codes, tc.counted)
			}
		})
	}
}

// A Relay built without a peer client reaches no paired relay.
func TestNoPeerClient(t *testing.T) {
	r := New(nil, nil, nil, Options{})
	_, e := r.link.hello(context.Background(), "alpha", "http://127.0.0.1:1", "tok", time.Second)
	if e == nil || e.Code != CodeOffline {
		t.Fatalf("hello without a peer client: %v, want OFFLINE", e)
	}
}
