package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/jobs"
)

// A job the domain can never run (an unknown type, a payload that does not
// decode) is not retried.
func TestBadJobIsNotRetried(t *testing.T) {
	w := &Worker{r: &domain.Relay{}}
	for _, task := range []*asynq.Task{asynq.NewTask("event:nosuch", nil), asynq.NewTask(jobs.TypeFire, []byte("{"))} {
		if err := w.run(context.Background(), task); !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, domain.ErrBadJob) {
			t.Errorf("%s: %v, want a bad job not retried", task.Type(), err)
		}
	}
}
