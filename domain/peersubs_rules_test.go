package domain

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// Subscriptions and asks on a paired relay (R8.19–R8.21, R10.5, R10.8, §12
// pairing, R13.2) with linked fixtures, the link between them one the test
// can cut (peerEnd.down); moved down from relaytest/peer_seed_subs_test.go.

// subsFast is the timing of these tests: no coalescing window.
func subsFast(tm *config.Timing) { tm.Coalesce = 0 }

// subID is the id of a subscribe result's subscription.
func subID(t *testing.T, res map[string]any) string {
	t.Helper()
	if linkCode(res) != "ok" {
		t.Fatalf("subscribe: %v", res)
	}
	return res["subscription"].(map[string]any)["id"].(string)
}

// mirror reads e's record of a subscription held on a paired relay.
func (e *peerEnd) mirror(id string) *store.Subscription {
	e.t.Helper()
	sub, err := e.st.GetSubscription(e.ctx, id)
	if err != nil {
		e.t.Fatalf("subscription %s on %s: %v", id, e.name, err)
	}
	return sub
}

// cut takes the link to to down and waits until a's poll of the mirror
// found it down (the replay's link_lost starts there, R8.21).
func cut(t *testing.T, to, a *peerEnd, sub string) {
	t.Helper()
	to.down.Store(true)
	waitFor(t, "alpha to find the link to bravo down", func() bool { return !a.mirror(sub).LinkDownAt.IsZero() })
}

// replay waits for the one replay message in sid (link_lost … link_restored)
// and returns its lines.
func replay(t *testing.T, a *peerEnd, sid string) []string {
	t.Helper()
	var found []string
	waitFor(t, "the replay message in alpha's conversation", func() bool {
		found = nil
		for _, txt := range a.events(sid) {
			if strings.Contains(txt, "link_restored") {
				found = append(found, txt)
			}
		}
		return len(found) > 0
	})
	if len(found) != 1 {
		t.Fatalf("want one replay message, got %d: %q", len(found), found)
	}
	lines := strings.Split(found[0], "\n")
	if len(lines) < 3 || lines[0] != Header || lines[1] != "[relay event] bravo · link_lost" ||
		!strings.HasPrefix(lines[len(lines)-1], "[relay event] bravo · link_restored: ") {
		t.Fatalf("replay message:\n%s", found[0])
	}
	return lines
}

func turnLine(sid, title, text string, replayed bool) string {
	mark := ""
	if replayed {
		mark = "replayed · "
	}
	return fmt.Sprintf(`[relay event] %sbravo · session "%s" (%s): turn_end (done) "echo: %s"`, mark, title, sid[:8], text)
}

// sayEcho runs one turn on e's session and checks its echo.
func (e *peerEnd) sayEcho(sid, text string) {
	e.t.Helper()
	if tr := e.say(sid, text); tr.Reply != "echo: "+text {
		e.t.Fatalf("turn on %s: %q", e.name, tr.Reply)
	}
}

// sayKept is sayEcho on the watched side of subscription sub, returning once
// the turn's event is the last one e keeps in sub's replay stream: the
// fan-out runs as a job, and fan-outs run concurrently, so without this a
// replay could come before the event is kept, or two events be kept out of
// order.
func (e *peerEnd) sayKept(sub, sid, text string) {
	e.t.Helper()
	e.sayEcho(sid, text)
	r3Eventually(e.t, 20*time.Second, text+"'s event kept for the replay", func() bool {
		evs, _, err := e.st.SubEvents(e.ctx, sub, "", 1000)
		return err == nil && len(evs) > 0 && evs[len(evs)-1].Text == "echo: "+text
	})
}

