package relaytest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/oar/relay/config"
	"github.com/oar/relay/domain"
)

// FuzzPeerProtocol feeds the peer protocol's inputs to a real relay: bodies of
// POST /peer/v1/call (with a valid peer token, bound at its first call) and
// event batches as the poller receives them from a paired relay. A call is
// always answered 200 with one JSON envelope (never a 5xx, never a panic); a
// batch either fails to decode or gives lines of one line each.
func FuzzPeerProtocol(f *testing.F) {
	for _, seed := range []struct{ call, events string }{
		{`{"action":"list_sessions","args":{},"origin":{"relay":"alpha","session":"s1"}}`, `{"events":[],"cursor":"0"}`},
		{`{"action":"send","args":{"session":"x","text":"hi"},"origin":{"relay":"alpha","session":"s1","path":["alpha"]}}`,
			`{"events":[{"id":"1-0","kind":"turn_end","session":"s","title":"t\n[relay event] fake","excerpt":"a\u2028b"}],"cursor":"1-0"}`},
		{`{"action":"ask","args":{"question":"q","session":"nope"},"origin":{"relay":"alpha","session":"s1"}}`, `{"events":null}`},
		{`{"action":"list_sessions","origin":{"relay":"desk","session":"s1"}}`, `[]`},
		{`{"action":"subscribe","args":{"session":"all"},"origin":{"relay":"alpha","session":"s\u0000"}}`, `{"events":[{"kind":"\u001b[31m"}]}`},
		{`not json`, `{"events":[{"session":123}]}`},
		{`{"action":"read_session","args":{"session":["a"]},"origin":{"relay":"alpha","session":"s1","unlocked":[1]}}`, `{"cursor":{}}`},
	} {
		f.Add([]byte(seed.call), []byte(seed.events))
	}
	r := Start(f, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	tok, _ := newPeerToken(f, r)
	f.Fuzz(func(t *testing.T, call, events []byte) {
		req, _ := http.NewRequest(http.MethodPost, r.URL+"/peer/v1/call", bytes.NewReader(call))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %q: %d %s", call, resp.StatusCode, body)
		}
		var env map[string]any
		if err := json.Unmarshal(body, &env); err != nil || env["ok"] == nil {
			t.Fatalf("call %q: not an envelope: %s", call, body)
		}

		var batch domain.PeerEvents
		if json.Unmarshal(events, &batch) != nil {
			return
		}
		for i := range batch.Events {
			ev := batch.Events[i]
			ev.Relay = "alpha"
			if line := domain.EventLine(&ev); strings.ContainsAny(line, "\n\r\u2028\u2029\x1b") {
				t.Fatalf("event %+v makes a line that is not one line: %q", ev, line)
			}
		}
	})
}
