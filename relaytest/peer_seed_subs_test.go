package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/store"
)

// Subscriptions and asks on a paired relay as the owner sees them (R8.19–
// R8.23, R10.5, R10.8, §12 pairing, R13.2): two relays in this process on
// real HTTP over loopback, the link between them through a proxy the test
// can cut.

// psLink is the way from alpha to bravo: a reverse proxy on loopback that
// passes every request on, or while down drops the connection (as a relay
// that went away does). It notes the list_questions calls that came through
// (an ask's answer poll, R10.5) and when.
type psLink struct {
	srv  *httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	asks []psPoll
}

type psPoll struct {
	at   time.Time
	down bool
}

func psProxy(t *testing.T, to *Relay) *psLink {
	t.Helper()
	target, err := url.Parse(to.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := &psLink{}
	rp := httputil.NewSingleHostReverseProxy(target)
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/peer/v1/call" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var call struct {
				Action string `json:"action"`
			}
			if json.Unmarshal(body, &call) == nil && call.Action == "list_questions" {
				l.mu.Lock()
				l.asks = append(l.asks, psPoll{at: time.Now(), down: l.down.Load()})
				l.mu.Unlock()
			}
		}
		if l.down.Load() {
			panic(http.ErrAbortHandler) // the connection drops: no answer at all
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// polls returns the list_questions calls noted so far.
func (l *psLink) polls() []psPoll {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.asks)
}

