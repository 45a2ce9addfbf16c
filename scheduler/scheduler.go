// Package scheduler holds the relay's time rules and the loops that act on
// time: for now the recovery sweep that restarts lost drain jobs. (Quiet
// hours, digests and schedule grids come with subscriptions and schedules.)
package scheduler

import (
	"context"
	"log/slog"
	"time"
)

// Every runs f every d until ctx ends (first run after d).
func Every(ctx context.Context, d time.Duration, log *slog.Logger, name string, f func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil && ctx.Err() == nil {
				log.Warn("scheduled work failed", "loop", name, "err", err)
			}
		}
	}
}

// Stale remembers what a sweep saw, so a sweep acts only on what it saw
// unchanged the time before (a drain being enqueued right now is not lost).
type Stale struct{ prev map[string]string }

// Filter returns the entries of cur that were identical in the previous call.
func (s *Stale) Filter(cur map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range cur {
		if s.prev[k] == v {
			out[k] = v
		}
	}
	s.prev = cur
	return out
}
