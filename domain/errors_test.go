package domain

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/oar/relay/store"
)

// An unexpected error names its step in the log and keeps its cause; the
// agent sees the plain sentence only.
func TestInternalNamesItsStep(t *testing.T) {
	cause := errors.New("ERR unknown command")
	for _, tt := range []struct {
		op, log string
	}{
		{"ask: AddAsk", "ask: AddAsk: ERR unknown command"},
		{"", "ERR unknown command"},
	} {
		e := internal(tt.op, cause)
		if e.Code != CodeInternal || e.Msg != "Something went wrong inside the relay; the log has the detail. Nothing was done." {
			t.Errorf("%q: the agent sees %s %q", tt.op, e.Code, e.Msg)
		}
		if e.cause.Error() != tt.log || !errors.Is(e.cause, cause) {
			t.Errorf("%q: the log has %q (wraps the cause: %v), want %q", tt.op, e.cause, errors.Is(e.cause, cause), tt.log)
		}
	}
	if got := AsError(cause); got.Code != CodeInternal || !errors.Is(got.cause, cause) {
		t.Errorf("AsError: %+v", got)
	}
}

// R25.3: a store that does not answer is REMOTE_RELAY_UNAVAILABLE (503 on the
// owner API), its short cause in the sentence, never an address; the log
// keeps the whole chain.
func TestUnreachableStoreIsUnavailable(t *testing.T) {
	raw := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	if e := internal("call bravo", raw); e.Code != CodeInternal {
		t.Errorf("a refusal that is not the store's (its client did not mark it): %s", e.Code)
	}
	cause := store.MarkUnreachable(raw) // as the store's client (store.UnreachableHook) marks it
	e := internal("ask: AddAsk", cause)
	if e.Code != CodeUnavailable || e.Msg != "The relay's store does not answer (connection refused); nothing was changed." {
		t.Errorf("the agent sees %s %q", e.Code, e.Msg)
	}
	if !errors.Is(e, syscall.ECONNREFUSED) || e.cause.Error() != "ask: AddAsk: dial tcp: connect: connection refused" {
		t.Errorf("the log has %q", e.cause)
	}
	if got := AsError(fmt.Errorf("list sessions: %w", cause)); got.Code != CodeUnavailable || HTTPStatus(got.Code) != 503 {
		t.Errorf("AsError: %s, HTTP %d", got.Code, HTTPStatus(got.Code))
	}
}
