package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Quiet is a daily window in a zone's local wall-clock time, possibly across
// midnight (R8.9). From and To are minutes after midnight.
type Quiet struct {
	From, To int
	Loc      *time.Location
	// Spec is the window as the agent wrote it ("23:00", "06:00", "Europe/Berlin").
	FromText, ToText, Zone string
}

// Error messages of R8.9 (exact strings).
const (
	errQuietTimes  = `quiet_hours from and to must be times of day as "HH:MM" (00:00 to 23:59)`
	errQuietDiffer = "quiet_hours from and to must differ"
)

// ParseQuiet checks a quiet_hours value; an all-empty one is (nil, nil).
func ParseQuiet(from, to, tz string) (*Quiet, error) {
	if from == "" && to == "" && tz == "" {
		return nil, nil
	}
	f, ok1 := parseHHMM(from)
	t, ok2 := parseHHMM(to)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s", errQuietTimes)
	}
	if f == t {
		return nil, fmt.Errorf("%s", errQuietDiffer)
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, fmt.Errorf(`quiet_hours tz %q is not an IANA time zone (for example "Europe/Berlin", "America/New_York", "UTC")`, tz)
	}
	return &Quiet{From: f, To: t, Loc: loc, FromText: from, ToText: to, Zone: tz}, nil
}

func loadZone(tz string) (*time.Location, error) {
	// time.LoadLocation accepts "" and "Local"; an agent must name a real zone.
	if tz == "" || tz == "Local" || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") {
		return nil, fmt.Errorf("not a zone")
	}
	if tz != "UTC" && !strings.Contains(tz, "/") && tz != "GMT" {
		// Bare names such as "Berlin" or "CET"-like abbreviations are not IANA zone ids the spec accepts,
		// except the legacy ones Go ships; keep to Area/Location, UTC and GMT.
		return nil, fmt.Errorf("not a zone")
	}
	return time.LoadLocation(tz)
}

func parseHHMM(s string) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, false
	}
	return h*60 + m, true
}

// String renders the window as messages show it: "23:00–06:00 Europe/Berlin".
func (q *Quiet) String() string {
	return fmt.Sprintf("%s–%s %s", q.FromText, q.ToText, q.Zone)
}

func wallMinute(t time.Time, loc *time.Location) int {
	l := t.In(loc)
	return l.Hour()*60 + l.Minute()
}

func (q *Quiet) wallInside(m int) bool {
	if q.From < q.To {
		return m >= q.From && m < q.To
	}
	return m >= q.From || m < q.To // across midnight
}

// secondPass reports whether t lies in the repeated hour of a night the
// clocks go back, on its second pass, and by how much the clock went back.
func secondPass(t time.Time, loc *time.Location) (bool, time.Duration) {
	_, off := t.In(loc).Zone()
	for _, back := range []time.Duration{time.Hour, 30 * time.Minute, 2 * time.Hour} {
		e := t.Add(-back)
		_, offE := e.In(loc).Zone()
		if time.Duration(offE-off)*time.Second == back && e.In(loc).Format("15:04") == t.In(loc).Format("15:04") {
			return true, back
		}
	}
	return false, 0
}

// In reports whether t lies inside the window (R8.9, R8.10): the window
// follows the wall clock; in the night the clocks go back, it ends at the
// first `to` and is not re-entered in the repeated hour; in the night they
// go forward past `to`, it ends at the jump. Known, accepted limit: a `from`
// inside the repeated hour starts at the first pass; at the second pass the
// minutes before `from` count as outside.
func (q *Quiet) In(t time.Time) bool {
	m := wallMinute(t, q.Loc)
	if !q.wallInside(m) {
		return false
	}
	if sp, back := secondPass(t, q.Loc); sp && q.crossedTo(t.Add(-back), t) {
		// `to` lies inside the repeated hour and was reached on the first pass.
		return false
	}
	return true
}

// crossedTo reports whether the wall clock reached `to` strictly after first
// and not after the instant t (walking minute by minute through the first pass).
func (q *Quiet) crossedTo(first, t time.Time) bool {
	for u := first.Truncate(time.Minute).Add(time.Minute); !u.After(t); u = u.Add(time.Minute) {
		if wallMinute(u, q.Loc) == q.To {
			return true
		}
	}
	return false
}

// End returns the instant the window that holds t ends (t itself when t is outside).
func (q *Quiet) End(t time.Time) time.Time {
	if !q.In(t) {
		return t
	}
	u := t.Truncate(time.Minute)
	for i := 0; i < 48*60; i++ {
		u = u.Add(time.Minute)
		if !q.In(u) {
			return u
		}
	}
	return u
}

// Defer moves a due time that falls inside the window to the window's end
// (a digest due inside quiet hours moves to its end, R8.9).
func (q *Quiet) Defer(due time.Time) time.Time {
	if q == nil {
		return due
	}
	return q.End(due)
}
