package clock

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)

// Each AfterFunc sees the clock at its own due time, in due order, and the
// advance ends at its target, whatever the order the timers were made in.
func TestSimAdvanceFiresInOrderAtEachDueTime(t *testing.T) {
	tests := []struct {
		name    string
		after   []time.Duration // timers made in this order
		advance time.Duration
		want    []time.Duration // clock time each f saw, relative to t0, in firing order
	}{
		{"none due", []time.Duration{5 * time.Second}, time.Second, nil},
		{"one due", []time.Duration{time.Second}, time.Second, []time.Duration{time.Second}},
		{"made out of order", []time.Duration{3 * time.Second, time.Second, 2 * time.Second}, 10 * time.Second,
			[]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"same due keeps creation order", []time.Duration{time.Second, time.Second}, time.Second,
			[]time.Duration{time.Second, time.Second}},
		{"zero fires at once", []time.Duration{0}, 0, []time.Duration{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSim(t0)
			var mu sync.Mutex
			var got []time.Duration
			for _, d := range tc.after {
				s.AfterFunc(d, func() {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, s.Now().Sub(t0))
				})
			}
			s.Advance(tc.advance)
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fired (-want +got):\n%s", diff)
			}
			if now := s.Now().Sub(t0); now != tc.advance {
				t.Errorf("clock at %v after the advance, want %v", now, tc.advance)
			}
		})
	}
}

// A timer made by a timer's function fires in the same advance when it is due
// by then (a chain of retries all inside one simulated hour).
func TestSimTimerMadeDuringAdvance(t *testing.T) {
	s := NewSim(t0)
	var fired []time.Duration
	var mu sync.Mutex
	var step func()
	step = func() {
		mu.Lock()
		fired = append(fired, s.Now().Sub(t0))
		n := len(fired)
		mu.Unlock()
		if n < 3 {
			s.AfterFunc(10*time.Minute, step)
		}
	}
	s.AfterFunc(10*time.Minute, step)
	s.Advance(time.Hour)
	want := []time.Duration{10 * time.Minute, 20 * time.Minute, 30 * time.Minute}
	if diff := cmp.Diff(want, fired); diff != "" {
		t.Errorf("fired (-want +got):\n%s", diff)
	}
	if s.Pending() != 0 {
		t.Errorf("%d timers left", s.Pending())
	}
}

func TestSimTimerChannelAndStop(t *testing.T) {
	s := NewSim(t0)
	a := s.NewTimer(time.Minute)
	b := s.NewTimer(2 * time.Minute)
	if !b.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if b.Stop() {
		t.Fatal("second Stop reported true")
	}
	s.Advance(90 * time.Second)
	select {
	case at := <-a.C():
		if !at.Equal(t0.Add(time.Minute)) {
			t.Errorf("timer delivered %v, want %v", at, t0.Add(time.Minute))
		}
	default:
		t.Fatal("due timer did not fire")
	}
	if a.Stop() {
		t.Error("Stop of a fired timer reported true")
	}
	s.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestSimSetNeverGoesBack(t *testing.T) {
	s := NewSim(t0)
	s.Set(t0.Add(-time.Hour))
	if !s.Now().Equal(t0) {
		t.Fatalf("Set moved the clock back to %v", s.Now())
	}
	if !s.Wall(t0.Add(time.Hour)).Equal(t0.Add(time.Hour)) {
		t.Fatal("a Sim clock's Wall is not the identity")
	}
}

func TestScaledWallIsInverseOfNow(t *testing.T) {
	s := &Scaled{Base: t0, Start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Factor: 60}
	clockAt := t0.Add(time.Hour)
	want := s.Start.Add(time.Minute)
	if got := s.Wall(clockAt); !got.Equal(want) {
		t.Fatalf("Wall(%v) = %v, want %v", clockAt, got, want)
	}
	if got := s.real(time.Hour); got != time.Minute {
		t.Fatalf("an hour of clock time is %v of wall time at 60x, want 1m", got)
	}
}

// Skip moves Now and Wall on together: the clock shows d more at once, and
// Wall still maps the clock's time back to the wall time. Skips from several
// goroutines while others read the clock all count, and Now never goes back.
func TestScaledSkip(t *testing.T) {
	s := &Scaled{Base: t0, Start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Factor: 60}
	s.Skip(3*time.Minute + 30*time.Second)
	clockAt := t0.Add(time.Hour + 3*time.Minute + 30*time.Second)
	if got, want := s.Wall(clockAt), s.Start.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("after a skip of 3.5 min Wall(%v) = %v, want %v", clockAt, got, want)
	}

	live := NewScaled(t0, 60)
	before := live.Now()
	live.Skip(time.Hour)
	if d := live.Now().Sub(before); d < time.Hour || d > time.Hour+10*time.Minute {
		t.Fatalf("Now moved on by %v over a skip of 1h, want 1h (and the little time the test took)", d)
	}
	wall := time.Now()
	if d := live.Wall(live.Now()).Sub(wall); d < -time.Second || d > time.Second {
		t.Fatalf("after a skip Wall(Now()) is %v off the wall time", d)
	}

	const skippers, skips = 4, 100
	var wg sync.WaitGroup
	start := live.Now()
	for range skippers {
		wg.Go(func() {
			for range skips {
				live.Skip(time.Minute)
			}
		})
	}
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		last := live.Now()
		for {
			select {
			case <-stop:
				return
			default:
			}
			now := live.Now()
			if now.Before(last) {
				t.Errorf("Now went back from %v to %v during skips", last, now)
				return
			}
			last = now
		}
	}()
	wg.Wait()
	close(stop)
	<-readerDone
	if d := live.Now().Sub(start); d < skippers*skips*time.Minute || d > skippers*skips*time.Minute+time.Hour {
		t.Fatalf("Now moved on by %v over %d skips of 1 min, want %v", d, skippers*skips, skippers*skips*time.Minute)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("a skip back did not panic")
		}
	}()
	live.Skip(-time.Second)
}