// psPair pairs from with to at url (to's own address or a proxy in front
// of it) and returns the peer token from uses there.
func psPair(t *testing.T, from, to *Relay, u string) string {
	t.Helper()
	var tok map[string]any
	if st := to.Owner("POST", "/api/v1/peer-tokens", map[string]any{}, &tok); st != 201 {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	var p map[string]any
	if st := from.Owner("POST", "/api/v1/relays", map[string]any{"url": u, "token": tok["token"]}, &p); st != 201 || p["name"] != "bravo" {
		t.Fatalf("pair: %d %v", st, p)
	}
	return tok["token"].(string)
}

// psMirror reads alpha's record of a subscription held on a paired relay.
func psMirror(t *testing.T, r *Relay, id string) *store.Subscription {
	t.Helper()
	sub, err := r.App.Store().GetSubscription(context.Background(), id)
	if err != nil {
		t.Fatalf("subscription %s on %s: %v", id, r.Config.Name, err)
	}
	return sub
}

// psCut takes the link down and waits until alpha's poll of the mirror
// found it down (the replay's link_lost starts there, R8.21).
func psCut(t *testing.T, l *psLink, a *Relay, subID string) {
	t.Helper()
	l.down.Store(true)
	Eventually(t, 20*time.Second, func() bool { return !psMirror(t, a, subID).LinkDownAt.IsZero() },
		"alpha to find the link to bravo down")
}

// psReplay waits for the one replay message in sid (link_lost … link_restored)
// and returns its lines.
func psReplay(t *testing.T, a *Relay, sid string) []string {
	t.Helper()
	var found []string
	Eventually(t, 20*time.Second, func() bool {
		found = nil
		for _, txt := range a.EventTexts(sid) {
			if strings.Contains(txt, "link_restored") {
				found = append(found, txt)
			}
		}
		return len(found) > 0
	}, "the replay message in alpha's conversation")
	if len(found) != 1 {
		t.Fatalf("want one replay message, got %d: %q", len(found), found)
	}
	lines := strings.Split(found[0], "\n")
	if len(lines) < 3 || lines[0] != domain.Header || lines[1] != "[relay event] bravo · link_lost" ||
		!strings.HasPrefix(lines[len(lines)-1], "[relay event] bravo · link_restored: ") {
		t.Fatalf("replay message:\n%s", found[0])
	}
	return lines
}

func psTurnLine(sid, title, text string, replayed bool) string {
	mark := ""
	if replayed {
		mark = "replayed · "
	}
	return fmt.Sprintf(`[relay event] %sbravo · session "%s" (%s): turn_end (done) "echo: %s"`, mark, title, sid[:8], text)
}

// psSay runs one turn on r's session and waits for its end.
func psSay(t *testing.T, r *Relay, sid, text string) {
	t.Helper()
	if tr := r.WaitTurn(r.Message(sid, text), 30*time.Second, "done"); tr.Reply != "echo: "+text {
		t.Fatalf("turn on %s: %q", r.Config.Name, tr.Reply)
	}
}

func psFast(name string) func(c *config.Config) {
	return func(c *config.Config) {
		c.Name = name
		c.Timing.PeerPoll = 200 * time.Millisecond
		c.Timing.Coalesce = 0
	}
}

// psWatching is GET /api/v1/sessions/{id}'s watching, by subscription id.
func psWatching(t *testing.T, r *Relay, sid string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, x := range r.Get(sid)["watching"].([]any) {
		m := x.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

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

// TestPeerSeedRemoteSubsAreTheOwners (issue 21 item 5; R8.19, R8.23, §12,
// §19): a subscription a conversation here holds on a paired relay counts in
// the console's "watching N sessions" and in GET /sessions/{id} watching;
// list_subscriptions there shows heldCount / nextDeliveryAt for what this
// relay holds of it (its digest applies here, R8.21); the owner's
// Unsubscribe (the console's button is DELETE /api/v1/subscriptions/{id})
// ends it on the other relay too.
func TestPeerSeedRemoteSubsAreTheOwners(t *testing.T) {
	a, b := prStartPair(t, psFast("alpha"), psFast("bravo"))
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

	// GET /sessions/{id} watching: both, the remote one naming its relay and
	// bravo's sessions with their titles.
	w := psWatching(t, a, sa.ID)
	if len(w) != 2 || w[localID] == nil || w[remoteID] == nil {
		t.Fatalf("watching: want %s and %s, got %v", localID, remoteID, w)
	}
	rm := w[remoteID]
	if rm["relay"] != "bravo" || rm["scope"] != "sessions" || rm["digestMinutes"] != float64(600) || rm["heldCount"] != float64(0) ||
		fmt.Sprint(rm["sessions"]) != fmt.Sprint([]any{map[string]any{"id": sb1.ID, "title": "Nightly deploy"}, map[string]any{"id": sb2.ID, "title": "Docs"}}) {
		t.Errorf("the remote subscription in watching: %v", rm)
	}
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

	// An event there is held here by the digest: list_subscriptions on
	// bravo and the owner's view show it (R8.23).
	psSay(t, b, sb1.ID, "deployed")
	Eventually(t, 20*time.Second, func() bool {
		n, _, err := a.App.Store().HeldInfo(context.Background(), remoteID)
		return err == nil && n == 1
	}, "alpha to hold bravo's event for the digest")
	res = prRun(t, a, sa, prTool(map[string]any{"action": "list_subscriptions", "relay": "bravo"}))
	subs, _ := res[0]["subscriptions"].([]any)
	if prCode(res[0]) != "ok" || len(subs) != 1 {
		t.Fatalf("list_subscriptions on bravo: %v", res[0])
	}
	if m := subs[0].(map[string]any); m["id"] != remoteID || m["heldCount"] != float64(1) || m["nextDeliveryAt"] == nil {
		t.Errorf("list_subscriptions on bravo: want heldCount 1 and a nextDeliveryAt for what alpha holds, got %v", m)
	}
	if m := psWatching(t, a, sa.ID)[remoteID]; m["heldCount"] != float64(1) || m["nextDeliveryAt"] == nil {
		t.Errorf("watching: the remote subscription's held event: %v", m)
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
	there, err := b.App.Store().GetSubscription(context.Background(), remoteID)
	if err != nil || there.EndReason != "unsubscribed" {
		t.Errorf("on bravo after the owner's Unsubscribe on alpha: %+v %v", there, err)
	}
	if active, _ := b.App.Store().WatcherSubscriptions(context.Background(), "peer:alpha:"+sa.ID); len(active) != 0 {
		t.Errorf("bravo still has %d active subscriptions of alpha's watcher", len(active))
	}
	if m := psWatching(t, a, sa.ID)[remoteID]; m == nil || m["endReason"] != "unsubscribed" {
		t.Errorf("watching after Unsubscribe: %v", m)
	}
	if page := psConsole(t, a, cookie, "/s/"+sa.ID); !strings.Contains(page, "watching 1 session") || strings.Contains(page, "subscriptions/"+remoteID) {
		t.Errorf("the console's chip after Unsubscribe: %s", psChip(page))
	}
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

// TestPeerSeedUnpairEndsAsksAndSubs (issue 21 item 6; R8.19, R10.8, §12):
// removing a pairing ends the asks this relay's conversations made there on
// the relay that keeps them (out of its inbox) and ends the subscriptions
// (there too); the answer counts both.
func TestPeerSeedUnpairEndsAsksAndSubs(t *testing.T) {
	a, b := prStartPair(t, psFast("alpha"), psFast("bravo"))
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "asker"})
	sb := b.NewSession(map[string]any{"title": "target"})
	res := prRun(t, a, sa,
		prTool(map[string]any{"action": "ask", "relay": "bravo", "session": sb.ID, "question": "Ship it?", "options": []string{"yes", "no"}}),
		prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb.ID}}))
	if prCode(res[0]) != "ok" || prCode(res[1]) != "ok" {
		t.Fatalf("ask / subscribe on bravo: %v / %v", res[0], res[1])
	}
	qid := res[0]["question_id"].(string)
	subID := res[1]["subscription"].(map[string]any)["id"].(string)
	inInbox := func() bool {
		var inbox struct {
			Asks []map[string]any `json:"asks"`
		}
		if st := b.Owner("GET", "/api/v1/inbox", nil, &inbox); st != 200 {
			t.Fatalf("bravo's inbox: %d", st)
		}
		return slices.ContainsFunc(inbox.Asks, func(m map[string]any) bool { return m["id"] == qid })
	}
	if !inInbox() {
		t.Fatalf("bravo's inbox lacks %s before the unpairing", qid)
	}

	var out map[string]any
	if st := a.Owner("DELETE", "/api/v1/relays/bravo", nil, &out); st != 200 {
		t.Fatalf("unpair: %d %v", st, out)
	}
	if out["removed"] != true || out["subscriptionsEnded"] != float64(1) || out["asksEnded"] != float64(1) || out["note"] != nil {
		t.Errorf("unpair answer: %v", out)
	}
	// On bravo, which kept them: the ask is out of the inbox, the subscription ended.
	if inInbox() {
		t.Errorf("bravo's inbox still holds %s after alpha removed the pairing", qid)
	}
	if ak, err := b.App.Store().GetAsk(context.Background(), qid); err != nil || ak.Status != "withdrawn" {
		t.Errorf("the ask on bravo: %+v %v", ak, err)
	}
	if there, err := b.App.Store().GetSubscription(context.Background(), subID); err != nil || there.EndReason == "" {
		t.Errorf("the subscription on bravo after the unpairing: %+v %v", there, err)
	}
	// On alpha: nothing followed any more; the subscription shows ended, unpaired.
	if asks, _ := a.App.Store().RemoteAsks(context.Background()); len(asks) != 0 {
		t.Errorf("alpha still follows %d asks", len(asks))
	}
	if m := psWatching(t, a, sa.ID)[subID]; m == nil || m["endReason"] != "unpaired" {
		t.Errorf("watching after the unpairing: %v", m)
	}
}

