package relaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/store"
)

// A paired relay that misbehaves on real HTTP (R13.4, §16): the peer
// client's reading of what is not a relay's answer, its timeout, and the
// /metrics page. The rules of paired relays are domain tests now
// (domain/peer*_rules_test.go, on fixtures linked in-process).

func prTool(args map[string]any) map[string]any { return map[string]any{"tool": args} }

// prRun writes a script of steps as the owner in session s, allows every
// card the turn asks meanwhile, and returns the tool results in order.
func prRun(t *testing.T, r *Relay, s Session, steps ...map[string]any) []map[string]any {
	t.Helper()
	mid := r.Message(s.ID, Script(steps...))
	var tr *store.Turn
	if !testwait.Poll(90*time.Second, 30*time.Millisecond, func() bool {
		for _, c := range r.Cards() {
			if id, _ := c["id"].(string); c["session"] == s.ID {
				r.Decide(id, "allow")
			}
		}
		tr = r.Turn(mid)
		return tr.Status.Ended()
	}) {
		t.Fatalf("turn %s of %s still %s after 90 s", mid, s.ID, tr.Status)
	}
	if tr.Status != "done" {
		t.Fatalf("turn of %s ended %s: %s", s.ID, tr.Status, tr.Error)
	}
	res := ToolResults(tr.Reply)
	if len(res) != len(steps) {
		t.Fatalf("the turn's reply holds %d tool results, want %d: %q", len(res), len(steps), tr.Reply)
	}
	return res
}

func prCode(res map[string]any) string {
	if res["ok"] == true {
		return "ok"
	}
	c, _ := res["code"].(string)
	return c
}

func prErr(res map[string]any) string {
	s, _ := res["error"].(string)
	return s
}

// fakePeer is a relay look-alike: it answers hello properly and misbehaves on
// /peer/v1/call as call says.
func prFakePeer(t *testing.T, name string, call http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/peer/v1/hello":
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"name":%q,"version":"9.9","instance":"inst-%s","features":["call","events","asks","inbox","exclude"]}`, name, name)
		case "/peer/v1/call":
			call(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPeerFaults(t *testing.T) {
	a := Start(t, Options{Config: func(c *config.Config) {
		c.Name = "alpha"
		c.Timing.PeerTimeout = time.Second
	}})
	const secret = "rpt_SECRETtokenDoNotShow123"
	const htmlBody = "<html><body>Proxy login SECRET-PAGE</body></html>"
	var hanging atomic.Int32
	fakes := map[string]*httptest.Server{
		"fhtml": prFakePeer(t, "fhtml", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(htmlBody))
		}),
		"fjunk": prFakePeer(t, "fjunk", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok": tru, "sessions": [`))
		}),
		"fhang": prFakePeer(t, "fhang", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // a read body lets the server notice the caller going away
			hanging.Add(1)
			defer hanging.Add(-1)
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		}),
		"fauth": prFakePeer(t, "fauth", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"This is not a peer token of this relay.","code":"REMOTE_RELAY_AUTH"}`))
		}),
	}
	for name, srv := range fakes {
		var p map[string]any
		if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": srv.URL, "token": secret, "name": name}, &p); st != 201 {
			t.Fatalf("pair %s: %d %v", name, st, p)
		}
	}
	sa := a.NewSession(map[string]any{"title": "caller"})
	list := func(name string) map[string]any {
		return prTool(map[string]any{"action": "list_sessions", "relay": name})
	}
	start := time.Now()
	res := prRun(t, a, sa, list("fhtml"), list("fjunk"), list("fhang"), list("fauth"))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("four faulty calls took %s", d)
	}
	want := map[string]string{"fhtml": "REMOTE_RELAY_OFFLINE", "fjunk": "REMOTE_RELAY_OFFLINE", "fhang": "REMOTE_RELAY_OFFLINE", "fauth": "REMOTE_RELAY_AUTH"}
	for i, name := range []string{"fhtml", "fjunk", "fhang", "fauth"} {
		r := res[i]
		e := prErr(r)
		t.Logf("%s: %s: %s", name, prCode(r), e)
		if prCode(r) != want[name] {
			t.Errorf("%s: got %s (%s), want %s", name, prCode(r), e, want[name])
		}
		if !strings.Contains(e, `"`+name+`"`) {
			t.Errorf("%s: the error should name the relay: %q", name, e)
		}
		raw, _ := json.Marshal(r)
		for _, leak := range []string{secret, "SECRET-PAGE", "<html", "tru,"} {
			if strings.Contains(string(raw), leak) {
				t.Errorf("%s: the envelope shows %q: %s", name, leak, raw)
			}
		}
	}
	if e := prErr(res[2]); !strings.Contains(e, "within 1s") {
		t.Errorf("fhang: the error should say the timeout: %q", e)
	}
	// list_relays shows them offline now (not fjunk's garbage nor the token).
	res = prRun(t, a, sa, prTool(map[string]any{"action": "list_relays"}))
	raw, _ := json.Marshal(res[0])
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "SECRET-PAGE") {
		t.Errorf("list_relays shows a secret: %s", raw)
	}
	rels, _ := res[0]["relays"].([]any)
	for _, x := range rels {
		m := x.(map[string]any)
		if m["name"] == "fhang" || m["name"] == "fauth" || m["name"] == "fhtml" {
			if m["online"] != false {
				t.Errorf("list_relays: %s should be offline after its failure: %v", m["name"], m)
			}
		}
	}

	// §16: the link state and the failed requests show in /metrics.
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`relay_peer_requests_total{code="REMOTE_RELAY_OFFLINE",kind="call"}`,
		`relay_peer_requests_total{code="REMOTE_RELAY_AUTH",kind="call"}`, `relay_paired_relays_offline 4`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// No blocking: while one session waits on the hanging relay, another
	// session's local call answers at once.
	mid := a.Message(sa.ID, Script(prTool(map[string]any{"action": "wait", "relay": "fhang", "session": "zzzzzzzzzzzz", "wait_seconds": 6})))
	Eventually(t, 10*time.Second, func() bool { return hanging.Load() > 0 }, "the call to reach the hanging relay")
	s2 := a.NewSession(map[string]any{"title": "other"})
	t0 := time.Now()
	local, _ := a.InTurn(s2, map[string]any{"action": "list_sessions"}, "")
	if local["ok"] != true {
		t.Fatalf("local call meanwhile: %v", local)
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("the local call took %s while another session waited on a hanging relay", d)
	}
	if tr := a.Turn(mid); tr.Status != "running" {
		t.Errorf("the hanging call's turn should still be running, is %s", tr.Status)
	}
	tr := a.WaitTurn(mid, 30*time.Second, "done", "error", "stopped")
	hres := ToolResults(tr.Reply)
	if len(hres) != 1 || prCode(hres[0]) != "REMOTE_RELAY_OFFLINE" || !strings.Contains(prErr(hres[0]), `"fhang"`) {
		t.Errorf("the hanging wait: %v", hres)
	}
}
