// Package clock is the one clock of the relay's rules: the times records
// carry, the times delivery and schedules are due at, quiet hours and wake
// limits. Three clocks implement it: Real (the wall clock, what `relay
// serve` runs on), Scaled (the wall clock sped up, for end-to-end tests that
// run a real job queue) and Sim (a clock that moves only when a test says,
// for the domain's table tests).
//
// Two clocks of this interface drive a relay (package domain's Options):
// the rules' clock (Clock) and the clock of the durations of work (Timers:
// how long a call waits for a reply or a card, a turn's max_turn_seconds,
// how long a process trusts the tokens it cached).
// They are apart on purpose: end-to-end tests run the rules sped up (Scaled)
// and the work at its real pace, since a test clock that shortened a wait
// would test a different program; the domain's table tests run a Sim for
// either, so a timeout is a step of the test and not seconds of waiting.
// Leases (Redis keeps their TTLs on its own clock), HTTP timeouts, rechecks
// and the other caches (a kept goroutine's idle end, the owner's settings)
// run on the wall clock.
package clock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock tells the time of the rules and waits for it.
type Clock interface {
	// Now is the clock's time.
	Now() time.Time
	// Wall is the wall time at which the clock shows t: when a job queue
	// that keeps wall times must run a job due at clock time t.
	Wall(t time.Time) time.Time
	// NewTimer fires once the clock has moved on by d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once the clock has moved on by d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable timer of a Clock.
type Timer interface {
	// C delivers the clock's time when the timer fires (AfterFunc's: nil).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset makes the timer fire once the clock has moved on by d from now,
	// whether it had fired, was stopped or still waited (a time that was
	// sent and not received is dropped, as the runtime's timers do since Go
	// 1.23); it reports whether the timer still waited.
	Reset(d time.Duration) bool
}

// Real is the wall clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// Wall is t.
func (Real) Wall(t time.Time) time.Time { return t }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{t: time.NewTimer(d)} }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{t: time.AfterFunc(d, f)} }

// realTimer is a runtime timer (one pointer: a Timer made of it allocates
// nothing more).
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// scaledTimer is a runtime timer of a Scaled clock: its durations are clock
// time.
type scaledTimer struct {
	realTimer
	clk *Scaled
}

func (s scaledTimer) Reset(d time.Duration) bool { return s.t.Reset(s.clk.real(d)) }

// Scaled is a clock that runs Factor times faster than the wall clock from
// Base on (end-to-end tests of digests, quiet hours and wake limits run in
// seconds). Skip jumps it forward.
type Scaled struct {
	Base   time.Time // clock time at Start
	Start  time.Time // wall time it started
	Factor float64

	mu      sync.Mutex
	skipped time.Duration // clock time Skip added
}

// NewScaled starts a clock at base running factor times faster.
func NewScaled(base time.Time, factor float64) *Scaled {
	return &Scaled{Base: base, Start: time.Now(), Factor: factor}
}

// Now is the clock's time.
func (s *Scaled) Now() time.Time {
	return s.Base.Add(s.skip() + time.Duration(float64(time.Since(s.Start))*s.Factor))
}

// Wall is the wall time at which the clock shows t (a t that a Skip jumped
// over, or an earlier one, maps to a wall time in the past).
func (s *Scaled) Wall(t time.Time) time.Time {
	return s.Start.Add(time.Duration(float64(t.Sub(s.Base)-s.skip()) / s.Factor))
}

// Skip jumps the clock forward by d at once, as if d of clock time had
// passed in no wall time: Now is d later from then on, and Wall follows
// (Wall(Now()) is still the wall time now). It is safe to call while others
// read the clock; d below 0 panics (the clock never goes back).
//
// What waits in wall time does not see the jump: a timer made before it
// fires after its wall duration, and a job that a queue keeps at a wall time
// Wall gave before it runs at that wall time, each d of clock time later than
// it was due. An end-to-end test that skips the time a stopped relay misses
// makes sure the jobs it left queued are due (in wall time) before it starts
// the relay again.
func (s *Scaled) Skip(d time.Duration) {
	if d < 0 {
		panic("clock: Scaled.Skip of a negative duration")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipped += d
}

func (s *Scaled) skip() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

func (s *Scaled) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.Factor)
}

// NewTimer fires after d of clock time (d/Factor of wall time).
func (s *Scaled) NewTimer(d time.Duration) Timer {
	return scaledTimer{realTimer{time.NewTimer(s.real(d))}, s}
}

// AfterFunc calls f after d of clock time.
func (s *Scaled) AfterFunc(d time.Duration, f func()) Timer {
	return scaledTimer{realTimer{time.AfterFunc(s.real(d), f)}, s}
}

// Sim is a clock that moves only by Advance or Set. Its timers fire, in the
// order they are due, from the goroutine that moves it: a timer's channel
// gets the time (a buffer of one, as the runtime's), an AfterFunc's f runs in
// its own goroutine, as time.AfterFunc's does, and Advance waits for it, so a
// test that advances sees everything the advance made due happen. Wall is the
// identity: a job queue in front of a Sim clock (the domain fixture's) keeps
// clock times.
type Sim struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*simTimer
	set    chan struct{} // closed when a timer is set or reset (WaitDue), nil: none waits
}

