package worker

import (
	"errors"
	"testing"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/jobs"
)

// The domain names its delivery jobs; the worker routes the jobs package's
// task types back to it: the two lists must agree, or a job is never handled.
func TestJobKindsAgree(t *testing.T) {
	t.Parallel()
	pairs := []struct{ domain, task string }{
		{domain.JobFanout, jobs.TypeFanout},
		{domain.JobRelease, jobs.TypeRelease},
		{domain.JobFlush, jobs.TypeFlush},
		{domain.JobSummary, jobs.TypeSummary},
		{domain.JobHeartbeat, jobs.TypeHeartbeat},
		{domain.JobStallScan, jobs.TypeStallScan},
		{domain.JobFire, jobs.TypeFire},
	}
	for _, p := range pairs {
		if p.domain != p.task {
			t.Errorf("domain job %q has task type %q", p.domain, p.task)
		}
	}
}

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
