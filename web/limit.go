package web

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MaxFailures is how many failed tokens one address may present within a
// window before it is answered 429 until the window is over (R18.23).
const MaxFailures = 20

// maxFailAddrs bounds the addresses remembered at once; past it, windows that
// are over are dropped, and if none is, all are (an attacker with that many
// addresses is not slowed by a per-address count anyway).
const maxFailAddrs = 10000

// Failures slows failed authentication (R18.23): once an address presented
// more than MaxFailures failed tokens (owner, session, peer token, or the
// console's sign-in) within a window that begins with its first failure, every
// token it presents is answered 429 with Retry-After until that window is over
// — also a correct one, so guessing learns nothing meanwhile. The address is
// the TCP peer (RemoteAddr), never a header a client writes. Counts are per
// process.
type Failures struct {
	window time.Duration
	now    func() time.Time

	mu sync.Mutex
	m  map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

// NewFailures returns a counter with the given window (0: one minute).
func NewFailures(window time.Duration) *Failures {
	if window <= 0 {
		window = time.Minute
	}
	return &Failures{window: window, now: time.Now, m: map[string]*failWindow{}}
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Blocked returns how long r's address is still refused (0: it is not).
func (f *Failures) Blocked(r *http.Request) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blockedLocked(remoteHost(r), f.now())
}

func (f *Failures) blockedLocked(addr string, now time.Time) time.Duration {
	w := f.m[addr]
	if w == nil || w.n <= MaxFailures {
		return 0
	}
	left := w.start.Add(f.window).Sub(now)
	if left <= 0 {
		return 0
	}
	return left
}

// Fail records a failed token from r's address and returns how long the
// address is refused now (0: not yet).
func (f *Failures) Fail(r *http.Request) time.Duration {
	if f == nil {
		return 0
	}
	addr, now := remoteHost(r), f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.m[addr]
	if w == nil || !now.Before(w.start.Add(f.window)) {
		if w == nil && len(f.m) >= maxFailAddrs {
			for a, o := range f.m {
				if !now.Before(o.start.Add(f.window)) {
					delete(f.m, a)
				}
			}
			if len(f.m) >= maxFailAddrs {
				clear(f.m)
			}
		}
		w = &failWindow{start: now}
		f.m[addr] = w
	}
	w.n++
	return f.blockedLocked(addr, now)
}

// RetryAfter sets the Retry-After header for a refusal lasting d (whole
// seconds, at least 1).
func RetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(d)))
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// TooManyMessage is the sentence of a 429 for failed authentication.
func TooManyMessage(d time.Duration) string {
	return "Too many failed tokens came from this address; every token from it is refused for " +
		strconv.Itoa(retrySeconds(d)) + " s more (Retry-After). Nothing was done."
}
