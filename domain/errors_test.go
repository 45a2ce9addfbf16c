package domain

import (
	"errors"
	"testing"
)

// An unexpected error names its step in the log and keeps its cause; the
// agent sees the plain sentence only.
func TestInternalNamesItsStep(t *testing.T) {
	cause := errors.New("connection refused")
	for _, tt := range []struct {
		op, log string
	}{
		{"ask: AddAsk", "ask: AddAsk: connection refused"},
		{"", "connection refused"},
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
