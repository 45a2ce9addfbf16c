package testwait

import (
	"testing"
	"time"
)

// TestPoll: a condition that comes to hold is seen; one that never holds is
// reported false once within has passed, after more than one check.
func TestPoll(t *testing.T) {
	n := 0
	if !Poll(time.Minute, time.Millisecond, func() bool { n++; return n == 3 }) {
		t.Fatal("Poll = false for a condition that held on the third check")
	}
	if n != 3 {
		t.Errorf("checked %d times, want 3 (it stops when the condition holds)", n)
	}
	checks := 0
	start := time.Now()
	if Poll(20*time.Millisecond, Backoff, func() bool { checks++; return false }) {
		t.Fatal("Poll = true for a condition that never held")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("Poll gave up after %s, before within (20ms)", took)
	}
	if checks < 2 {
		t.Errorf("checked %d times, want at least 2 (the first check, one after a pause)", checks)
	}
}