// watching is a session's watching (GET /api/v1/sessions/{id}), by subscription id.
func (e *peerEnd) watching(sid string) map[string]map[string]any {
	e.t.Helper()
	out := map[string]map[string]any{}
	ws, _ := e.detail(sid)["watching"].([]any)
	for _, x := range ws {
		m := x.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

// TestPeerSeedUnpairEndsAsksAndSubs (issue 21 item 6; R8.19, R10.8, §12):
// removing a pairing ends the asks this relay's conversations made there on
// the relay that keeps them (out of its inbox) and ends the subscriptions
// (there too); the answer counts both.
func TestPeerSeedUnpairEndsAsksAndSubs(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "asker"})
	sb := b.newSession(NewSession{Title: "target"})
	res := a.runAllow(sa,
		onRelay("bravo", "ask", map[string]any{"session": sb, "question": "Ship it?", "options": []string{"yes", "no"}}),
		onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("ask on bravo: %v", res[0])
	}
	qid, sub := res[0]["question_id"].(string), subID(t, res[1])
	inInbox := func() bool {
		in, err := b.r.Inbox(b.ctx)
		if err != nil {
			t.Fatalf("bravo's inbox: %v", err)
		}
		for _, x := range in {
			if x.ID == qid {
				return true
			}
		}
		return false
	}
	if !inInbox() {
		t.Fatalf("bravo's inbox lacks %s before the unpairing", qid)
	}
	out, err := a.r.Unpair(a.ctx, "bravo")
	if err != nil {
		t.Fatalf("unpair: %v", err)
	}
	if !out.Removed || out.SubscriptionsEnded != 1 || out.AsksEnded != 1 || out.Note != "" {
		t.Errorf("unpair answer: %+v", out)
	}
	// On bravo, which kept them: the ask is out of the inbox, the subscription ended.
	if inInbox() {
		t.Errorf("bravo's inbox still holds %s after alpha removed the pairing", qid)
	}
	if ak, err := b.st.GetAsk(b.ctx, qid); err != nil || ak.Status != "withdrawn" {
		t.Errorf("the ask on bravo: %+v %v", ak, err)
	}
	if there, err := b.st.GetSubscription(b.ctx, sub); err != nil || there.EndReason == "" {
		t.Errorf("the subscription on bravo after the unpairing: %+v %v", there, err)
	}
	// On alpha: nothing followed any more; the subscription shows ended, unpaired.
	if asks, _ := a.st.RemoteAsks(a.ctx); len(asks) != 0 {
		t.Errorf("alpha still follows %d asks", len(asks))
	}
	if m := a.watching(sa)[sub]; m == nil || m["endReason"] != "unpaired" {
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
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast, limits: func(l *config.Limits) { l.ReplayEvents = 5 }})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}, "events": []string{"turn_end"}}))[0])
	cut(t, b, a, sub)
	for i := 1; i <= 7; i++ {
		b.sayKept(sub, sb, fmt.Sprint("turn ", i)) // in order: else the cap could keep another five
	}
	b.quiet()
	b.down.Store(false)
	lines := replay(t, a, sa)
	var want []string
	for i := 3; i <= 7; i++ {
		want = append(want, turnLine(sb, "watched", fmt.Sprint("turn ", i), true))
	}
	want = append(want, "[relay event] bravo · link_restored: 5 replayed events, 0 held for later")
	if d := cmp.Diff(want, lines[2:]); d != "" {
		t.Errorf("replay after 7 events with room for 5 (-want +got):\n%s", d)
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
	n := newPeerNet(t)
	a := n.relay("alpha", peerEndOptions{timing: subsFast})
	b := n.relay("bravo", peerEndOptions{timing: func(tm *config.Timing) { subsFast(tm); tm.ReplayKeep = keep }})
	tok := a.pair(b, PairRequest{})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}, "events": []string{"turn_end"}}))[0])
	cut(t, b, a, sub)
	cursor := a.mirror(sub).Cursor
	// What bravo keeps, as its events route shows it (the link is down for
	// alpha's polls only: this asks bravo's serving method itself).
	kept := func() []string {
		pe, err := b.r.PeerEventsFor(b.ctx, tok, sub, cursor, 0)
		if err != nil {
			t.Fatalf("bravo's events route: %v", err)
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
		waitFor(t, "bravo to keep "+text, func() bool { got = kept(); return slices.Contains(got, text) })
		return got
	}
	b.sayEcho(sb, "old")
	if got := keptWith("echo: old"); !slices.Equal(got, []string{"echo: old"}) {
		t.Fatalf("bravo keeps %q, want the old event", got)
	}
	// New events keep coming, each a second on bravo's clock after the one
	// before; the old one goes once it is older than replay_keep.
	i := 0
	for ; i < 10; i++ {
		b.clk.Advance(time.Second)
		b.sayEcho(sb, fmt.Sprint("new ", i+1))
		got := keptWith(fmt.Sprintf("echo: new %d", i+1))
		if !slices.Contains(got, "echo: old") {
			break
		}
		if i+1 >= int(keep/time.Second)+1 {
			t.Fatalf("bravo still keeps the old event %d s after it happened, with replay_keep %s: %q", i+1, keep, got)
		}
	}
	if i+1 != int(keep/time.Second)+1 {
		t.Errorf("bravo let the old event go %d s after it happened, want %s and a second", i+1, keep)
	}
	b.down.Store(false)
	lines := replay(t, a, sa)
	mid := lines[2 : len(lines)-1]
	for _, l := range mid {
		if !strings.HasPrefix(l, fmt.Sprintf(`[relay event] replayed · bravo · session "watched" (%s): turn_end (done) "echo: new `, sb[:8])) {
			t.Errorf("replayed line: %q", l)
		}
	}
	if len(mid) == 0 || mid[len(mid)-1] != turnLine(sb, "watched", fmt.Sprint("new ", i+1), true) {
		t.Errorf("the replay lacks the newest event: %q", mid)
	}
	if want := fmt.Sprintf("[relay event] bravo · link_restored: %d replayed events, 0 held for later", len(mid)); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
}