// TestPeerSeedReplayCap (issue 21 item 8; R8.21, R13.2, §14 replay_events):
// while the link is down bravo keeps the last N events per subscription
// (limits.replay_events, 500 by default; 5 here); the replay brings those.
func TestPeerSeedReplayCap(t *testing.T) {
	if n := config.Default().Limits.ReplayEvents; n != 500 {
		t.Fatalf("default replay_events: %d, want 500", n)
	}
	a, b := prStartPair(t, psFast("alpha"), func(c *config.Config) {
		psFast("bravo")(c)
		c.Limits.ReplayEvents = 5
	})
	link := psProxy(t, b)
	psPair(t, a, b, link.srv.URL)
	sa := a.NewSession(map[string]any{"title": "watcher"})
	sb := b.NewSession(map[string]any{"title": "watched"})
	res := prRun(t, a, sa, prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb.ID}, "events": []string{"turn_end"}}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("subscribe: %v", res[0])
	}
	subID := res[0]["subscription"].(map[string]any)["id"].(string)
	psCut(t, link, a, subID)
	for i := 1; i <= 7; i++ {
		psSay(t, b, sb.ID, fmt.Sprint("turn ", i))
	}
	link.down.Store(false)
	lines := psReplay(t, a, sa.ID)
	var want []string
	for i := 3; i <= 7; i++ {
		want = append(want, psTurnLine(sb.ID, "watched", fmt.Sprint("turn ", i), true))
	}
	want = append(want, "[relay event] bravo · link_restored: 5 replayed events, 0 held for later")
	if got := lines[2:]; !slices.Equal(got, want) {
		t.Errorf("replay after 7 events with room for 5:\n got %q\nwant %q", got, want)
	}
}

