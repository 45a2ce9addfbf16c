package domain

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/store"
)

// idlePeerStore is the poll loop's store with nothing to poll until paired
// is set; it counts the loop's reads. The methods it does not override are
// never called while nothing is paired (the embedded nil interface).
type idlePeerStore struct {
	peerLinkStore
	reads  atomic.Int64
	counts atomic.Int64 // PairingCount reads
	paired atomic.Bool
}

func (s *idlePeerStore) RemoteSubscriptions(context.Context) ([]*store.Subscription, error) {
	s.reads.Add(1)
	return nil, nil
}
func (s *idlePeerStore) RemoteAsks(context.Context) ([]*store.RemoteAsk, error) { return nil, nil }
func (s *idlePeerStore) Pairings(context.Context) ([]*store.Pairing, error)     { return nil, nil }
func (s *idlePeerStore) PairingCount(context.Context) (int64, error) {
	s.counts.Add(1)
	if s.paired.Load() {
		return 1, nil
	}
	return 0, nil
}

// R25.4, issue 36: with nothing paired the poll loop does not read the store
// every peer_poll; a pairing made in this process wakes it, and it polls
// every peer_poll again while a pairing exists, without reading the
// pairings' count each round (the hello round reads the pairings).
func TestPeerLoopRestsWithNothingPaired(t *testing.T) {
	st := &idlePeerStore{}
	opts := &Options{}
	opts.Timing = config.Timing{PeerPoll: 5 * time.Millisecond, PeerTimeout: time.Second}
	pk := &peerLink{st: st, opts: opts, log: slog.New(slog.DiscardHandler), now: time.Now, pollWake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pk.peerLoop(ctx) }()
	defer func() { cancel(); <-done }()

	waitReads := func(n int64) {
		t.Helper()
		if !testwait.Poll(5*time.Second, time.Millisecond, func() bool { return st.reads.Load() >= n }) {
			t.Fatalf("the poll loop read the store %d times, want %d", st.reads.Load(), n)
		}
	}
	waitReads(1)
	time.Sleep(60 * opts.Timing.PeerPoll) // 12 rounds of peer_poll
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("with nothing paired the poll loop read the store %d times in 12 peer_poll rounds, want 1", n)
	}
	st.paired.Store(true)
	pk.wakePoll() // what Pair does
	waitReads(5)  // polled every peer_poll again
	if n := st.counts.Load(); n != 1 {
		t.Fatalf("the pairings were counted %d times (the wake's and every round's), want once, at the wake", n)
	}
}