// TestPeerSeedExclude (issue 21 item 8; R8.7, R8.21): exclude is passed on to
// the watched relay (it resolves the ids and leaves those sessions out), and
// this relay drops those sessions' events too, for a relay too old to know
// exclude (here one that ignores it), matching an id's prefix as given.
func TestPeerSeedExclude(t *testing.T) {
	n := newPeerNet(t)
	a, b := n.relay("alpha", peerEndOptions{timing: subsFast}), n.relay("bravo", peerEndOptions{timing: subsFast})
	a.pair(b, PairRequest{})
	sa := a.newSession(NewSession{Title: "watcher"})
	skip := b.newSession(NewSession{Title: "noisy"})
	keep := b.newSession(NewSession{Title: "wanted"})
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{"all"},
		"exclude": []string{skip[:8]}, "events": []string{"turn_end"}}))[0])
	if there, err := b.st.GetSubscription(b.ctx, sub); err != nil || !slices.Equal(there.Exclude, []string{skip}) {
		t.Fatalf("bravo's subscription: exclude %v (%v), want [%s]", there.Exclude, err, skip)
	}
	if m := a.watching(sa)[sub]; fmt.Sprint(m["exclude"]) != fmt.Sprint([]any{skip}) {
		t.Errorf("alpha's record of the subscription: %v", m)
	}
	b.sayEcho(skip, "noise")
	b.sayEcho(keep, "signal")
	all := func() string { return strings.Join(a.events(sa), "\n") }
	waitFor(t, "the wanted session's event", func() bool { return strings.Contains(all(), "echo: signal") })
	if strings.Contains(all(), "noise") {
		t.Errorf("the excluded session's event came:\n%s", all())
	}

	// A relay that does not know exclude: it serves the excluded session's
	// events; alpha drops them.
	const noisy, wanted = "aaaaaaaa1111", "bbbbbbbb2222"
	var served atomic.Int32
	old := n.relay("oldbox", peerEndOptions{})
	old.setHello(func(h *Hello) {
		h.Version, h.Instance, h.Features = "0.9.10", "inst-old", []string{"call", "events", "asks", "inbox"}
	})
	old.setAnswer(func(route string, _ []byte) (int, string, []byte, bool) {
		switch route {
		case "/peer/v1/call":
			return http.StatusOK, "application/json", []byte(`{"ok":true,"relay":"oldbox","subscription":{"id":"sub_old0000001","scope":"all","sessions":"all","events":["turn_end"],"once":false,"stalledMinutes":15}}`), true
		case "/peer/v1/events":
			if served.Load() > 0 {
				return http.StatusOK, "application/json", []byte(`{"events":[],"cursor":"2-0"}`), true
			}
			served.Add(1)
			at := a.clk.Now().UTC().Format(time.RFC3339Nano)
			return http.StatusOK, "application/json", fmt.Appendf(nil, `{"events":[{"id":"ev_old1","kind":"turn_end","session":%q,"title":"noisy","at":%q,"status":"done","text":"old noise"},`+
				`{"id":"ev_old2","kind":"turn_end","session":%q,"title":"wanted","at":%q,"status":"done","text":"old signal"}],"cursor":"2-0"}`, noisy, at, wanted, at), true
		}
		return 0, "", nil, false
	})
	a.pair(old, PairRequest{Name: "oldbox"})
	subID(t, a.runAllow(sa, onRelay("oldbox", "subscribe", map[string]any{"sessions": []string{"all"},
		"exclude": []string{noisy[:8]}, "events": []string{"turn_end"}}))[0])
	waitFor(t, "the old relay's wanted event", func() bool { return strings.Contains(all(), "old signal") })
	if strings.Contains(all(), "old noise") || served.Load() == 0 {
		t.Errorf("the old relay's excluded session's event came (served %d):\n%s", served.Load(), all())
	}
}