// TestPeerSeedReplayKeptPerEvent (issue 21 item 8; R8.21, R13.2, §14
// replay_keep): each event is kept for replay_keep (7 days by default; 4 s
// here) from when it happened, not from the newest: a stream that keeps
// getting events still lets its old ones go.
func TestPeerSeedReplayKeptPerEvent(t *testing.T) {
	if d := config.Default().Timing.ReplayKeep; d != 7*24*time.Hour {
		t.Fatalf("default replay_keep: %s, want 168h", d)
	}
	const keep = 4 * time.Second
	a, b := prStartPair(t, psFast("alpha"), func(c *config.Config) {
		psFast("bravo")(c)
		c.Timing.ReplayKeep = keep
	})
	link := psProxy(t, b)
	tok := psPair(t, a, b, link.srv.URL)
	sa := a.NewSession(map[string]any{"title": "watcher"})
	sb := b.NewSession(map[string]any{"title": "watched"})
	res := prRun(t, a, sa, prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb.ID}, "events": []string{"turn_end"}}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("subscribe: %v", res[0])
	}
	subID := res[0]["subscription"].(map[string]any)["id"].(string)
	psCut(t, link, a, subID)
	cursor := psMirror(t, a, subID).Cursor
	psSay(t, b, sb.ID, "old")
	// New events keep coming (one per look); the old one still goes once it
	// is older than replay_keep. bravo's events route shows what it keeps.
	kept := func() []string {
		var pe domain.PeerEvents
		q := url.Values{"subscription": {subID}, "after": {cursor}, "wait": {"0"}}
		if st := peerReq(t, b, tok, "GET", "/peer/v1/events?"+q.Encode(), nil, &pe); st != 200 {
			t.Fatalf("bravo's events route: %d", st)
		}
		var texts []string
		for _, ev := range pe.Events {
			texts = append(texts, ev.Text)
		}
		return texts
	}
	// keptWith waits until bravo keeps an event (its fan-out runs as a job)
	// and returns what it keeps.
	keptWith := func(text string) []string {
		var got []string
		Eventually(t, 10*time.Second, func() bool { got = kept(); return slices.Contains(got, text) }, "bravo to keep %q", text)
		return got
	}
	if got := keptWith("echo: old"); !slices.Equal(got, []string{"echo: old"}) {
		t.Fatalf("bravo keeps %q, want the old event", got)
	}
	n := 0
	Eventually(t, 20*time.Second, func() bool {
		n++
		psSay(t, b, sb.ID, fmt.Sprint("new ", n))
		return !slices.Contains(keptWith(fmt.Sprintf("echo: new %d", n)), "echo: old")
	}, "bravo to let the old event go %s after it happened while newer ones came", keep)
	link.down.Store(false)
	lines := psReplay(t, a, sa.ID)
	mid := lines[2 : len(lines)-1]
	for _, l := range mid {
		if !strings.HasPrefix(l, fmt.Sprintf(`[relay event] replayed · bravo · session "watched" (%s): turn_end (done) "echo: new `, sb.ID[:8])) {
			t.Errorf("replayed line: %q", l)
		}
	}
	if len(mid) == 0 || mid[len(mid)-1] != psTurnLine(sb.ID, "watched", fmt.Sprint("new ", n), true) {
		t.Errorf("the replay lacks the newest event: %q", mid)
	}
	if want := fmt.Sprintf("[relay event] bravo · link_restored: %d replayed events, 0 held for later", len(mid)); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
}