func TestRealTimer(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	if c.Wall(t0) != t0 {
		t.Fatal("Real's Wall is not the identity")
	}
}

// Reset moves a waiting timer, re-arms a fired one and drops the time it sent
// and nobody received; Due lists what waits, earliest first.
func TestSimTimerReset(t *testing.T) {
	s := NewSim(t0)
	a := s.NewTimer(time.Minute)
	var calls []time.Time
	var mu sync.Mutex
	f := s.AfterFunc(time.Hour, func() {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s.Now())
	})
	if diff := cmp.Diff([]time.Time{t0.Add(time.Minute), t0.Add(time.Hour)}, s.Due()); diff != "" {
		t.Errorf("due (-want +got):\n%s", diff)
	}
	if !a.Reset(3 * time.Minute) {
		t.Error("Reset of a waiting timer reported false")
	}
	s.Advance(2 * time.Minute)
	select {
	case <-a.C():
		t.Fatal("the timer fired at its old time")
	default:
	}
	s.Advance(time.Minute)
	// Fired and not received: Reset drops that time and re-arms.
	if a.Reset(time.Minute) {
		t.Error("Reset of a fired timer reported true")
	}
	select {
	case <-a.C():
		t.Fatal("Reset left the old time in the channel")
	default:
	}
	s.Advance(time.Minute)
	if at := <-a.C(); !at.Equal(t0.Add(4 * time.Minute)) {
		t.Errorf("re-armed timer delivered %v, want %v", at, t0.Add(4*time.Minute))
	}
	// An AfterFunc reset into the past runs at once.
	f.Reset(-time.Second)
	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	if diff := cmp.Diff([]time.Time{t0.Add(4 * time.Minute)}, got); diff != "" {
		t.Errorf("AfterFunc reset to the past (-want +got):\n%s", diff)
	}
	if n := len(s.Due()); n != 0 {
		t.Errorf("%d timers wait after all fired", n)
	}
}

// A Scaled clock's timer resets in clock time too: reset to 1 clock second
// (1 ms of wall time) it fires before a timer of 10 clock minutes (600 ms);
// reset by wall time it would fire 400 ms after it.
func TestScaledTimerResetIsClockTime(t *testing.T) {
	s := NewScaled(t0, 1000)
	tm := s.NewTimer(time.Hour)
	later := s.NewTimer(10 * time.Minute)
	defer later.Stop()
	tm.Reset(time.Second)
	select {
	case <-tm.C():
	case <-later.C():
		t.Fatal("a timer reset to 1 clock second fired after one of 10 clock minutes")
	}
}

// WaitDue returns once a timer due then is set in another goroutine, and
// with the context's error when none is.
func TestSimWaitDue(t *testing.T) {
	s := NewSim(t0)
	done := make(chan error, 1)
	go func() { done <- s.WaitDue(context.Background(), t0.Add(time.Minute)) }()
	s.NewTimer(time.Second) // not the one it waits for
	s.NewTimer(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.WaitDue(ctx, t0.Add(time.Hour)); err == nil {
		t.Fatal("WaitDue for a time no timer is due at returned nil")
	}
}

// A Real timer costs what a runtime timer costs: the Timer made of it
// allocates nothing more (a tool call's wait and a turn's limit make one each).
func TestRealTimerAllocatesNoMore(t *testing.T) {
	var c Clock = Real{}
	runtime := testing.AllocsPerRun(100, func() { time.NewTimer(time.Hour).Stop() })
	real := testing.AllocsPerRun(100, func() { c.NewTimer(time.Hour).Stop() })
	if real > runtime {
		t.Errorf("Real.NewTimer: %.0f allocations, a runtime timer %.0f", real, runtime)
	}
}