// TestPeerSeedAskPollOffline (issue 21 item 8; R10.5, §14 ask_poll,
// ask_poll_offline): an open ask on a paired relay is polled every ask_poll
// (5 s by default) and every ask_poll_offline (30 s by default) while that
// relay does not answer; once it answers again the answer comes. Each poll's
// next time is read from the ask alpha keeps, on alpha's simulated clock.
func TestPeerSeedAskPollOffline(t *testing.T) {
	d := config.Default().Timing
	if d.AskPoll != 5*time.Second || d.AskPollOffline != 30*time.Second {
		t.Fatalf("default ask polls: %s / %s, want 5s / 30s", d.AskPoll, d.AskPollOffline)
	}
	up, down := d.AskPoll, d.AskPollOffline
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "asker"})
	sb := b.newSession(NewSession{Title: "target"})
	res := a.runAllow(sa, onRelay("bravo", "ask", map[string]any{"session": sb, "question": "Merge now?"}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("ask on bravo: %v", res[0])
	}
	qid := res[0]["question_id"].(string)
	ask := func() *store.RemoteAsk {
		asks, err := a.st.RemoteAsks(a.ctx)
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
	if got, want := ask().NextPollAt, a.clk.Now().Add(up); !got.Equal(want) {
		t.Errorf("the first poll at %s, want %s (ask_poll after the ask)", got, want)
	}
	// poll moves alpha's clock to the ask's next poll, waits for that poll
	// (through the link, down or not) to set the next one, and returns how
	// far after the poll it lies.
	poll := func(wantDown bool) time.Duration {
		t.Helper()
		before := len(b.polls())
		a.clk.Advance(ask().NextPollAt.Sub(a.clk.Now()))
		at := a.clk.Now()
		waitFor(t, fmt.Sprintf("a poll (link down: %v)", wantDown), func() bool {
			ps := b.polls()
			return len(ps) > before && ps[len(ps)-1].down == wantDown && ask().NextPollAt.After(at)
		})
		return ask().NextPollAt.Sub(at)
	}
	if got := poll(false); got != up {
		t.Errorf("while bravo answers, the next poll is %s after the last, want %s", got, up)
	}
	b.down.Store(true)
	if got := poll(true); got != down {
		t.Errorf("while bravo does not answer, the next poll is %s after the last, want %s", got, down)
	}
	b.down.Store(false)
	if got := poll(false); got != up {
		t.Errorf("once bravo answers again, the next poll is %s after the last, want %s", got, up)
	}
	if _, err := b.r.AnswerAsk(b.ctx, qid, InboxAnswer{Answer: "yes, merge"}); err != nil {
		t.Fatalf("answer on bravo: %v", err)
	}
	a.clk.Advance(ask().NextPollAt.Sub(a.clk.Now()))
	waitFor(t, "the answer in alpha's conversation", func() bool {
		return strings.Contains(strings.Join(a.events(sa), "\n"), "question_answered "+qid)
	})
}

// TestPeerSeedReplayHeldCount (issue 21 item 8; R8.8, R8.21, R8.23): the
// digest of a subscription on a paired relay applies here to replayed events
// too, and link_restored names how many of them are held: all while the
// digest is not due (they come later as the digest, list_subscriptions
// counts them), none when it is due (they are the digest). The digest is
// due on alpha's simulated clock.
func TestPeerSeedReplayHeldCount(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: subsFast, start: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	const digest = 120 // minutes
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb},
		"events": []string{"turn_end"}, "digest_minutes": digest}))[0])

	// The digest is not due yet (alpha's clock stands still): both replayed events are held.
	cut(t, b, a, sub)
	b.sayKept(sub, sb, "one")
	b.sayKept(sub, sb, "two")
	b.down.Store(false)
	lines := replay(t, a, sa)
	if d := cmp.Diff([]string{"[relay event] bravo · link_restored: 2 replayed events, 2 held for later"}, lines[2:]); d != "" {
		t.Errorf("replay with the digest not due (-want +got):\n%s", d)
	}
	res := a.runAllow(sa, onRelay("bravo", "list_subscriptions", nil))
	if subs, _ := res[0]["subscriptions"].([]any); len(subs) != 1 || subs[0].(map[string]any)["heldCount"] != float64(2) ||
		subs[0].(map[string]any)["nextDeliveryAt"] == nil {
		t.Errorf("list_subscriptions on bravo while 2 are held: %v", res[0])
	}
	// The digest falls due: the held replayed events come as the digest.
	a.clk.Advance(digest * time.Minute)
	var dg string
	waitFor(t, "the digest with the held replayed events", func() bool {
		a.run()
		for _, txt := range a.events(sa) {
			if strings.Contains(txt, "Digest of 2 events") {
				dg = txt
				return true
			}
		}
		return false
	})
	for _, text := range []string{"one", "two"} {
		if !strings.Contains(dg, turnLine(sb, "watched", text, true)) {
			t.Errorf("digest lacks %q:\n%s", text, dg)
		}
	}
	digested := a.mirror(sub).LastDigestAt

	// The next digest falls due while the link is down: the replayed
	// events are that digest, in the replay message; none is held.
	cut(t, b, a, sub)
	b.sayKept(sub, sb, "three")
	b.sayKept(sub, sb, "four")
	a.clk.Advance(digested.Add(digest*time.Minute + time.Second).Sub(a.clk.Now()))
	before := len(a.events(sa))
	b.down.Store(false)
	var got string
	waitFor(t, "the second replay message", func() bool {
		texts := a.events(sa)
		for _, txt := range texts[min(before, len(texts)):] {
			if strings.Contains(txt, "link_restored") {
				got = txt
				return true
			}
		}
		return false
	})
	want := strings.Join([]string{Header, "[relay event] bravo · link_lost",
		turnLine(sb, "watched", "three", true), turnLine(sb, "watched", "four", true),
		"[relay event] bravo · link_restored: 2 replayed events, 0 held for later"}, "\n")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("replay with the digest due (-want +got):\n%s", d)
	}
	if n, _, _ := a.st.HeldInfo(a.ctx, sub); n != 0 {
		t.Errorf("held after a replay that was the digest: %d", n)
	}
}

