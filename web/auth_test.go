package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// memSessions is Sessions in memory, with expiry on a test clock.
type memSessions struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]memSession
}

type memSession struct {
	owner string
	exp   time.Time
}

func (m *memSessions) AddConsoleSession(_ context.Context, id, owner string, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[id] = memSession{owner, m.now().Add(ttl)}
	return nil
}

func (m *memSessions) ConsoleSession(_ context.Context, id string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[id]
	if !ok || !m.now().Before(s.exp) {
		return "", false, nil
	}
	return s.owner, true, nil
}

func (m *memSessions) EndConsoleSession(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
	return nil
}

// TestCookieIsAServerSideSession (R18.22): the cookie holds a random id of a
// session kept in the store; it is HttpOnly and SameSite=Strict, never holds
// the token, stops working when signed out (also a copy of it), when the
// owner token changes, and when it expires.
func TestCookieIsAServerSideSession(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	store := &memSessions{now: clock, m: map[string]memSession{}}
	a := NewAuth("owner-token-0123456789", store)
	a.now = clock
	signIn := func(a *Auth) string {
		t.Helper()
		w := httptest.NewRecorder()
		if err := a.SetCookie(w, httptest.NewRequest("POST", "/signin", nil)); err != nil {
			t.Fatal(err)
		}
		cs := w.Result().Cookies()
		if len(cs) != 1 || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Secure || cs[0].Path != "/" {
			t.Fatalf("cookie %+v: want one HttpOnly SameSite=Strict cookie on / (not Secure over plain HTTP)", cs)
		}
		if strings.Contains(cs[0].Value, "owner-token") {
			t.Fatalf("the cookie holds the owner token")
		}
		return cs[0].Value
	}
	req := func(v string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: CookieName, Value: v})
		return r
	}
	v := signIn(a)
	if !a.Cookie(req(v)) {
		t.Fatalf("a fresh cookie is not valid")
	}
	if v2 := signIn(a); v2 == v {
		t.Errorf("two sign-ins got the same session id")
	}
	if NewAuth("another-owner-token-012", store).Cookie(req(v)) {
		t.Errorf("a session stays valid after the owner token changed")
	}
	if NewAuth("", store).Cookie(req(v)) {
		t.Errorf("a relay without an owner token accepts a cookie")
	}
	// R18.19: a relay that keeps only the token's hash (a generated owner
	// token, a later start) takes the token and the sessions signed in with it.
	byHash := NewAuthHash(tokenHash("owner-token-0123456789"), store)
	if !byHash.Cookie(req(v)) || !byHash.CheckToken("owner-token-0123456789") {
		t.Errorf("the owner token's hash does not take its token or its session")
	}
	if byHash.CheckToken(tokenHash("owner-token-0123456789")) || byHash.CheckToken("") || NewAuthHash("", store).CheckToken("") {
		t.Errorf("the hash itself or nothing passes as the owner token")
	}
	for _, bad := range []string{"", "v2", "v2.", v + "0", "v1" + v[2:], v[:len(v)-1] + "x", strings.Repeat("A", len(v))} {
		if a.Cookie(req(bad)) {
			t.Errorf("cookie %q accepted", bad)
		}
	}
	// A session the store does not have (e.g. a forged id of the right shape).
	if a.Cookie(req("v2." + strings.Repeat("A", 43))) {
		t.Errorf("an id the store does not know is accepted")
	}
	// Signing out ends the session: the same cookie value no longer works.
	w := httptest.NewRecorder()
	if err := a.SignOut(w, req(v)); err != nil {
		t.Fatal(err)
	}
	if cs := w.Result().Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Errorf("sign-out cookies %+v: want the cookie cleared", cs)
	}
	if a.Cookie(req(v)) {
		t.Errorf("a cookie still works after signing out")
	}
	// Expiry.
	v = signIn(a)
	now = now.Add(cookieLife + time.Second)
	if a.Cookie(req(v)) {
		t.Errorf("an expired session is accepted")
	}
	tls := httptest.NewRequest("POST", "/signin", nil)
	tls.Header.Set("X-Forwarded-Proto", "https")
	w = httptest.NewRecorder()
	if err := a.SetCookie(w, tls); err != nil {
		t.Fatal(err)
	}
	if !w.Result().Cookies()[0].Secure {
		t.Errorf("behind a TLS proxy the cookie is not Secure")
	}
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		host, origin, referer string
		ok                    bool
	}{
		{"127.0.0.1:7420", "http://127.0.0.1:7420", "", true},
		{"relay.example", "https://relay.example", "", true},
		{"127.0.0.1:7420", "", "http://127.0.0.1:7420/s/abc", true},
		{"127.0.0.1:7420", "", "", false},
		{"127.0.0.1:7420", "null", "http://127.0.0.1:7420/", false},
		{"127.0.0.1:7420", "http://127.0.0.1:7421", "", false},
		{"127.0.0.1:7420", "http://evil.example", "http://127.0.0.1:7420/", false},
		{"127.0.0.1:7420", "file://127.0.0.1:7420", "", false},
		{"127.0.0.1:7420", "http://127.0.0.1:7420.evil.example", "", false},
	} {
		r := httptest.NewRequest("POST", "/api/v1/settings", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.referer != "" {
			r.Header.Set("Referer", c.referer)
		}
		if got := SameOrigin(r); got != c.ok {
			t.Errorf("host %s origin %q referer %q: SameOrigin %v, want %v", c.host, c.origin, c.referer, got, c.ok)
		}
	}
}

// TestSafeNext (R18.22): the sign-in's next is a path on this relay, or "/".
func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/inbox": "/inbox", "/s/abc?x=1": "/s/abc?x=1", "/s/abc#m1": "/s/abc#m1", "/": "/", "/waiting": "/waiting",
		"": "/", "inbox": "/",
		"//evil.example": "/", "//evil.com": "/", "///evil.com": "/",
		"/\\evil.com": "/", "/\\/evil.com": "/", "\\\\evil.com": "/", "/%5Cevil.com": "/", "/%5cevil.com": "/", "/%2F%2Fevil.com": "/",
		"/%2fevil.com":          "/",
		"https://evil.example/": "/", "https://evil.com": "/", "http:/evil.com": "/", "HTTPS://evil.com": "/",
		"javascript:alert(1)": "/", "JavaScript:alert(1)": "/", "/javascript:alert(1)": "/javascript:alert(1)",
		"/\tevil.com": "/", "/\t/evil.com": "/", "/\n/evil.com": "/", "/\r\n/evil.com": "/", "/\x00/evil.com": "/",
		"/\x7f": "/", "/\u0085/evil.com": "/", " /inbox": "/", "/%0d%0aSet-Cookie:x": "/%0d%0aSet-Cookie:x",
		"/api/v1/settings": "/", "/static/": "/", "/%61pi/v1/settings": "/",
		"/@evil.com": "/@evil.com", "/s/x@evil.com": "/s/x@evil.com",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
