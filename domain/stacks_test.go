package domain

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/internal/testwait"
)

func kept(w *warmGoroutines) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func TestWarmGoroutinesCall(t *testing.T) {
	w := newWarmGoroutines(2, clock.Real{})
	defer w.stop()
	for i := range 10 {
		got := 0
		w.call(func() { got = i })
		if got != i {
			t.Fatalf("call %d: f's result not seen after call returned (%d)", i, got)
		}
	}
	if n := kept(w); n < 1 || n > 2 {
		t.Fatalf("%d goroutines kept, want 1 or 2 (at most max)", n)
	}
}

// A panic in f reaches the caller, as it would have without the pool.
func TestWarmGoroutinesCallPanics(t *testing.T) {
	w := newWarmGoroutines(2, clock.Real{})
	defer w.stop()
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		w.call(func() { panic("boom") })
	}()
	if s := fmt.Sprint(recovered); !strings.Contains(s, "boom") {
		t.Fatalf("recovered %q, want the panic of f", s)
	}
	// The goroutine that panicked is still usable.
	ran := false
	w.call(func() { ran = true })
	if !ran {
		t.Fatal("a call after a panic did not run")
	}
}

// With every kept goroutine busy, a call runs where it is, and start in a new
// goroutine: neither waits for the busy ones.
func TestWarmGoroutinesBusy(t *testing.T) {
	w := newWarmGoroutines(1, clock.Real{})
	defer w.stop()
	release := make(chan struct{})
	started := make(chan struct{})
	w.start(func() { close(started); <-release })
	<-started
	done := make(chan struct{})
	go func() {
		w.call(func() {})
		var ran atomic.Bool
		finished := make(chan struct{})
		w.start(func() { ran.Store(true); close(finished) })
		<-finished
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a call waited for a busy kept goroutine")
	}
	close(release)
	if n := kept(w); n != 1 {
		t.Fatalf("%d goroutines kept, want at most 1", n)
	}
}

// After stop, functions still run.
func TestWarmGoroutinesStopped(t *testing.T) {
	w := newWarmGoroutines(4, clock.Real{})
	w.call(func() {})
	w.stop()
	w.stop() // twice is fine
	ran := false
	w.call(func() { ran = true })
	if !ran {
		t.Fatal("a call after stop did not run")
	}
	finished := make(chan struct{})
	w.start(func() { close(finished) })
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("a start after stop did not run")
	}
}

// An idle kept goroutine ends after keptIdle of its clock, not before.
func TestWarmGoroutinesIdleEnd(t *testing.T) {
	clk := clock.NewSim(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	w := newWarmGoroutines(4, clk)
	defer w.stop()
	w.call(func() {})
	// The goroutine has set its idle timer once its call returned.
	idleAt := clk.Now().Add(keptIdle)
	if !testwait.Poll(10*time.Second, time.Millisecond, func() bool { return slices.Contains(clk.Due(), idleAt) }) {
		t.Fatalf("no idle timer due at %v: %v", idleAt, clk.Due())
	}
	clk.Advance(keptIdle - time.Millisecond)
	if n := kept(w); n != 1 {
		t.Fatalf("%d kept goroutines before keptIdle passed, want 1", n)
	}
	clk.Advance(time.Millisecond)
	if !testwait.Poll(10*time.Second, time.Millisecond, func() bool { return kept(w) == 0 }) {
		t.Fatalf("%d kept goroutines still there keptIdle after their last call", kept(w))
	}
	ran := false
	w.call(func() { ran = true })
	if !ran {
		t.Fatal("a call after the kept goroutines ended did not run")
	}
}

// wait joins the kept goroutines after stop: the idle ones at once, a busy
// one when its function returns.
func TestWarmGoroutinesWait(t *testing.T) {
	w := newWarmGoroutines(4, clock.Real{})
	release, busy := make(chan struct{}), make(chan struct{})
	w.start(func() { close(busy); <-release })
	<-busy
	w.call(func() {}) // a second goroutine, idle after this
	w.stop()
	joined := make(chan struct{})
	go func() { w.wait(); close(joined) }()
	select {
	case <-joined:
		t.Fatal("wait returned while a kept goroutine was busy")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return once the busy goroutine's function returned")
	}
	if n := kept(w); n != 0 {
		t.Fatalf("%d kept goroutines after wait", n)
	}
}

// The relay's Wait (its shutdown) joins the kept goroutines, busy ones too:
// none is left after it (and goleak's TestMain checks the whole package).
func TestRelayWaitJoinsKeptGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	r := New(nil, nil, nil, Options{Name: "desk", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const n = 8
	var inside, finished sync.WaitGroup
	inside.Add(n)
	finished.Add(n)
	release := make(chan struct{})
	var done atomic.Int32
	for range n { // n tool calls at once: n kept goroutines
		go func() {
			defer finished.Done()
			r.warm.call(func() { inside.Done(); <-release; done.Add(1) })
		}()
	}
	inside.Wait()
	if k := kept(r.warm); k != n {
		t.Fatalf("%d kept goroutines, want %d", k, n)
	}
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	r.Wait()
	if d := done.Load(); d != n {
		t.Fatalf("Wait returned with %d of %d calls still running", n-d, n)
	}
	if k := kept(r.warm); k != 0 {
		t.Fatalf("%d kept goroutines after Wait", k)
	}
	finished.Wait()
	goleak.VerifyNone(t, before)
}
