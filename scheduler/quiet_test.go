package scheduler

import (
	"testing"
	"time"
)

func mustQuiet(t *testing.T, from, to, tz string) *Quiet {
	t.Helper()
	q, err := ParseQuiet(from, to, tz)
	if err != nil || q == nil {
		t.Fatalf("ParseQuiet(%q,%q,%q): %v", from, to, tz, err)
	}
	return q
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// R8.9, R8.10: the window on ordinary days and on the nights the clocks change.
func TestQuietIn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		from, to, zone string
		at             string // UTC
		in             bool
	}{
		{"before across-midnight window", "23:00", "06:00", "Europe/Berlin", "2026-06-10T20:59:00Z", false},
		{"start of across-midnight window", "23:00", "06:00", "Europe/Berlin", "2026-06-10T21:00:00Z", true},
		{"after midnight inside", "23:00", "06:00", "Europe/Berlin", "2026-06-11T03:59:00Z", true},
		{"end is outside", "23:00", "06:00", "Europe/Berlin", "2026-06-11T04:00:00Z", false},
		{"same-day window", "09:00", "17:00", "UTC", "2026-06-10T12:00:00Z", true},
		// Berlin goes back 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC); to=02:30 is in the repeated hour.
		{"Berlin back: first pass before to", "22:00", "02:30", "Europe/Berlin", "2026-10-25T00:20:00Z", true},
		{"Berlin back: first to ends it", "22:00", "02:30", "Europe/Berlin", "2026-10-25T00:30:00Z", false},
		{"Berlin back: not re-entered in the repeated hour", "22:00", "02:30", "Europe/Berlin", "2026-10-25T01:10:00Z", false},
		{"Berlin back: to outside the repeated hour keeps the window", "01:00", "05:00", "Europe/Berlin", "2026-10-25T01:10:00Z", true},
		// New York goes back 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC); to=01:30 is in the repeated hour.
		{"New York back: first pass", "23:00", "01:30", "America/New_York", "2026-11-01T05:20:00Z", true},
		{"New York back: ended at first to", "23:00", "01:30", "America/New_York", "2026-11-01T05:30:00Z", false},
		{"New York back: not re-entered", "23:00", "01:30", "America/New_York", "2026-11-01T06:10:00Z", false},
		// Berlin goes forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC); to=02:30 is skipped.
		{"Berlin forward: before the jump", "22:00", "02:30", "Europe/Berlin", "2026-03-29T00:59:00Z", true},
		{"Berlin forward: ends at the jump", "22:00", "02:30", "Europe/Berlin", "2026-03-29T01:00:00Z", false},
		// New York goes forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC).
		{"New York forward: before the jump", "23:00", "02:30", "America/New_York", "2026-03-08T06:59:00Z", true},
		{"New York forward: ends at the jump", "23:00", "02:30", "America/New_York", "2026-03-08T07:00:00Z", false},
		// from=02:15 inside Berlin's repeated hour: starts at the first pass; on the second pass the
		// minutes before from count as outside (the accepted known limit).
		{"from in repeated hour: first pass", "02:15", "05:00", "Europe/Berlin", "2026-10-25T00:20:00Z", true},
		{"from in repeated hour: second pass before from (known limit)", "02:15", "05:00", "Europe/Berlin", "2026-10-25T01:05:00Z", false},
		{"from in repeated hour: second pass after from", "02:15", "05:00", "Europe/Berlin", "2026-10-25T01:20:00Z", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := mustQuiet(t, c.from, c.to, c.zone)
			if got := q.In(utc(c.at)); got != c.in {
				t.Fatalf("In(%s) = %v, want %v (local %s)", c.at, got, c.in, utc(c.at).In(q.Loc).Format(time.RFC3339))
			}
		})
	}
}

func TestQuietEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		from, to, zone string
		at, end        string
	}{
		{"across midnight", "23:00", "06:00", "Europe/Berlin", "2026-06-10T21:30:00Z", "2026-06-11T04:00:00Z"},
		{"outside returns the time itself", "23:00", "06:00", "Europe/Berlin", "2026-06-10T12:00:00Z", "2026-06-10T12:00:00Z"},
		{"Berlin back: at the first to", "22:00", "02:30", "Europe/Berlin", "2026-10-24T21:00:00Z", "2026-10-25T00:30:00Z"},
		{"Berlin forward: at the jump", "22:00", "02:30", "Europe/Berlin", "2026-03-28T21:00:00Z", "2026-03-29T01:00:00Z"},
		{"New York back: at the first to", "23:00", "01:30", "America/New_York", "2026-11-01T03:00:00Z", "2026-11-01T05:30:00Z"},
		{"New York forward: at the jump", "23:00", "02:30", "America/New_York", "2026-03-08T04:30:00Z", "2026-03-08T07:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := mustQuiet(t, c.from, c.to, c.zone)
			if got := q.End(utc(c.at)); !got.Equal(utc(c.end)) {
				t.Fatalf("End(%s) = %s, want %s", c.at, got.UTC().Format(time.RFC3339), c.end)
			}
		})
	}
}

// A digest due inside the window moves to its end (R8.9).
func TestQuietDefer(t *testing.T) {
	t.Parallel()
	q := mustQuiet(t, "23:00", "06:00", "Europe/Berlin")
	due := utc("2026-06-11T00:00:00Z") // 02:00 in Berlin
	if got := q.Defer(due); !got.Equal(utc("2026-06-11T04:00:00Z")) {
		t.Fatalf("Defer = %s", got)
	}
	out := utc("2026-06-11T10:00:00Z")
	if got := q.Defer(out); !got.Equal(out) {
		t.Fatalf("Defer outside = %s", got)
	}
	var none *Quiet
	if got := none.Defer(out); !got.Equal(out) {
		t.Fatalf("nil Defer = %s", got)
	}
}

// Across one ordinary day, 23:00–06:00 holds exactly 420 minutes.
func TestQuietMinutesPerDay(t *testing.T) {
	t.Parallel()
	q := mustQuiet(t, "23:00", "06:00", "Europe/Berlin")
	start := utc("2026-06-10T00:00:00Z")
	n := 0
	for i := 0; i < 24*60; i++ {
		if q.In(start.Add(time.Duration(i) * time.Minute)) {
			n++
		}
	}
	if n != 420 {
		t.Fatalf("minutes inside = %d, want 420", n)
	}
}

// R8.9 error messages, verbatim.
func TestParseQuietErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ from, to, tz, want string }{
		{"24:00", "06:00", "UTC", `quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)`},
		{"7:00", "06:00", "UTC", `quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)`},
		{"23:00", "", "UTC", `quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)`},
		{"06:00", "06:00", "UTC", "quiet_hours from and to must differ"},
		{"23:00", "06:00", "Berlin", `quiet_hours tz "Berlin" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")`},
		{"23:00", "06:00", "Mars/Olympus", `quiet_hours tz "Mars/Olympus" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")`},
		{"23:00", "06:00", "", `quiet_hours tz "" is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")`},
	}
	for _, c := range cases {
		_, err := ParseQuiet(c.from, c.to, c.tz)
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseQuiet(%q,%q,%q) = %v, want %q", c.from, c.to, c.tz, err, c.want)
		}
	}
	if q, err := ParseQuiet("", "", ""); q != nil || err != nil {
		t.Errorf("all empty = %v, %v; want none", q, err)
	}
}
