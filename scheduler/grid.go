package scheduler

import "time"

// NextFire is the next time on a schedule's grid strictly after `after`:
// first, or first plus a whole number of intervals (R9.3). A once schedule
// (every 0) has only `first`; zero is returned when it lies at or before `after`.
func NextFire(first time.Time, every time.Duration, after time.Time) time.Time {
	if first.After(after) {
		return first
	}
	if every <= 0 {
		return time.Time{}
	}
	k := after.Sub(first)/every + 1
	return first.Add(k * every)
}

// Firings counts the firings a schedule makes between from and to when every
// firing computes the next one from the time it ran (a simulation on a fake
// clock for tests: missed times fire once, the grid is kept).
func Firings(first time.Time, every time.Duration, from, to time.Time, step time.Duration) int {
	n := 0
	next := NextFire(first, every, from.Add(-time.Nanosecond))
	for now := from; !now.After(to); now = now.Add(step) {
		if next.IsZero() || now.Before(next) {
			continue // never before its due time
		}
		n++
		next = NextFire(first, every, now)
	}
	return n
}
