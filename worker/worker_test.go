package worker

import (
	"errors"
	"testing"

	"github.com/oar/relay/domain"
)

// wrap says what a job did; a retry-later is passed through as it is.
func TestWrapSaysWhatTheJobDid(t *testing.T) {
	if wrap(nil, "x") != nil {
		t.Fatal("wrap(nil) is not nil")
	}
	base := errors.New("redis: connection refused")
	err := wrap(base, "fire schedule %s", "sch_1")
	if err.Error() != "fire schedule sch_1: redis: connection refused" || !errors.Is(err, base) {
		t.Fatalf("wrap: %v", err)
	}
	if got := wrap(domain.ErrRetryLater, "drain"); got == nil || got.Error() != domain.ErrRetryLater.Error() {
		t.Fatalf("retry-later wrapped: %v", got)
	}
}
