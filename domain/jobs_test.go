package domain

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/oar/relay/jobs"
)

// A job of a type the domain does not know, or whose payload does not
// decode, fails as a bad job (never retried) and says what it was.
func TestRunJobRefusesBadJobs(t *testing.T) {
	r := &Relay{} // neither case reaches the store
	ctx := context.Background()
	err := r.RunJob(ctx, "event:nosuch", []byte(`{}`))
	if !errors.Is(err, ErrBadJob) || !strings.Contains(err.Error(), `"event:nosuch"`) {
		t.Fatalf("unknown type: %v", err)
	}
	for _, typ := range []string{jobs.TypeDrain, jobs.TypeFanout, jobs.TypeRelease, jobs.TypeFlush,
		jobs.TypeSummary, jobs.TypeHeartbeat, jobs.TypeFire} {
		err := r.RunJob(ctx, typ, []byte(`{"sub":`))
		if !errors.Is(err, ErrBadJob) || !strings.HasPrefix(err.Error(), typ+` payload "{\"sub\":"`) {
			t.Errorf("%s with a bad payload: %v", typ, err)
		}
	}
	if err := r.RunJob(ctx, jobs.TypeDrain, []byte(`{}`)); !errors.Is(err, ErrBadJob) || !strings.Contains(err.Error(), "names no session") {
		t.Fatalf("drain without a session: %v", err)
	}
}

// Every job type the worker hands over (jobs.Types) is one RunJob knows:
// the worker's list and RunJob's switch cannot drift apart unseen.
func TestRunJobKnowsEveryJobType(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, typ := range jobs.Types {
		err := f.r.RunJob(f.ctx, typ, []byte(`{"sub":`))
		if err != nil && strings.Contains(err.Error(), "is not one of the relay's") {
			t.Errorf("RunJob does not know %s: %v", typ, err)
		}
	}
}

// jobErr says what a job did; a retry-later is passed through as it is.
func TestJobErrSaysWhatTheJobDid(t *testing.T) {
	if jobErr(nil, "x") != nil {
		t.Fatal("jobErr(nil) is not nil")
	}
	base := errors.New("redis: connection refused")
	err := jobErr(base, "fire schedule %s", "sch_1")
	if err.Error() != "fire schedule sch_1: redis: connection refused" || !errors.Is(err, base) {
		t.Fatalf("jobErr: %v", err)
	}
	if got := jobErr(ErrRetryLater, "drain"); got == nil || got.Error() != ErrRetryLater.Error() {
		t.Fatalf("retry-later wrapped: %v", got)
	}
}
