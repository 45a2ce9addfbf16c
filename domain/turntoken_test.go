package domain

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/provider"
)

// agentProcess is a provider whose type runs an agent process (its turns get
// a turn token).
type agentProcess struct{ provider.Provider }

func (p agentProcess) Info() provider.Info {
	in := p.Provider.Info()
	in.Type = "exec"
	return in
}

// heldLookup holds each SessionByToken after its read of the store until the
// test lets it go on.
type heldLookup struct {
	tokensStore
	read, goOn chan struct{}
}

func (h *heldLookup) SessionByToken(ctx context.Context, tok string) (string, error) {
	id, err := h.tokensStore.SessionByToken(ctx, tok)
	h.read <- struct{}{}
	<-h.goOn
	return id, err
}

// TestTurnTokenEndedDuringLookup (R18.19): a lookup that found the turn's
// token in the store while the turn still ran, and would cache it only after
// the turn's end revoked it in this process, does not bring it back: the
// token is refused from the revocation on (it was cached for turnTokenCache
// again, and worked after its turn).
func TestTurnTokenEndedDuringLookup(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	held := &heldLookup{tokensStore: f.st, read: make(chan struct{}), goOn: make(chan struct{})}
	tk := newTokens(held, time.Now, slog.New(slog.DiscardHandler), &Options{Timers: clock.Real{}})
	p := provider.NewScripted(provider.Info{})
	t.Cleanup(p.Close)
	tok, drop, err := tk.mintTurnToken(f.ctx, agentProcess{p}, "s1")
	if err != nil || tok == "" {
		t.Fatalf("mint: %q %v", tok, err)
	}
	type found struct {
		id  string
		ok  bool
		err error
	}
	done := make(chan found, 1)
	go func() {
		id, ok, err := tk.SessionForToken(f.ctx, tok)
		done <- found{id, ok, err}
	}()
	<-held.read // the store still names s1
	drop()      // the turn ends
	close(held.goOn)
	if got := <-done; got.err != nil || got.ok {
		t.Fatalf("a lookup that read the store before its turn ended took the token after: %+v", got)
	}
	go func() { <-held.read }() // the next lookup's read (the token is gone from the store)
	if id, ok, err := tk.SessionForToken(f.ctx, tok); err != nil || ok {
		t.Fatalf("the ended turn's token names %q %v %v", id, ok, err)
	}
}
