package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// dist is a sorted set of latency samples.
type dist []time.Duration

func newDist(ds []time.Duration) dist {
	out := slices.Clone(ds)
	slices.Sort(out)
	return dist(out)
}

// q returns the nearest-rank quantile p (0 < p <= 1); 0 without samples.
func (d dist) q(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(d)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(d) {
		i = len(d) - 1
	}
	return d[i]
}

func (d dist) p50() time.Duration { return d.q(0.50) }
func (d dist) p99() time.Duration { return d.q(0.99) }

// fms formats a duration in milliseconds.
func fms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// rate is n events over wall time, per second.
func rate(n int, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(n) / wall.Seconds()
}

func frate(v float64, unit string) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "**FAIL**"
}

const mib = 1 << 20
