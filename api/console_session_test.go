package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/web"
)

// TestConsoleSessionEnds (R18.22): the console's sign-in is a session kept in
// Redis: signing out ends it at once (the cookie, copied before, no longer
// opens a page or the owner API), and a relay started with another owner
// token accepts no session of the old one. The sign-in's next takes only a
// path on this relay.
func TestConsoleSessionEnds(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	ct := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": r.URL}
	opens := func(r *relaytest.Relay, c *http.Cookie) (page, api bool) {
		t.Helper()
		_, body := request(t, "GET", r.URL+"/", "", nil, c)
		resp, _ := request(t, "GET", r.URL+"/api/v1/settings", "", nil, c)
		return strings.Contains(body, "live-sessions"), resp.StatusCode == http.StatusOK
	}
	c := signIn(t, r)
	if !strings.HasPrefix(c.Value, "v2.") {
		t.Errorf("cookie %q: want a session id", c.Value)
	}
	if page, api := opens(r, c); !page || !api {
		t.Fatalf("a fresh sign-in: page %v, owner API %v", page, api)
	}
	kept := &http.Cookie{Name: c.Name, Value: c.Value} // a copy, as a thief would keep it
	second := signIn(t, r)
	if resp, _ := request(t, "POST", r.URL+"/signout", "", map[string]string{"Origin": r.URL}, c); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: status %d", resp.StatusCode)
	}
	if page, api := opens(r, kept); page || api {
		t.Errorf("the cookie still works after signing out: page %v, owner API %v", page, api)
	}
	if page, api := opens(r, second); !page || !api {
		t.Errorf("signing out one browser ended another's session: page %v, owner API %v", page, api)
	}

	// next: only a path on this relay.
	for _, next := range []string{"/\\evil.com", "//evil.com", "/%5Cevil.com", "https://evil.com", "/\t/evil.com", "javascript:alert(1)"} {
		resp, _ := request(t, "POST", r.URL+"/signin", url.Values{"token": {relaytest.OwnerToken}, "next": {next}}.Encode(), ct, nil)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/" {
			t.Errorf("next=%q: status %d, Location %q; want 303 to /", next, resp.StatusCode, loc)
		}
	}
	resp, _ := request(t, "POST", r.URL+"/signin", url.Values{"token": {relaytest.OwnerToken}, "next": {"/waiting"}}.Encode(), ct, nil)
	if loc := resp.Header.Get("Location"); loc != "/waiting" {
		t.Errorf("next=/waiting: Location %q", loc)
	}

	// The owner token rotated: the relay restarted with another one on the same Redis.
	r.Stop()
	r2 := relaytest.Start(t, relaytest.Options{Redis: r.Redis, Config: func(c *config.Config) { c.OwnerToken = "a-new-owner-token-0123456789" }})
	if page, api := opens(r2, second); page || api {
		t.Errorf("a session of the old owner token works after the rotation: page %v, owner API %v", page, api)
	}
	form := url.Values{"token": {"a-new-owner-token-0123456789"}, "next": {"/"}}.Encode()
	resp, _ = request(t, "POST", r2.URL+"/signin", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": r2.URL}, nil)
	var fresh *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == web.CookieName {
			fresh = &http.Cookie{Name: k.Name, Value: k.Value}
		}
	}
	if fresh == nil {
		t.Fatalf("sign-in with the new token: status %d, no cookie", resp.StatusCode)
	}
	if page, api := opens(r2, fresh); !page || !api {
		t.Errorf("a sign-in with the new token: page %v, owner API %v", page, api)
	}
}
