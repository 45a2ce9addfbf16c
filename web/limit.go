package web

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MaxFailures is how many wrong tokens one address (or one token's
// beginning) may present within a window before its wrong tokens are answered
// 429 until the window is over (R18.23, R18.30).
const MaxFailures = 20

// maxFailKeys bounds the counts remembered at once; past it, windows that are
// over are dropped, and if none is, all are (an attacker with that many
// addresses is not slowed by a per-address count anyway).
const maxFailKeys = 10000

// prefixLen is how much of a wrong token its prefix count keys on: enough to
// tell one stale token from another, kept only as a hash.
const prefixLen = 12

// Failures slows failed authentication (R18.23) without ever refusing a
// correct token (R18.30). A wrong token (owner, session or peer token, or one
// typed into the console's sign-in) is counted twice: for the address it came
// from (the TCP peer, RemoteAddr, never a header a client writes) and for its
// first characters (a stale token sent again and again, from wherever). Once
// either count passed MaxFailures within a window that begins with its first
// failure, every wrong token it covers is answered 429 with Retry-After until
// that window is over. A correct token is always checked first and served, so
// one agent's wrong tokens never make the owner or another session wait.
//
// The console's sign-in has a count of its own per address, of failed
// sign-ins only: it is checked before the form is read (R18.29), where the
// token is not known yet, so wrong bearer tokens of an agent on the same
// address do not refuse the owner's sign-in. Counts are per process.
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

// The keys of the counts: a token's address, its prefix (hashed: no part of
// a token is kept), and the sign-in's address.
func addrKey(r *http.Request) string   { return "a " + remoteHost(r) }
func signInKey(r *http.Request) string { return "s " + remoteHost(r) }
func prefixKey(token string) string {
	h := sha256.Sum256([]byte("relay failed token prefix\x00" + token[:min(len(token), prefixLen)]))
	return "p " + hex.EncodeToString(h[:8])
}

// Fail records a wrong token from r and returns how long wrong tokens from
// its address or with its prefix are refused now (0: not yet). Call it only
// for a token that was checked and is wrong.
func (f *Failures) Fail(r *http.Request, token string) time.Duration {
	return f.fail(addrKey(r), prefixKey(token))
}

// FailSignIn is Fail for a wrong token typed into the console's sign-in: it
// counts for the sign-in of r's address too ([Failures.SignInRefused]).
func (f *Failures) FailSignIn(r *http.Request, token string) time.Duration {
	return f.fail(addrKey(r), prefixKey(token), signInKey(r))
}

// SignInRefused returns how long the console's sign-in refuses r's address
// (0: it does not): more than MaxFailures failed sign-ins came from it within
// the window. It needs no token, so the sign-in asks it before reading its
// form (R18.29).
func (f *Failures) SignInRefused(r *http.Request) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refusedLocked(signInKey(r), f.now())
}

func (f *Failures) refusedLocked(key string, now time.Time) time.Duration {
	w := f.m[key]
	if w == nil || w.n <= MaxFailures {
		return 0
	}
	return max(0, w.start.Add(f.window).Sub(now))
}

// fail counts one failure on each key and returns the longest refusal of them.
func (f *Failures) fail(keys ...string) time.Duration {
	if f == nil {
		return 0
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var d time.Duration
	for _, k := range keys {
		w := f.m[k]
		if w == nil || !now.Before(w.start.Add(f.window)) {
			if w == nil && len(f.m) >= maxFailKeys {
				for a, o := range f.m {
					if !now.Before(o.start.Add(f.window)) {
						delete(f.m, a)
					}
				}
				if len(f.m) >= maxFailKeys {
					clear(f.m)
				}
			}
			w = &failWindow{start: now}
			f.m[k] = w
		}
		w.n++
		d = max(d, f.refusedLocked(k, now))
	}
	return d
}

// RetryAfter sets the Retry-After header for a refusal lasting d (whole
// seconds, at least 1).
func RetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(d)))
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// TooManyMessage is the sentence of a 429 for a wrong token while wrong
// tokens are slowed.
func TooManyMessage(d time.Duration) string {
	return "This token is wrong, and too many wrong tokens came from this address (or began like this one); wrong tokens are refused for " +
		strconv.Itoa(retrySeconds(d)) + " s more (Retry-After). A correct token is served. Nothing was done."
}

// SignInRefusedMessage is the sentence of a sign-in refused before its form
// was read.
func SignInRefusedMessage(d time.Duration) string {
	return "Too many failed sign-ins came from this address; sign-in from it is refused for " +
		strconv.Itoa(retrySeconds(d)) + " s more (Retry-After). Nothing was read. The owner token still works with the API."
}
