package scheduler

import (
	"testing"
	"time"
)

func TestNextFire(t *testing.T) {
	t.Parallel()
	first := utc("2026-06-10T12:00:00Z")
	cases := []struct {
		name  string
		every time.Duration
		after string
		want  string
	}{
		{"before the first", time.Minute, "2026-06-10T11:59:00Z", "2026-06-10T12:00:00Z"},
		{"at the first", time.Minute, "2026-06-10T12:00:00Z", "2026-06-10T12:01:00Z"},
		{"between grid points", 10 * time.Minute, "2026-06-10T12:25:00Z", "2026-06-10T12:30:00Z"},
		{"after three missed intervals: once, then the grid", 10 * time.Minute, "2026-06-10T12:41:30Z", "2026-06-10T12:50:00Z"},
		{"once, not yet", 0, "2026-06-10T11:00:00Z", "2026-06-10T12:00:00Z"},
		{"once, passed", 0, "2026-06-10T12:00:00Z", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := NextFire(first, c.every, utc(c.after))
			if c.want == "" {
				if !got.IsZero() {
					t.Fatalf("got %s, want none", got)
				}
				return
			}
			if !got.Equal(utc(c.want)) {
				t.Fatalf("got %s, want %s", got.Format(time.RFC3339), c.want)
			}
		})
	}
}

// Issue 4 "timing truth": every_minutes 1 over 24 h fires exactly 1,440 times on the fake clock.
func TestFiringsOverADay(t *testing.T) {
	t.Parallel()
	first := utc("2026-06-10T00:00:30Z")
	if n := Firings(first, time.Minute, first, first.Add(24*time.Hour-time.Second), time.Second); n != 1440 {
		t.Fatalf("firings = %d, want 1440", n)
	}
	// A clock that only wakes every 7 minutes (a relay that was down) fires once per wake, on the grid.
	if n := Firings(first, time.Minute, first, first.Add(70*time.Minute), 7*time.Minute); n != 11 {
		t.Fatalf("sparse firings = %d, want 11", n)
	}
}
