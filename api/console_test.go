package api_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/web"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// answer is what request keeps of a response (its body is read and closed).
type answer struct {
	StatusCode int
	Header     http.Header
	cookies    []*http.Cookie
}

func (a *answer) Cookies() []*http.Cookie { return a.cookies }

func request(t *testing.T, method, u, body string, hdr map[string]string, cookie *http.Cookie) (*answer, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &answer{StatusCode: resp.StatusCode, Header: resp.Header, cookies: resp.Cookies()}, string(b)
}

func signIn(t *testing.T, r *relaytest.Relay) *http.Cookie {
	t.Helper()
	form := url.Values{"token": {relaytest.OwnerToken}, "next": {"/inbox"}}.Encode()
	resp, _ := request(t, "POST", r.URL+"/signin", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": r.URL}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/inbox" {
		t.Fatalf("sign-in: status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range resp.Cookies() {
		if c.Name == web.CookieName {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Value == "" {
				t.Fatalf("sign-in cookie %+v: want HttpOnly, SameSite=Strict, Path=/", c)
			}
			if strings.Contains(c.Value, relaytest.OwnerToken) {
				t.Fatalf("the cookie holds the owner token")
			}
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("sign-in set no cookie")
	return nil
}

// TestConsoleSignIn: without a valid cookie every console page shows only
// the sign-in; a wrong token or another origin is refused; sign-out clears
// the cookie (R19.1).
func TestConsoleSignIn(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	form := func(token string) string { return url.Values{"token": {token}, "next": {"/"}}.Encode() }
	ct := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": r.URL}

	for _, p := range []string{"/", "/waiting", "/inbox", "/settings", "/relays", "/s/0123456789abcdef"} {
		resp, body := request(t, "GET", r.URL+p, "", nil, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="token"`) || strings.Contains(body, "live-nav") {
			t.Errorf("GET %s without a cookie: status %d, want only the sign-in: %.300s", p, resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
	}
	resp, body := request(t, "POST", r.URL+"/signin", form("wrong-token-wrong-token"), ct, nil)
	if len(resp.Cookies()) != 0 || !strings.Contains(body, "That is not this relay") {
		t.Errorf("wrong token: cookies %v, body %.300s", resp.Cookies(), body)
	}
	resp, _ = request(t, "POST", r.URL+"/signin", form(relaytest.OwnerToken), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, nil)
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in without Origin: status %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	resp, _ = request(t, "POST", r.URL+"/signin", form(relaytest.OwnerToken), map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}, nil)
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in from another origin: status %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	// An open redirect is not possible through next.
	resp, _ = request(t, "POST", r.URL+"/signin", url.Values{"token": {relaytest.OwnerToken}, "next": {"//evil.example/x"}}.Encode(), ct, nil)
	if loc := resp.Header.Get("Location"); loc != "/" {
		t.Errorf("next=//evil.example: Location %q, want /", loc)
	}

	c := signIn(t, r)
	resp, body = request(t, "GET", r.URL+"/", "", nil, c)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "live-sessions") {
		t.Fatalf("GET / with the cookie: status %d: %.300s", resp.StatusCode, body)
	}
	for p, want := range map[string]string{"/?archived=1": "live-archived", "/waiting": "live-waiting", "/inbox": "live-inbox",
		"/settings": "max_turn_seconds", "/relays": "Pair a relay", "/s/" + r.NewSession(nil).ID: "live-msgs"} {
		resp, body := request(t, "GET", r.URL+p, "", nil, c)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s with the cookie: status %d, want %q in: %.300s", p, resp.StatusCode, want, body)
		}
	}
	if resp, _ := request(t, "GET", r.URL+"/s/0123456789abcdef", "", nil, c); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET an unknown session: status %d, want 404", resp.StatusCode)
	}
	tail := "00" // a different ending: a cookie that already ends in "00" made this test pass the real one
	if strings.HasSuffix(c.Value, tail) {
		tail = "11"
	}
	forged := &http.Cookie{Name: c.Name, Value: c.Value[:len(c.Value)-2] + tail}
	if _, body := request(t, "GET", r.URL+"/", "", nil, forged); strings.Contains(body, "live-sessions") {
		t.Errorf("a forged cookie opened the console")
	}
	// Sign-out: Origin checked, cookie cleared.
	if resp, _ := request(t, "POST", r.URL+"/signout", "", map[string]string{"Origin": "https://evil.example"}, c); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out from another origin: status %d, want 403", resp.StatusCode)
	}
	resp, _ = request(t, "POST", r.URL+"/signout", "", map[string]string{"Origin": r.URL}, c)
	cleared := false
	for _, k := range resp.Cookies() {
		if k.Name == web.CookieName && k.MaxAge < 0 && k.Value == "" {
			cleared = true
		}
	}
	if resp.StatusCode != http.StatusSeeOther || !cleared {
		t.Errorf("sign-out: status %d, cookies %v; want 303 and the cookie cleared", resp.StatusCode, resp.Cookies())
	}
	// Static files are served from the binary.
	for _, f := range []string{"/static/console.js", "/static/console.css", "/static/icon.svg"} {
		if resp, body := request(t, "GET", r.URL+f, "", nil, nil); resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: status %d", f, resp.StatusCode)
		}
	}
}

// TestOwnerAPICookie: the owner API takes the cookie as well as the bearer
// token; with the cookie a state-changing request must come from this origin
// (R19.1); bearer requests work as before.
func TestOwnerAPICookie(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	c := signIn(t, r)
	patch := `{"quiet_task_minutes": 12}`
	js := map[string]string{"Content-Type": "application/json"}
	with := func(k, v string) map[string]string {
		return map[string]string{"Content-Type": "application/json", k: v}
	}

	if resp, body := request(t, "GET", r.URL+"/api/v1/settings", "", nil, c); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /settings with the cookie: %d %s", resp.StatusCode, body)
	}
	if resp, _ := request(t, "GET", r.URL+"/api/v1/settings", "", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /settings with nothing: %d, want 401", resp.StatusCode)
	}
	for name, h := range map[string]map[string]string{
		"no Origin":             js,
		"another origin":        with("Origin", "https://evil.example"),
		"another port":          with("Origin", "http://127.0.0.1:1"),
		"Origin null":           with("Origin", "null"),
		"a Referer from afar":   with("Referer", "https://evil.example/page"),
		"a lookalike subdomain": with("Origin", strings.Replace(r.URL, "127.0.0.1", "127.0.0.1.evil.example", 1)),
	} {
		resp, body := request(t, "PATCH", r.URL+"/api/v1/settings", patch, h, c)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "REMOTE_RELAY_FORBIDDEN") {
			t.Errorf("PATCH /settings with the cookie and %s: %d %s, want 403", name, resp.StatusCode, body)
		}
	}
	var st map[string]any
	r.Owner("GET", "/api/v1/settings", nil, &st)
	if st["quiet_task_minutes"] == float64(12) {
		t.Fatalf("a refused request changed the settings")
	}
	if resp, body := request(t, "PATCH", r.URL+"/api/v1/settings", patch, with("Origin", r.URL), c); resp.StatusCode != http.StatusOK {
		t.Errorf("PATCH /settings with the cookie from this origin: %d %s", resp.StatusCode, body)
	}
	// Bearer: as before, no Origin needed; a wrong bearer is 401 even with a good cookie.
	if resp, body := request(t, "PATCH", r.URL+"/api/v1/settings", `{"quiet_task_minutes": 13}`, with("Authorization", "Bearer "+relaytest.OwnerToken), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("PATCH /settings with the bearer token: %d %s", resp.StatusCode, body)
	}
	h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer wrong-token-wrong", "Origin": r.URL}
	if resp, _ := request(t, "PATCH", r.URL+"/api/v1/settings", patch, h, c); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token with a good cookie: %d, want 401", resp.StatusCode)
	}
	// A session token is not an owner token, cookie or not.
	s := r.NewSession(nil)
	if resp, _ := request(t, "GET", r.URL+"/api/v1/settings", "", map[string]string{"Authorization": "Bearer " + s.Token}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session token on the owner API: %d, want 401", resp.StatusCode)
	}
}

// sse reads a Server-Sent Events stream into events "name data".
type sse struct {
	events chan string
	resp   *http.Response
	cancel context.CancelFunc
}

func openStream(t *testing.T, u string, hdr map[string]string, cookie *http.Cookie) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", u+"/api/v1/stream", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed by sse.close, registered with t.Cleanup below
	if err != nil {
		cancel()
		t.Fatalf("open stream: %v", err)
	}
	s := &sse{events: make(chan string, 100), resp: resp, cancel: cancel}
	t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		return s
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream Content-Type %q", ct)
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		ev, data := "", ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev != "":
				s.events <- ev + " " + data
				ev, data = "", ""
			}
		}
	}()
	return s
}

func (s *sse) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

// wait returns once an event with the prefix arrives; it fails after d.
func (s *sse) wait(t *testing.T, prefix string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.After(d)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended while waiting for %q", prefix)
			}
			if strings.HasPrefix(e, prefix) {
				return time.Since(start)
			}
		case <-timer:
			t.Fatalf("no %q event within %s", prefix, d)
		}
	}
}

// TestStream: /api/v1/stream with the cookie or the owner token sends
// session, card, inbox and settings changes; after a relay restart a new
// stream works with the same cookie (R19.6).
func TestStream(t *testing.T) {
	rd := relaytest.NewRedis(t)
	r := relaytest.Start(t, relaytest.Options{Redis: rd})
	if s := openStream(t, r.URL, nil, nil); s.resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("stream without credentials: %d, want 401", s.resp.StatusCode)
	}
	sess := r.NewSession(nil)
	if s := openStream(t, r.URL, map[string]string{"Authorization": "Bearer " + sess.Token}, nil); s.resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("stream with a session token: %d, want 401", s.resp.StatusCode)
	}
	c := signIn(t, r)
	byCookie := openStream(t, r.URL, nil, c)
	byToken := openStream(t, r.URL, map[string]string{"Authorization": "Bearer " + relaytest.OwnerToken}, nil)
	byCookie.wait(t, "hello ", 5*time.Second)
	byToken.wait(t, "hello ", 5*time.Second)

	r.Owner("PATCH", "/api/v1/settings", map[string]any{"quiet_task_minutes": 11}, nil)
	byCookie.wait(t, "settings", 5*time.Second)
	byToken.wait(t, "settings", 5*time.Second)

	r.Message(sess.ID, "hello")
	byCookie.wait(t, "session "+sess.ID, 5*time.Second)
	byToken.wait(t, "session "+sess.ID, 5*time.Second)

	orch := r.NewSession(nil)
	mid := r.Message(orch.ID, relaytest.Script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "hi"}}))
	d := byCookie.wait(t, "cards", 5*time.Second)
	t.Logf("card event after %s", d)
	card := r.WaitCard(orch.ID)
	r.Decide(card["id"].(string), "deny")
	byCookie.wait(t, "cards "+card["id"].(string), 5*time.Second)
	r.WaitTurn(mid, 20*time.Second, "done")

	asker := r.NewSession(nil)
	r.InTurn(asker, map[string]any{"action": "ask", "question": "Which one?"}, "")
	byCookie.wait(t, "inbox", 5*time.Second)

	// Restart: the stream ends; the same cookie opens a new one on the new process.
	addr := strings.TrimPrefix(r.URL, "http://")
	r.Stop()
	relaytest.Eventually(t, 10*time.Second, func() bool {
		select {
		case _, ok := <-byCookie.events:
			return !ok
		default:
			return false
		}
	}, "the stream to end when the relay stops")
	r2 := relaytest.Start(t, relaytest.Options{Redis: rd, Config: func(cfg *config.Config) { cfg.Addr = addr }})
	again := openStream(t, r2.URL, nil, c)
	if again.resp.StatusCode != http.StatusOK {
		t.Fatalf("stream after the restart with the same cookie: %d", again.resp.StatusCode)
	}
	again.wait(t, "hello ", 5*time.Second)
	r2.Message(sess.ID, "after the restart")
	again.wait(t, "session "+sess.ID, 5*time.Second)
}
