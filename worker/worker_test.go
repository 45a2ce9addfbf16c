package worker

import (
	"testing"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/relay"
)

// The domain names its delivery jobs; the worker routes the jobs package's
// task types back to it: the two lists must agree, or a job is never handled.
func TestJobKindsAgree(t *testing.T) {
	t.Parallel()
	pairs := []struct{ domain, task string }{
		{relay.JobFanout, jobs.TypeFanout},
		{relay.JobRelease, jobs.TypeRelease},
		{relay.JobFlush, jobs.TypeFlush},
		{relay.JobSummary, jobs.TypeSummary},
		{relay.JobHeartbeat, jobs.TypeHeartbeat},
		{relay.JobStallScan, jobs.TypeStallScan},
		{relay.JobFire, jobs.TypeFire},
	}
	for _, p := range pairs {
		if p.domain != p.task {
			t.Errorf("domain job %q has task type %q", p.domain, p.task)
		}
	}
}
