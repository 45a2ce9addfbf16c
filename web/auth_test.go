package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestCookieSignedExpiringAndBoundToTheToken(t *testing.T) {
	a := NewAuth("owner-token-0123456789")
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	w := httptest.NewRecorder()
	a.SetCookie(w, httptest.NewRequest("POST", "/signin", nil))
	cs := w.Result().Cookies()
	if len(cs) != 1 || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Secure {
		t.Fatalf("cookie %+v: want one HttpOnly SameSite=Strict cookie (not Secure over plain HTTP)", cs)
	}
	req := func(v string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: CookieName, Value: v})
		return r
	}
	v := cs[0].Value
	if !a.Cookie(req(v)) {
		t.Fatalf("a fresh cookie is not valid")
	}
	if NewAuth("another-owner-token-012").Cookie(req(v)) {
		t.Errorf("a cookie stays valid after the owner token changed")
	}
	if NewAuth("").Cookie(req(v)) {
		t.Errorf("a relay without an owner token accepts a cookie")
	}
	for _, bad := range []string{"", "v1", v + "0", "v2" + v[2:], v[:len(v)-1] + "x"} {
		if a.Cookie(req(bad)) {
			t.Errorf("cookie %q accepted", bad)
		}
	}
	now = now.Add(cookieLife + time.Second)
	if a.Cookie(req(v)) {
		t.Errorf("an expired cookie is accepted")
	}
	tls := httptest.NewRequest("POST", "/signin", nil)
	tls.Header.Set("X-Forwarded-Proto", "https")
	w = httptest.NewRecorder()
	a.SetCookie(w, tls)
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

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{"/inbox": "/inbox", "/s/abc?x=1": "/s/abc?x=1", "": "/", "//evil.example": "/",
		"https://evil.example/": "/", "/api/v1/settings": "/", "javascript:alert(1)": "/", "inbox": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
