package domain

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 5*time.Second, time.Millisecond, cond, "timed out waiting for %s", what)
}

// parkedIn says some goroutine with fn in its stack is parked, not running
// (the state runtime.Stack prints: "[select]", "[sync.WaitGroup.Wait]", …).
func parkedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(head, "[running") && !strings.Contains(head, "[runnable") && strings.Contains(g, fn+"(") {
			return true
		}
	}
	return false
}

// TestPollPoolBounded: however many polls are offered, at most the pool's
// workers run at once and no goroutine is started per poll; every poll runs
// in the end, and stop joins the workers.
func TestPollPoolBounded(t *testing.T) {
	const workers, polls = 4, 40
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := newPollPool(ctx, workers)

	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failed test leaves nothing blocked
	var running, high, ran atomic.Int32
	poll := func(context.Context) {
		n := running.Add(1)
		for {
			h := high.Load()
			if n <= h || high.CompareAndSwap(h, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		ran.Add(1)
	}
	offered := make(chan struct{})
	go func() { // the loop's part: it waits for a free worker
		defer close(offered)
		for i := range polls {
			pool.offer(ctx, fmt.Sprintf("rsub:%d", i), poll)
		}
	}()
	waitFor(t, "the workers to be busy", func() bool { return running.Load() >= workers })
	// The next offer waits for a worker (an unbounded pool would have started
	// it and gone on to the others; this would then time out).
	waitFor(t, "an offer to wait for a free worker", func() bool { return parkedIn("domain.(*pollPool).offer") })
	if got := running.Load(); got != workers {
		t.Fatalf("%d polls run at once, want at most %d", got, workers)
	}
	// The workers, the offering goroutine and slack for the runtime's own.
	if got := runtime.NumGoroutine(); got > base+workers+1+2 {
		t.Fatalf("%d goroutines with %d polls offered, %d before: goroutines grow with the polls", got, polls, base)
	}
	unblock()
	<-offered
	pool.stop()
	if got := ran.Load(); got != polls {
		t.Fatalf("%d polls ran, want %d", got, polls)
	}
	if got := high.Load(); got != workers {
		t.Fatalf("high-water mark %d polls at once, want %d", got, workers)
	}
	waitFor(t, "the workers to end", func() bool { return runtime.NumGoroutine() <= base })
}

// TestPollPoolSkipsBusyKey: a poll already waiting or running is not offered
// again; once done, it is.
func TestPollPoolSkipsBusyKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := newPollPool(ctx, 2)
	release := make(chan struct{})
	var runs atomic.Int32
	poll := func(context.Context) { runs.Add(1); <-release }
	pool.offer(ctx, "rask:a", poll)
	waitFor(t, "the poll to start", func() bool { return runs.Load() == 1 })
	pool.offer(ctx, "rask:a", poll) // running: skipped
	close(release)
	waitFor(t, "the poll to end", func() bool {
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return !pool.busy["rask:a"]
	})
	if got := runs.Load(); got != 1 {
		t.Fatalf("%d runs of a key offered while it ran, want 1", got)
	}
	pool.offer(ctx, "rask:a", poll) // done: offered again
	pool.stop()
	if got := runs.Load(); got != 2 {
		t.Fatalf("%d runs after the poll ended and was offered again, want 2", got)
	}
}

// TestPollPoolStopJoins: when the loop's context ends, an offer waiting for
// a worker returns and stop waits for the polls still running.
func TestPollPoolStopJoins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := newPollPool(ctx, 1)
	var started sync.WaitGroup
	started.Add(1)
	var ended atomic.Bool
	finish := make(chan struct{}) // the poll finishes its last write
	pool.offer(ctx, "hello:a", func(ctx context.Context) {
		started.Done()
		<-ctx.Done()
		<-finish
		ended.Store(true)
	})
	started.Wait()
	done := make(chan struct{})
	go func() { pool.offer(ctx, "hello:b", func(context.Context) {}); close(done) }()
	cancel()
	<-done // the waiting offer gave up
	stopped := make(chan struct{})
	go func() { pool.stop(); close(stopped) }()
	waitFor(t, "stop to wait for the running poll", func() bool {
		select {
		case <-stopped:
			t.Fatal("stop returned before the running poll ended")
		default:
		}
		return parkedIn("domain.(*pollPool).stop")
	})
	close(finish)
	<-stopped
	if !ended.Load() {
		t.Fatal("stop returned before the running poll ended")
	}
}
