package web

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestFailuresWindow (R18.23, R18.30): the 21st wrong token of an address
// within the window refuses that address's wrong tokens until the window
// (from its first failure) is over; another address is counted apart; after
// the window it starts again.
func TestFailuresWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := NewFailures(time.Minute)
	f.now = func() time.Time { return now }
	a := httptest.NewRequest("GET", "/", nil)
	a.RemoteAddr = "192.0.2.7:50000"
	a.Header.Set("X-Forwarded-For", "198.51.100.1")
	b := httptest.NewRequest("GET", "/", nil)
	b.RemoteAddr = "192.0.2.8:50001"
	wrong := func(i int) string { return "guess-" + time.Duration(i).String() + "-xxxxxxxx" } // a new prefix each time
	for i := range MaxFailures {
		if d := f.Fail(a, wrong(i)); d != 0 {
			t.Fatalf("failure %d refuses the address already (%v)", i+1, d)
		}
		now = now.Add(time.Second)
	}
	if d := f.Fail(a, wrong(100)); d != 40*time.Second {
		t.Fatalf("the 21st failure: refused for %v, want the 40 s left of the window", d)
	}
	a2 := httptest.NewRequest("POST", "/mcp", nil)
	a2.RemoteAddr = "192.0.2.7:60000" // another port of the same address
	if d := f.Fail(a2, wrong(101)); d == 0 {
		t.Errorf("a wrong token from another port of the refused address is not refused")
	}
	if d := f.Fail(b, wrong(102)); d != 0 {
		t.Errorf("another address is refused (%v)", d)
	}
	// The sign-in's own count: wrong bearer tokens do not refuse the sign-in.
	if d := f.SignInRefused(a); d != 0 {
		t.Errorf("wrong bearer tokens refuse the address's sign-in for %v", d)
	}
	now = now.Add(40 * time.Second)
	if d := f.Fail(a, wrong(103)); d != 0 {
		t.Errorf("a failure after the window refuses at once: %v", d)
	}
	w := httptest.NewRecorder()
	RetryAfter(w, 1500*time.Millisecond)
	if got := w.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2", got)
	}
}

// TestFailuresByPrefix (R18.30): one wrong token sent again and again is
// refused by its prefix from any address, and the sign-in counts failed
// sign-ins of its address apart.
func TestFailuresByPrefix(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := NewFailures(time.Minute)
	f.now = func() time.Time { return now }
	for i := range MaxFailures {
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.RemoteAddr = "192.0.2." + string(rune('0'+i%10)) + ":1" // ten addresses, two each
		if d := f.Fail(r, "rtt_stale0000token-"+string(rune('a'+i))); d != 0 {
			t.Fatalf("failure %d refused already (%v)", i+1, d)
		}
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.RemoteAddr = "198.51.100.9:1"
	if d := f.Fail(r, "rtt_stale0000token-z"); d == 0 {
		t.Errorf("the 21st wrong token with one prefix, from a new address: not refused")
	}
	if d := f.Fail(r, "another-wrong-token"); d != 0 {
		t.Errorf("another prefix from that address refused (%v)", d)
	}
	s := httptest.NewRequest("POST", "/signin", nil)
	s.RemoteAddr = "203.0.113.5:1"
	for i := range MaxFailures + 1 {
		f.FailSignIn(s, "signin-guess-"+string(rune('a'+i)))
	}
	if d := f.SignInRefused(s); d == 0 {
		t.Errorf("21 failed sign-ins do not refuse the address's sign-in")
	}
}
