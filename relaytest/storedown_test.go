package relaytest

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// storeDownMsg is the owner API's and relay_tool's sentence while the store
// does not answer (R25.3): a short cause in the parentheses, no address.
var storeDownMsg = regexp.MustCompile(`^The relay's store does not answer \(([a-z ]+)\); nothing was changed\.$`)

// R25.3: a `relay serve` process whose Redis (a redis-server of the test's
// own, on a free port) stops: the log gets each distinct failure at ERROR
// once, not ~8 lines a second (counted over a window of several seconds in
// which the owner API and relay_tool are called too); owner API routes answer
// 503 REMOTE_RELAY_UNAVAILABLE with the sentence, relay_tool the same code,
// /readyz 503. Redis started again on the same port: "store reachable again"
// is logged and the calls work again.
func TestStoreDownLogsOnceAndAnswers503(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` and redis-server processes")
	}
	t.Parallel()
	rs := startRedisServer(t)
	p := newEmbProc(t, "relay", embConfig(t, t.TempDir()), "", rs.url(), OwnerToken)
	p.start()
	s := p.newSession("before")
	m := p.api.Connect(s.Token, nil)
	m.MustOK(map[string]any{"action": "list_sessions", "relay": "this"})

	rs.stop()
	var body map[string]any
	var st int
	Eventually(t, 30*time.Second, func() bool {
		body = nil
		st = p.owner("GET", "/api/v1/sessions", nil, &body)
		return st >= 500
	}, "GET /api/v1/sessions to fail while Redis is down")
	if st != http.StatusServiceUnavailable {
		t.Errorf("GET /api/v1/sessions while Redis is down: %d, want 503", st)
	}
	// The log from here on: some seconds of an outage with calls in it.
	from := len(p.out.String())
	checkBody := func(what string, code any, msg any) {
		t.Helper()
		txt, _ := msg.(string)
		if code != "REMOTE_RELAY_UNAVAILABLE" || !storeDownMsg.MatchString(txt) {
			t.Errorf("%s while Redis is down: code %v, error %q; want REMOTE_RELAY_UNAVAILABLE, %s", what, code, txt, storeDownMsg)
		}
	}
	checkBody("GET /api/v1/sessions", body["code"], body["error"])
	if st := p.owner("POST", "/api/v1/sessions/"+s.ID+"/messages", map[string]any{"text": "during"}, &body); st != http.StatusServiceUnavailable {
		t.Errorf("POST message while Redis is down: %d %v", st, body)
	}
	checkBody("POST message", body["code"], body["error"])
	env, isErr := m.Call(map[string]any{"action": "list_sessions", "relay": "this"})
	if !isErr {
		t.Errorf("relay_tool while Redis is down: %v", env)
	}
	checkBody("relay_tool list_sessions", env["code"], env["error"])
	if st := p.owner("GET", "/readyz", nil, nil); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while Redis is down, want 503", st)
	}
	window := time.Now().Add(6 * time.Second)
	for time.Now().Before(window) {
		p.owner("GET", "/api/v1/sessions/"+s.ID, nil, nil)
		p.owner("GET", "/readyz", nil, nil) // a load balancer's probe
		m.Call(map[string]any{"action": "read_session", "relay": "this", "session": s.ID})
		time.Sleep(200 * time.Millisecond)
	}
	during := p.out.String()[from:]
	// Each distinct failure once (a handful of them: the owner API, relay_tool,
	// the queue library's loops, the relay's own loops), not ~8 a second.
	if n := strings.Count(during, "level=ERROR"); n > 15 {
		t.Errorf("%d ERROR lines in ~6 s of a Redis outage, want each distinct failure once (≤ 15):\n%s", n, during)
	}

	rs.start()
	Eventually(t, 60*time.Second, func() bool { return strings.Contains(p.out.String()[from:], `msg="store reachable again"`) },
		"the log to say the store is reachable again")
	Eventually(t, 30*time.Second, func() bool { return p.owner("GET", "/readyz", nil, nil) == http.StatusOK }, "/readyz 200 again")
	if st := p.owner("GET", "/api/v1/sessions", nil, &body); st != http.StatusOK {
		t.Fatalf("GET /api/v1/sessions after Redis came back: %d %v", st, body)
	}
	m.MustOK(map[string]any{"action": "list_sessions", "relay": "this"})
	p.say(s.ID, "after the outage")
	if t.Failed() {
		t.Logf("log of the outage:\n%s", during)
	}
}