// TestPeerSeedRemoteSubsAreTheOwners (issue 21 item 5; R8.19, R8.23, §12):
// a subscription a conversation here holds on a paired relay is in GET
// /sessions/{id} watching with its relay and that relay's sessions;
// list_subscriptions there shows heldCount / nextDeliveryAt for what this
// relay holds of it (its digest applies here, R8.21); the owner's
// Unsubscribe (DELETE /api/v1/subscriptions/{id}) ends it on the other relay
// too. (The console's chip and button stay in relaytest's
// TestPeerSeedRemoteSubsConsole.)
func TestPeerSeedRemoteSubsAreTheOwners(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "watcher"})
	local := a.newSession(NewSession{Title: "local build"})
	sb1 := b.newSession(NewSession{Title: "Nightly deploy"})
	sb2 := b.newSession(NewSession{Title: "Docs"})
	res := a.runAllow(sa,
		onRelay("this", "subscribe", map[string]any{"sessions": []string{local}}),
		onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb1, sb2}, "events": []string{"turn_end"}, "digest_minutes": 600}))
	localID, remoteID := subID(t, res[0]), subID(t, res[1])

	// GET /sessions/{id} watching: both, the remote one naming its relay and
	// bravo's sessions with their titles.
	w := a.watching(sa)
	if len(w) != 2 || w[localID] == nil || w[remoteID] == nil {
		t.Fatalf("watching: want %s and %s, got %v", localID, remoteID, w)
	}
	rm := w[remoteID]
	if rm["relay"] != "bravo" || rm["scope"] != "sessions" || rm["digestMinutes"] != float64(600) || rm["heldCount"] != float64(0) ||
		fmt.Sprint(rm["sessions"]) != fmt.Sprint([]any{map[string]any{"id": sb1, "title": "Nightly deploy"}, map[string]any{"id": sb2, "title": "Docs"}}) {
		t.Errorf("the remote subscription in watching: %v", rm)
	}

	// An event there is held here by the digest: list_subscriptions on
	// bravo and the owner's view show it (R8.23).
	b.sayEcho(sb1, "deployed")
	waitFor(t, "alpha to hold bravo's event for the digest", func() bool {
		n, _, err := a.st.HeldInfo(a.ctx, remoteID)
		return err == nil && n == 1
	})
	res = a.runAllow(sa, onRelay("bravo", "list_subscriptions", nil))
	subs, _ := res[0]["subscriptions"].([]any)
	if linkCode(res[0]) != "ok" || len(subs) != 1 {
		t.Fatalf("list_subscriptions on bravo: %v", res[0])
	}
	if m := subs[0].(map[string]any); m["id"] != remoteID || m["heldCount"] != float64(1) || m["nextDeliveryAt"] == nil {
		t.Errorf("list_subscriptions on bravo: want heldCount 1 and a nextDeliveryAt for what alpha holds, got %v", m)
	}
	if m := a.watching(sa)[remoteID]; m["heldCount"] != float64(1) || m["nextDeliveryAt"] == nil {
		t.Errorf("watching: the remote subscription's held event: %v", m)
	}

	// The owner's Unsubscribe: ended on bravo too.
	ended, err := a.r.Unsubscribe(a.ctx, remoteID)
	if out := asJSON(t, ended); err != nil || out["endReason"] != "unsubscribed" || out["note"] != nil {
		t.Fatalf("Unsubscribe: %v %v", out, err)
	}
	there, err := b.st.GetSubscription(b.ctx, remoteID)
	if err != nil || there.EndReason != "unsubscribed" {
		t.Errorf("on bravo after the owner's Unsubscribe on alpha: %+v %v", there, err)
	}
	if active, _ := b.st.WatcherSubscriptions(b.ctx, "peer:alpha:"+sa); len(active) != 0 {
		t.Errorf("bravo still has %d active subscriptions of alpha's watcher", len(active))
	}
	if m := a.watching(sa)[remoteID]; m == nil || m["endReason"] != "unsubscribed" {
		t.Errorf("watching after Unsubscribe: %v", m)
	}
}