// NewSim starts a simulated clock at t.
func NewSim(t time.Time) *Sim { return &Sim{now: t} }

// Now is the clock's time.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Wall is t: a Sim clock's job queue keeps clock times.
func (s *Sim) Wall(t time.Time) time.Time { return t }

// NewTimer fires when the clock has been moved on by d.
func (s *Sim) NewTimer(d time.Duration) Timer {
	return s.add(d, make(chan time.Time, 1), nil)
}

// AfterFunc calls f when the clock has been moved on by d.
func (s *Sim) AfterFunc(d time.Duration, f func()) Timer { return s.add(d, nil, f) }

func (s *Sim) add(d time.Duration, ch chan time.Time, f func()) *simTimer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &simTimer{sim: s, ch: ch, f: f}
	s.arm(t, d)
	if d <= 0 {
		// Due now: fire at once, as a runtime timer of 0 does.
		s.mu.Unlock()
		s.fireDue()
		s.mu.Lock()
	}
	return t
}

// Advance moves the clock on by d, firing every timer due on the way, each at
// its own due time, in order.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	to := s.now.Add(d)
	s.mu.Unlock()
	s.Set(to)
}

// Set moves the clock to t (never back), firing every timer due by then.
func (s *Sim) Set(to time.Time) {
	for {
		s.mu.Lock()
		i := s.nextDue(to)
		if i < 0 {
			if to.After(s.now) {
				s.now = to
			}
			s.mu.Unlock()
			return
		}
		if due := s.timers[i].due; due.After(s.now) {
			s.now = due
		}
		s.mu.Unlock()
		s.fireDue()
	}
}

// Due is when the timers that wait to fire are due, earliest first: a test
// moves the clock once the timer it means to fire is set.
func (s *Sim) Due() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]time.Time, 0, len(s.timers))
	for _, t := range s.timers {
		out = append(out, t.due)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// WaitDue returns once a timer due at t waits to fire, or with ctx's error:
// a test moves the clock once the timer it means to fire is set (a wait's
// deadline, a turn's limit), which happens in another goroutine.
func (s *Sim) WaitDue(ctx context.Context, t time.Time) error {
	for {
		s.mu.Lock()
		for _, x := range s.timers {
			if x.due.Equal(t) {
				s.mu.Unlock()
				return nil
			}
		}
		if s.set == nil {
			s.set = make(chan struct{})
		}
		ch := s.set
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// arm sets t to fire once the clock has moved on by d (s.mu held; the
// caller fires what is due at once).
func (s *Sim) arm(t *simTimer, d time.Duration) {
	s.seq++
	t.due, t.seq = s.now.Add(d), s.seq
	s.timers = append(s.timers, t)
	s.wake()
}

// wake tells WaitDue a timer was set (s.mu held).
func (s *Sim) wake() {
	if s.set != nil {
		close(s.set)
		s.set = nil
	}
}

// Pending is how many timers wait to fire.
func (s *Sim) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}

// nextDue is the index of the earliest timer due by to (the first set of
// those due at once), -1 when none is (s.mu held). A linear scan: the timers
// are few, and kept in the order they were set.
func (s *Sim) nextDue(to time.Time) int {
	best := -1
	for i, t := range s.timers {
		if t.due.After(to) {
			continue
		}
		if best < 0 || t.due.Before(s.timers[best].due) || t.due.Equal(s.timers[best].due) && t.seq < s.timers[best].seq {
			best = i
		}
	}
	return best
}

// fireDue fires the timers due at the clock's time, in order.
func (s *Sim) fireDue() {
	for {
		s.mu.Lock()
		i := s.nextDue(s.now)
		if i < 0 {
			s.mu.Unlock()
			return
		}
		t := s.timers[i]
		s.timers = append(s.timers[:i], s.timers[i+1:]...)
		now := s.now
		s.mu.Unlock()
		if t.ch != nil {
			select {
			case t.ch <- now:
			default:
			}
			continue
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			t.f()
		}()
		<-done
	}
}

type simTimer struct {
	sim *Sim
	due time.Time
	seq int
	ch  chan time.Time
	f   func()
}

func (t *simTimer) C() <-chan time.Time { return t.ch }

func (t *simTimer) Stop() bool {
	s := t.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.remove()
}

// remove takes the timer off the clock and drops a time sent and not
// received (t.sim.mu held); it reports whether the timer still waited.
func (t *simTimer) remove() bool {
	s := t.sim
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	for i, x := range s.timers {
		if x == t {
			s.timers = append(s.timers[:i], s.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (t *simTimer) Reset(d time.Duration) bool {
	s := t.sim
	s.mu.Lock()
	waited := t.remove()
	s.arm(t, d)
	s.mu.Unlock()
	if d <= 0 {
		s.fireDue()
	}
	return waited
}