// TestPeerSeedReplayHeldCount (issue 21 item 8; R8.8, R8.21, R8.23): the
// digest of a subscription on a paired relay applies here to replayed events
// too, and link_restored names how many of them are held: all while the
// digest is not due (they come later as the digest, list_subscriptions
// counts them), none when it is due (they are the digest).
func TestPeerSeedReplayHeldCount(t *testing.T) {
	clock := clock.NewScaled(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), 600)
	a := Start(t, Options{Clock: clock, Config: psFast("alpha")})
	b := Start(t, Options{Config: psFast("bravo")})
	link := psProxy(t, b)
	psPair(t, a, b, link.srv.URL)
	sa := a.NewSession(map[string]any{"title": "watcher"})
	sb := b.NewSession(map[string]any{"title": "watched"})
	const digest = 120 // minutes: 12 s at 600×
	res := prRun(t, a, sa, prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb.ID},
		"events": []string{"turn_end"}, "digest_minutes": digest}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("subscribe: %v", res[0])
	}
	subID := res[0]["subscription"].(map[string]any)["id"].(string)
	created := psMirror(t, a, subID).CreatedAt

	// The digest is not due yet: both replayed events are held.
	psCut(t, link, a, subID)
	psSay(t, b, sb.ID, "one")
	psSay(t, b, sb.ID, "two")
	link.down.Store(false)
	lines := psReplay(t, a, sa.ID)
	if !clock.Now().Before(created.Add(digest * time.Minute)) {
		t.Skipf("the machine was too slow: the digest fell due before the replay (%s)", clock.Now().Sub(created))
	}
	if want := []string{"[relay event] bravo · link_restored: 2 replayed events, 2 held for later"}; !slices.Equal(lines[2:], want) {
		t.Errorf("replay with the digest not due:\n got %q\nwant %q", lines[2:], want)
	}
	res = prRun(t, a, sa, prTool(map[string]any{"action": "list_subscriptions", "relay": "bravo"}))
	if subs, _ := res[0]["subscriptions"].([]any); len(subs) != 1 || subs[0].(map[string]any)["heldCount"] != float64(2) ||
		subs[0].(map[string]any)["nextDeliveryAt"] == nil {
		t.Errorf("list_subscriptions on bravo while 2 are held: %v", res[0])
	}
	var dg string
	Eventually(t, 40*time.Second, func() bool {
		for _, txt := range a.EventTexts(sa.ID) {
			if strings.Contains(txt, "Digest of 2 events") {
				dg = txt
				return true
			}
		}
		return false
	}, "the digest with the held replayed events")
	for _, text := range []string{"one", "two"} {
		if !strings.Contains(dg, psTurnLine(sb.ID, "watched", text, true)) {
			t.Errorf("digest lacks %q:\n%s", text, dg)
		}
	}
	digested := psMirror(t, a, subID).LastDigestAt

	// The next digest falls due while the link is down: the replayed
	// events are that digest, in the replay message; none is held.
	psCut(t, link, a, subID)
	psSay(t, b, sb.ID, "three")
	psSay(t, b, sb.ID, "four")
	Eventually(t, 40*time.Second, func() bool { return clock.Now().After(digested.Add(digest * time.Minute)) }, "the next digest to fall due")
	before := len(a.EventTexts(sa.ID))
	link.down.Store(false)
	var replay string
	Eventually(t, 20*time.Second, func() bool {
		texts := a.EventTexts(sa.ID)
		for _, txt := range texts[min(before, len(texts)):] {
			if strings.Contains(txt, "link_restored") {
				replay = txt
				return true
			}
		}
		return false
	}, "the second replay message")
	want := strings.Join([]string{domain.Header, "[relay event] bravo · link_lost",
		psTurnLine(sb.ID, "watched", "three", true), psTurnLine(sb.ID, "watched", "four", true),
		"[relay event] bravo · link_restored: 2 replayed events, 0 held for later"}, "\n")
	if replay != want {
		t.Errorf("replay with the digest due:\n got %q\nwant %q", replay, want)
	}
	if n, _, _ := a.App.Store().HeldInfo(context.Background(), subID); n != 0 {
		t.Errorf("held after a replay that was the digest: %d", n)
	}
}

