package relaytest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/oar/relay/config"
)

// A subscription on a paired relay in the owner's console (§19, R8.23),
// with two relays on real HTTP over loopback. The rules of subscriptions
// and asks on a paired relay are domain tests now
// (domain/peersubs_rules_test.go).

// psConsole reads a console page with a signed-in cookie.
func psConsole(t *testing.T, r *Relay, cookie *http.Cookie, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.URL+path, nil)
	req.AddCookie(cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return string(b)
}

// psChip is the console's watching chip, for failure messages.
func psChip(page string) string {
	i := strings.Index(page, `id="watching"`)
	if i < 0 {
		return "(no watching chip)"
	}
	end := min(len(page), i+1200)
	return page[i:end]
}

// TestPeerSeedRemoteSubsConsole (issue 21 item 5; R8.19, R8.23, §19): a
// subscription a conversation here holds on a paired relay counts in the
// console's "watching N sessions" and has its Unsubscribe button; the
// button's DELETE /api/v1/subscriptions/{id} (cookie, same origin) ends it
// on the other relay too, and it leaves the chip.
func TestPeerSeedRemoteSubsConsole(t *testing.T) {
	a := Start(t, Options{Config: func(c *config.Config) { c.Name = "alpha" }})
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "watcher"})
	local := a.NewSession(map[string]any{"title": "local build"})
	sb1 := b.NewSession(map[string]any{"title": "Nightly deploy"})
	sb2 := b.NewSession(map[string]any{"title": "Docs"})
	res := prRun(t, a, sa,
		prTool(map[string]any{"action": "subscribe", "relay": "this", "sessions": []string{local.ID}}),
		prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb1.ID, sb2.ID},
			"events": []string{"turn_end"}, "digest_minutes": 600}))
	if prCode(res[0]) != "ok" || prCode(res[1]) != "ok" {
		t.Fatalf("subscribe: %v / %v", res[0], res[1])
	}
	localID := res[0]["subscription"].(map[string]any)["id"].(string)
	remoteID := res[1]["subscription"].(map[string]any)["id"].(string)

	// The console's chip counts the three sessions and lists both with Unsubscribe.
	cookie := consoleSignIn(t, a, OwnerToken)
	page := psConsole(t, a, cookie, "/s/"+sa.ID)
	if !strings.Contains(page, "watching 3 sessions") {
		t.Errorf("the console's chip does not read \"watching 3 sessions\": %s", psChip(page))
	}
	for _, id := range []string{localID, remoteID} {
		if !strings.Contains(page, `data-call="DELETE /api/v1/subscriptions/`+id+`"`) {
			t.Errorf("the console lists no Unsubscribe for %s: %s", id, psChip(page))
		}
	}

	// Unsubscribe as the console does it (cookie, same origin): ended on
	// bravo too, and gone from the chip.
	req, _ := http.NewRequest(http.MethodDelete, a.URL+"/api/v1/subscriptions/"+remoteID, nil)
	req.AddCookie(cookie)
	req.Header.Set("Origin", a.URL)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || out["endReason"] != "unsubscribed" || out["note"] != nil {
		t.Fatalf("Unsubscribe: %d %v", resp.StatusCode, out)
	}
	there, err := b.App.Store().GetSubscription(t.Context(), remoteID)
	if err != nil || there.EndReason != "unsubscribed" {
		t.Errorf("on bravo after the owner's Unsubscribe on alpha: %+v %v", there, err)
	}
	if page := psConsole(t, a, cookie, "/s/"+sa.ID); !strings.Contains(page, "watching 1 session") || strings.Contains(page, "subscriptions/"+remoteID) {
		t.Errorf("the console's chip after Unsubscribe: %s", psChip(page))
	}
}
