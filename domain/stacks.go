package domain

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/oar/relay/clock"
)

// warmGoroutines runs functions on long-lived goroutines. A tool call runs in a
// goroutine the MCP SDK starts for each request, and a drain started here in a
// goroutine of its own: each starts with a small stack and grows it (copying
// it, frame by frame) on the way down through the relay, the store and
// go-redis; that was 8% of a relay's CPU per send→reply in the benchmark. A
// goroutine kept for the next call has grown its stack already. (gRPC's
// server offers the same for its streams, NumStreamWorkers.)
//
// At most max goroutines are kept; a function finding none free runs where it
// is (call) or in a new goroutine (start), as before. A goroutine idle for
// keptIdle ends, and so do all with stop; wait joins them.
type warmGoroutines struct {
	jobs chan func()    // unbuffered: a send succeeds only when one is idle
	quit chan struct{}  // closed by stop
	wg   sync.WaitGroup // the goroutines started (Add under mu, before stopped)

	mu      sync.Mutex
	n       int // goroutines started
	max     int
	stopped bool
	clk     clock.Clock // the idle end's: the wall clock (a test's Sim)
}

func newWarmGoroutines(max int, clk clock.Clock) *warmGoroutines {
	return &warmGoroutines{jobs: make(chan func()), quit: make(chan struct{}), max: max, clk: clk}
}

// call runs f on a kept goroutine and returns when it did. A panic in f is
// raised again in the caller's goroutine, where it would have been raised
// without the pool (the SDK or gin recover it there).
func (w *warmGoroutines) call(f func()) {
	var (
		done   = make(chan struct{})
		raised any
		stack  []byte
	)
	job := func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				raised, stack = p, debug.Stack()
			}
		}()
		f()
	}
	if !w.submit(job) {
		f()
		return
	}
	<-done
	if raised != nil {
		panic(fmt.Sprintf("%v\n\n(raised in a kept goroutine:)\n%s", raised, stack))
	}
}

// start runs f on a kept goroutine, or else a new one, and returns at once.
// f must not panic (a drain recovers its own, drainRecovered).
func (w *warmGoroutines) start(f func()) {
	if !w.submit(f) {
		go f()
	}
}

// submit hands f to an idle kept goroutine, or to a new one while fewer than
// max exist; false: neither (f did not run).
func (w *warmGoroutines) submit(f func()) bool {
	select {
	case w.jobs <- f:
		return true
	default:
	}
	w.mu.Lock()
	if w.stopped || w.n >= w.max {
		w.mu.Unlock()
		return false
	}
	w.n++
	w.wg.Add(1)
	w.mu.Unlock()
	go w.loop(f)
	return true
}

func (w *warmGoroutines) loop(f func()) {
	defer w.wg.Done()
	defer func() {
		w.mu.Lock()
		w.n--
		w.mu.Unlock()
	}()
	idle := w.clk.NewTimer(keptIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(keptIdle)
		select {
		case f = <-w.jobs:
		case <-idle.C():
			return
		case <-w.quit:
			return
		}
	}
}

// keptIdle is how long a kept goroutine waits for its next function before it
// ends: a burst of calls leaves no goroutines behind, steady traffic keeps them.
const keptIdle = 2 * time.Second

// stop ends the idle kept goroutines, and the busy ones once their function
// returns; later functions run without them. wait joins them.
func (w *warmGoroutines) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
}

// wait returns when every kept goroutine has ended (after stop: the idle ones
// at once, the busy ones when their function returns).
func (w *warmGoroutines) wait() { w.wg.Wait() }