// TestPeerSeedExclude (issue 21 item 8; R8.7, R8.21): exclude is passed on to
// the watched relay (it resolves the ids and leaves those sessions out), and
// this relay drops those sessions' events too, for a relay too old to know
// exclude (here one that ignores it), matching an id's prefix as given.
func TestPeerSeedExclude(t *testing.T) {
	a, b := prStartPair(t, psFast("alpha"), psFast("bravo"))
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "watcher"})
	skip := b.NewSession(map[string]any{"title": "noisy"})
	keep := b.NewSession(map[string]any{"title": "wanted"})
	res := prRun(t, a, sa, prTool(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{"all"},
		"exclude": []string{skip.ID[:8]}, "events": []string{"turn_end"}}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("subscribe: %v", res[0])
	}
	subID := res[0]["subscription"].(map[string]any)["id"].(string)
	if there, err := b.App.Store().GetSubscription(context.Background(), subID); err != nil || !slices.Equal(there.Exclude, []string{skip.ID}) {
		t.Fatalf("bravo's subscription: exclude %v (%v), want [%s]", there.Exclude, err, skip.ID)
	}
	if m := psWatching(t, a, sa.ID)[subID]; fmt.Sprint(m["exclude"]) != fmt.Sprint([]any{skip.ID}) {
		t.Errorf("alpha's record of the subscription: %v", m)
	}
	psSay(t, b, skip.ID, "noise")
	psSay(t, b, keep.ID, "signal")
	Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(strings.Join(a.EventTexts(sa.ID), "\n"), "echo: signal")
	}, "the wanted session's event")
	if all := strings.Join(a.EventTexts(sa.ID), "\n"); strings.Contains(all, "noise") {
		t.Errorf("the excluded session's event came:\n%s", all)
	}

	// A relay that does not know exclude: it serves the excluded session's
	// events; alpha drops them.
	const noisy, wanted = "aaaaaaaa1111", "bbbbbbbb2222"
	var served atomic.Int32
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/peer/v1/hello":
			_, _ = io.WriteString(w, `{"name":"oldbox","version":"0.9.10","instance":"inst-old","features":["call","events","asks","inbox"]}`)
		case "/peer/v1/call":
			_, _ = io.WriteString(w, `{"ok":true,"relay":"oldbox","subscription":{"id":"sub_old0000001","scope":"all","sessions":"all","events":["turn_end"],"once":false,"stalledMinutes":15}}`)
		case "/peer/v1/events":
			if r.URL.Query().Get("after") != "0" {
				_, _ = io.WriteString(w, `{"events":[],"cursor":"2-0"}`)
				return
			}
			served.Add(1)
			at := time.Now().UTC().Format(time.RFC3339Nano)
			fmt.Fprintf(w, `{"events":[{"id":"ev_old1","kind":"turn_end","session":%q,"title":"noisy","at":%q,"status":"done","text":"old noise"},`+
				`{"id":"ev_old2","kind":"turn_end","session":%q,"title":"wanted","at":%q,"status":"done","text":"old signal"}],"cursor":"2-0"}`, noisy, at, wanted, at)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(old.Close)
	var p map[string]any
	if st := a.Owner("POST", "/api/v1/relays", map[string]any{"url": old.URL, "token": "rpt_old", "name": "oldbox"}, &p); st != 201 {
		t.Fatalf("pair the old relay: %d %v", st, p)
	}
	res = prRun(t, a, sa, prTool(map[string]any{"action": "subscribe", "relay": "oldbox", "sessions": []string{"all"},
		"exclude": []string{noisy[:8]}, "events": []string{"turn_end"}}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("subscribe on the old relay: %v", res[0])
	}
	Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(strings.Join(a.EventTexts(sa.ID), "\n"), "old signal")
	}, "the old relay's wanted event")
	if all := strings.Join(a.EventTexts(sa.ID), "\n"); strings.Contains(all, "old noise") || served.Load() == 0 {
		t.Errorf("the old relay's excluded session's event came (served %d):\n%s", served.Load(), all)
	}
}

