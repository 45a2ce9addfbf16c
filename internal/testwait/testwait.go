// Package testwait is the tests' one way to wait for something a goroutine,
// a process or a server does on its own: check a condition every so often
// until it holds or a deadline passes. It imports nothing of the relay, so
// every package's tests can use it (relaytest's Eventually is built on it).
package testwait

import (
	"testing"
	"time"
)

// Backoff, as Poll's every, checks after 5 ms first and doubles the pause
// up to 100 ms: for conditions that cost a request to check.
const Backoff time.Duration = -1

// Poll checks cond until it holds, pausing every between two checks (or
// Backoff's growing pauses), and reports whether it held before within had
// passed. cond is checked first with no pause, and once more after the last
// pause that began before the deadline.
func Poll(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	pause := every
	if every == Backoff {
		pause = 5 * time.Millisecond
	}
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		if every == Backoff && pause < 100*time.Millisecond {
			pause *= 2
		}
	}
	return true
}

// Eventually is Poll that fails the test with format and a when cond did not
// hold within.
func Eventually(tb testing.TB, within, every time.Duration, cond func() bool, format string, a ...any) {
	tb.Helper()
	if !Poll(within, every, cond) {
		tb.Fatalf(format, a...)
	}
}
