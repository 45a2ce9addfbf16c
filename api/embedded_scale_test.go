package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/relaytest"
)

// TestEmbeddedThousandSessions (R20.5, issue 19 item 1): a relay on the
// embedded default — always, whatever RELAY_TEST_STORE says — with 1,000
// sessions created through the owner API answers the owner's list, the
// console's front page and an agent's list_sessions. (The embedded store
// once sat behind a fixed-size pipe: from 13 sessions on, the replies of
// these pipelines no longer fit and each of the three answered 500 /
// REMOTE_RELAY_INTERNAL after a 6 s timeout.)
func TestEmbeddedThousandSessions(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t, relaytest.Options{Redis: relaytest.NewEmbedded(t)})
	if r.App.Embedded() == nil {
		t.Fatal("the relay does not run on the embedded store")
	}
	const n = 1000
	begin := time.Now()
	tokens := make([]string, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 { // concurrent, as an owner's agents start sessions
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				tok, err := createSession(r.URL, fmt.Sprintf("scale-%04d", i))
				if err != nil {
					t.Errorf("session %d: %v", i, err)
					continue
				}
				tokens[i] = tok
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d sessions created in %s", n, time.Since(begin).Round(time.Millisecond))

	// The owner's list: all of them.
	var list struct {
		Sessions []map[string]any `json:"sessions"`
		Total    int              `json:"total"`
	}
	took := time.Now()
	if st := r.Owner("GET", "/api/v1/sessions?limit=1000", nil, &list); st != http.StatusOK {
		t.Fatalf("GET /api/v1/sessions: status %d", st)
	}
	t.Logf("GET /api/v1/sessions?limit=1000: %s", time.Since(took).Round(time.Millisecond))
	if list.Total != n || len(list.Sessions) != n {
		t.Fatalf("GET /api/v1/sessions: total %d, %d listed; want %d and %d", list.Total, len(list.Sessions), n, n)
	}
	seen := map[string]bool{}
	for _, s := range list.Sessions {
		title, _ := s["title"].(string)
		if !strings.HasPrefix(title, "scale-") || seen[title] {
			t.Fatalf("GET /api/v1/sessions lists %q (unknown or twice)", title)
		}
		seen[title] = true
	}
	newest, _ := list.Sessions[0]["title"].(string)

	// The console's front page, signed in: it answers and shows the newest.
	cookie := signIn(t, r)
	took = time.Now()
	resp, body := request(t, "GET", r.URL+"/", "", nil, cookie)
	t.Logf("GET / (console): %s", time.Since(took).Round(time.Millisecond))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / signed in: status %d: %.300s", resp.StatusCode, body)
	}
	if !strings.Contains(body, newest) {
		t.Fatalf("the front page does not show the newest session %q", newest)
	}

	// An agent's list_sessions through a real MCP client.
	m := r.Connect(tokens[0], nil)
	took = time.Now()
	env := m.MustOK(map[string]any{"action": "list_sessions", "relay": "this", "limit": 200})
	t.Logf("list_sessions limit 200: %s", time.Since(took).Round(time.Millisecond))
	items, _ := env["sessions"].([]any)
	if total, _ := env["total"].(float64); int(total) != n || len(items) != 200 || env["truncated"] != true {
		t.Fatalf("list_sessions: total %v, %d listed, truncated %v; want %d, 200, true", env["total"], len(items), env["truncated"], n)
	}
}

// createSession creates a session through POST /api/v1/sessions and returns
// its token (safe from any goroutine: no testing.T).
func createSession(base, title string) (string, error) {
	body, _ := json.Marshal(map[string]any{"title": title})
	req, err := http.NewRequest("POST", base+"/api/v1/sessions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+relaytest.OwnerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("answer %s: no token (%w)", data, err)
	}
	return out.Token, nil
}