// TestPeerSeedAskPollOffline (issue 21 item 8; R10.5, §14 ask_poll,
// ask_poll_offline): an open ask on a paired relay is polled every ask_poll
// (5 s by default) and every ask_poll_offline (30 s by default) while that
// relay does not answer; once it answers again the answer comes. Here 300 ms
// and 3 s: each poll's next time is read from the ask alpha keeps.
func TestPeerSeedAskPollOffline(t *testing.T) {
	if d := config.Default().Timing; d.AskPoll != 5*time.Second || d.AskPollOffline != 30*time.Second {
		t.Fatalf("default ask polls: %s / %s, want 5s / 30s", d.AskPoll, d.AskPollOffline)
	}
	const up, down = 300 * time.Millisecond, 3 * time.Second
	a, b := prStartPair(t, func(c *config.Config) {
		psFast("alpha")(c)
		c.Timing.AskPoll = up
		c.Timing.AskPollOffline = down
	}, psFast("bravo"))
	link := psProxy(t, b)
	psPair(t, a, b, link.srv.URL)
	sa := a.NewSession(map[string]any{"title": "asker"})
	sb := b.NewSession(map[string]any{"title": "target"})
	res := prRun(t, a, sa, prTool(map[string]any{"action": "ask", "relay": "bravo", "session": sb.ID, "question": "Merge now?"}))
	if prCode(res[0]) != "ok" {
		t.Fatalf("ask on bravo: %v", res[0])
	}
	qid := res[0]["question_id"].(string)
	ask := func() *store.RemoteAsk {
		asks, err := a.App.Store().RemoteAsks(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range asks {
			if x.ID == qid {
				return x
			}
		}
		t.Fatalf("alpha no longer follows %s", qid)
		return nil
	}
	// nextAfter waits until the ask's next poll was set by a poll that came
	// through the link (down or not, as given) and returns how far after
	// that poll it lies.
	nextAfter := func(wantDown bool, gap time.Duration) time.Duration {
		t.Helper()
		var d time.Duration
		Eventually(t, 20*time.Second, func() bool {
			ps := link.polls()
			if len(ps) == 0 || ps[len(ps)-1].down != wantDown {
				return false
			}
			at := ps[len(ps)-1].at
			next := ask().NextPollAt
			d = next.Sub(at)
			return !next.Before(at.Add(gap)) // the poll's own save has happened
		}, "a poll (link down: %v) to set the next one %s on", wantDown, gap)
		return d
	}
	if d := nextAfter(false, up); d > up+2*time.Second {
		t.Errorf("while bravo answers, the next poll is %s after the last, want %s", d, up)
	}
	link.down.Store(true)
	if d := nextAfter(true, down); d > down+2*time.Second {
		t.Errorf("while bravo does not answer, the next poll is %s after the last, want %s", d, down)
	}
	link.down.Store(false)
	if d := nextAfter(false, up); d > up+2*time.Second {
		t.Errorf("once bravo answers again, the next poll is %s after the last, want %s", d, up)
	}
	var ans map[string]any
	if st := b.Owner("POST", "/api/v1/inbox/"+qid, map[string]any{"answer": "yes, merge"}, &ans); st != 200 {
		t.Fatalf("answer on bravo: %d %v", st, ans)
	}
	Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(strings.Join(a.EventTexts(sa.ID), "\n"), "question_answered "+qid)
	}, "the answer in alpha's conversation")
}
