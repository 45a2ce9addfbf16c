package app

import (
	"math"
	"runtime/debug"
	"testing"
)

// A relay process collects at GOGC 800 with a 512 MiB soft memory limit
// unless the environment sets GOGC / GOMEMLIMIT (docs/OPERATIONS.md).
func TestTuneGCDefaults(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	prevPct := debug.SetGCPercent(100)
	prevLim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevPct); debug.SetMemoryLimit(prevLim) })

	tuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent || gcPercent != 800 {
		t.Errorf("GC percent %d, want 800", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != gcMemoryLimit || gcMemoryLimit != 512<<20 {
		t.Errorf("memory limit %d, want 512 MiB", got)
	}

	// Set by the environment: left alone.
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d with GOGC set, want it untouched (100)", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("memory limit %d with GOMEMLIMIT set, want it untouched", got)
	}
}
