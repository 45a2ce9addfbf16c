package web

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestFailuresWindow (R18.23): the 21st failed token of an address within
// the window refuses it until the window (from its first failure) is over;
// another address is counted apart; after the window it starts again.
func TestFailuresWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := NewFailures(time.Minute)
	f.now = func() time.Time { return now }
	a := httptest.NewRequest("GET", "/", nil)
	a.RemoteAddr = "192.0.2.7:50000"
	a.Header.Set("X-Forwarded-For", "198.51.100.1")
	b := httptest.NewRequest("GET", "/", nil)
	b.RemoteAddr = "192.0.2.8:50001"
	for i := range MaxFailures {
		if d := f.Fail(a); d != 0 {
			t.Fatalf("failure %d refuses the address already (%v)", i+1, d)
		}
		now = now.Add(time.Second)
	}
	if f.Blocked(a) != 0 {
		t.Fatalf("20 failures refuse the address")
	}
	if d := f.Fail(a); d != 40*time.Second {
		t.Fatalf("the 21st failure: refused for %v, want the 40 s left of the window", d)
	}
	a2 := httptest.NewRequest("POST", "/signin", nil)
	a2.RemoteAddr = "192.0.2.7:60000" // another port of the same address
	if f.Blocked(a2) == 0 || f.Blocked(b) != 0 {
		t.Errorf("blocked: same address %v, other address %v", f.Blocked(a2), f.Blocked(b))
	}
	now = now.Add(40 * time.Second)
	if d := f.Blocked(a); d != 0 {
		t.Errorf("still refused after the window: %v", d)
	}
	if d := f.Fail(a); d != 0 {
		t.Errorf("a failure after the window refuses at once: %v", d)
	}
	w := httptest.NewRecorder()
	RetryAfter(w, 1500*time.Millisecond)
	if got := w.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2", got)
	}
}
