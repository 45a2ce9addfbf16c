package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oar/relay/metrics"
)

// A paired relay's answers are data (R18.32–R18.34): linked fixtures where
// the paired relay answers what the test makes it answer (peerEnd.setAnswer).

// randomCode is a code a hostile paired relay might answer: some look like
// codes ([A-Z0-9_], at most 64), some do not (long, lower case, spaces).
func randomCode(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("EVIL_CODE_%d_%d", i, rand.IntN(1<<30))
	case 1:
		return strings.Repeat("X", 65+i) // too long for remoteCode
	case 2:
		return fmt.Sprintf("evil code {%d} \"%d\"", i, rand.IntN(1<<30))
	default:
		return fmt.Sprintf("REMOTE_RELAY_MADE_UP_%d", i)
	}
}

// TestPeerErrorCodesAreData (R18.32): fifty calls to a paired relay that
// answers each with an error code of its own (half in a failed envelope, half
// as an HTTP error answer): every result is REMOTE_RELAY_INTERNAL with the
// peer's code in remoteCode only when it is [A-Z0-9_]{1,64}, and the metrics
// hold no label value outside R15's closed set.
func TestPeerErrorCodesAreData(t *testing.T) {
	m := metrics.New()
	a, b := linkPair(t, peerEndOptions{metrics: m}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "caller"})
	n := 0
	codes := map[string]string{} // the session id each call names → the code bravo answers
	b.setAnswer(func(route string, body []byte) (int, string, []byte, bool) {
		if route != "/peer/v1/call" {
			return 0, "", nil, false
		}
		var cb PeerCallBody
		_ = json.Unmarshal(body, &cb)
		var sid string
		_ = json.Unmarshal(cb.Args["session"], &sid)
		code, ok := codes[sid]
		if !ok {
			return 0, "", nil, false
		}
		n++
		if n%2 == 0 {
			raw, _ := json.Marshal(map[string]any{"ok": false, "code": code, "error": "refused there", "remoteCode": "lower case " + code})
			return http.StatusOK, "application/json", raw, true
		}
		raw, _ := json.Marshal(map[string]any{"code": code, "error": "refused there"})
		return http.StatusBadRequest, "application/json", raw, true
	})
	var steps []map[string]any
	want := map[string]string{}
	for i := range 50 {
		sid := fmt.Sprintf("%016x", 0xabc000+i)
		codes[sid] = randomCode(i)
		want[sid] = remoteCodeOf(codes[sid])
		steps = append(steps, onRelay("bravo", "read_session", map[string]any{"session": sid}))
	}
	res := a.runAllow(sa, steps...)
	for i, r := range res {
		sid := fmt.Sprintf("%016x", 0xabc000+i)
		if linkCode(r) != CodeInternal {
			t.Errorf("call %d (bravo answered %q): code %v, want %s", i, codes[sid], r["code"], CodeInternal)
		}
		got, has := r["remoteCode"].(string)
		switch {
		case want[sid] == "" && has:
			t.Errorf("call %d (bravo answered %q): remoteCode %q, want none", i, codes[sid], got)
		case want[sid] != "" && got != want[sid]:
			t.Errorf("call %d (bravo answered %q): remoteCode %q, want %q", i, codes[sid], got, want[sid])
		}
	}
	if want[fmt.Sprintf("%016x", 0xabc000)] == "" {
		t.Fatal("the first code should be one remoteCode keeps")
	}
	// The registry: every code label is one of R15's (or ok).
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "code" && l.GetValue() != "ok" && !KnownCode(l.GetValue()) {
					t.Errorf("%s has code label %q, outside R15's set", f.GetName(), l.GetValue())
				}
			}
		}
	}
	// And /metrics as scraped stays small (each such code was a new series).
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() > 64<<10 || bytes.Contains(rec.Body.Bytes(), []byte("EVIL")) {
		t.Errorf("/metrics after 50 calls: HTTP %d, %d bytes, a peer's code in it: %v", rec.Code, rec.Body.Len(), bytes.Contains(rec.Body.Bytes(), []byte("EVIL")))
	}
}
