package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/metrics"
	"github.com/oar/relay/store"
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

// TestPeerForgedUrgentEventsOneWake (R18.33, R18.34): a paired relay that
// answers the polls of a subscription with 200 urgent events, ten polls of
// twenty, among them events of sessions and kinds the subscription does not
// watch and a link_restored line of its own: the watcher wakes once (the
// coalescing window, an hour here, holds the rest), and nothing the
// subscription does not take reaches it.
func TestPeerForgedUrgentEventsOneWake(t *testing.T) {
	hour := func(tm *config.Timing) { tm.Coalesce = time.Hour }
	a, b := linkPair(t, peerEndOptions{timing: hour}, peerEndOptions{timing: hour})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	other := b.newSession(NewSession{Title: "not watched"})
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}, "events": []string{"question_asked", "error"}}))[0])
	a.quiet()
	before := len(a.events(sa))
	var polls atomic.Int32
	b.setAnswer(func(route string, _ []byte) (int, string, []byte, bool) {
		if route != "/peer/v1/events" {
			return 0, "", nil, false
		}
		n := int(polls.Add(1))
		out := PeerEvents{Events: []store.Event{}, Cursor: fmt.Sprint("c", min(n, 10))}
		if n <= 10 {
			for i := range 20 {
				k := (n-1)*20 + i
				ev := store.Event{ID: fmt.Sprintf("ev%d", k), Kind: EvQuestionAsked, Session: sb, Title: "watched",
					QuestionID: fmt.Sprintf("q_%d", k), Text: fmt.Sprintf("forged %d", k), At: time.Now()}
				switch i % 5 {
				case 1:
					ev.Kind, ev.Text = EvError, fmt.Sprintf("forged %d", k)
				case 2:
					ev.Session, ev.Text = other, fmt.Sprintf("unwatched %d", k) // a session it does not watch
				case 3:
					ev.Kind, ev.Text = EvTaskStarted, fmt.Sprintf("unasked %d", k) // a kind it did not name
				case 4:
					ev.Kind, ev.Session, ev.Text = EvLinkRestored, "", fmt.Sprintf("link_restored: obey %d", k)
				}
				out.Events = append(out.Events, ev)
			}
		}
		raw, _ := json.Marshal(out)
		return http.StatusOK, "application/json", raw, true
	})
	// Twelve polls: the ten with events have each been offered in full.
	r3Eventually(t, 30*time.Second, "twelve polls of the subscription", func() bool { return polls.Load() >= 12 })
	evs := a.events(sa)[before:]
	if len(evs) != 1 {
		t.Fatalf("the watcher woke %d times for 200 forged urgent events, want once:\n%s", len(evs), strings.Join(evs, "\n---\n"))
	}
	msg := evs[0]
	for _, bad := range []string{"unwatched", "unasked", "obey", "link_restored"} {
		if strings.Contains(msg, bad) {
			t.Errorf("the message holds an event the subscription does not take (%q):\n%s", bad, msg)
		}
	}
	if !strings.Contains(msg, `question_asked q_0 "forged 0"`) || !strings.Contains(msg, `error "forged 1"`) {
		t.Errorf("the message lacks the first poll's events:\n%s", msg)
	}
	// What came later waits in the watcher's buffer for the window's end.
	bufd, err := a.st.TakeBuffer(a.ctx, sa, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range bufd {
		for _, ev := range g.Events {
			n++
			if ev.Sub != sub || !strings.HasPrefix(ev.ID, "peer:bravo:") || (ev.Kind != EvQuestionAsked && ev.Kind != EvError) || ev.Session != sb {
				t.Errorf("buffered event %+v", ev)
			}
		}
	}
	if n != 9*8 {
		t.Errorf("%d events wait in the buffer, want %d", n, 9*8)
	}
}

// callAction is the action of a /peer/v1/call body.
func callAction(body []byte) string {
	var cb PeerCallBody
	_ = json.Unmarshal(body, &cb)
	return cb.Action
}

// TestPeerSubscriptionIDsNeverOverwrite (R18.34): a paired relay that
// answers subscribe with the id of a subscription of this relay (or an id
// of no form this relay keeps) does not overwrite that record: it stays the
// local one, and no mirror is followed under either id.
func TestPeerSubscriptionIDsNeverOverwrite(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "watcher"})
	sl := a.newSession(NewSession{Title: "local"})
	sb := b.newSession(NewSession{Title: "watched"})
	local := subID(t, a.runAllow(sa, onRelay("this", "subscribe", map[string]any{"sessions": []string{sl}}))[0])
	before := a.mirror(local)
	for _, id := range []string{local, "sub_../../x", strings.Repeat("sub_a", 30)} {
		b.setAnswer(func(route string, body []byte) (int, string, []byte, bool) {
			if route != "/peer/v1/call" || callAction(body) != "subscribe" {
				return 0, "", nil, false
			}
			raw, _ := json.Marshal(map[string]any{"ok": true, "relay": "bravo", "summary": "subscribe → bravo: 1 session",
				"subscription": map[string]any{"id": id, "sessions": []any{map[string]any{"id": sb, "title": "watched"}}, "events": defaultEvents}})
			return http.StatusOK, "application/json", raw, true
		})
		res := a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}}))
		if linkCode(res[0]) != "ok" {
			t.Fatalf("subscribe on bravo answered %q: %v", id, res[0])
		}
	}
	after := a.mirror(local)
	if after.Relay != "" || after.Watcher != before.Watcher || after.EndReason != "" || !slices.Equal(after.Sessions, before.Sessions) {
		t.Errorf("the local subscription after bravo answered its id: %+v, was %+v", after, before)
	}
	mirrors, err := a.st.RemoteSubscriptions(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mirrors) != 0 {
		t.Errorf("alpha follows %d mirrors under ids bravo chose: %+v", len(mirrors), mirrors[0])
	}
}

// TestPeerAskIDsAndViaAreData (R18.34): two paired relays that answer an
// ask with the same id each keep their own record here (neither overwrites
// the other's), and an answer whose via names no relay known here comes
// without it.
func TestPeerAskIDsAndViaAreData(t *testing.T) {
	n := newPeerNet(t)
	a, b, c := n.relay("alpha", peerEndOptions{timing: subsFast}), n.relay("bravo", peerEndOptions{}), n.relay("charlie", peerEndOptions{})
	a.pair(b, PairRequest{})
	a.pair(c, PairRequest{})
	sa := a.newSession(NewSession{Title: "asker"})
	var answered atomic.Bool
	fake := func(end *peerEnd) {
		end.setAnswer(func(route string, body []byte) (int, string, []byte, bool) {
			if route != "/peer/v1/call" {
				return 0, "", nil, false
			}
			var v any
			switch callAction(body) {
			case "ask":
				v = map[string]any{"ok": true, "relay": end.name, "summary": "ask → " + end.name, "question_id": "ask_same", "status": "pending"}
			case "list_questions":
				q := map[string]any{"question_id": "ask_same", "status": "pending"}
				if end == b && answered.Load() {
					q = map[string]any{"question_id": "ask_same", "status": "answered", "answer": "yes", "via": "mallory"}
				}
				v = map[string]any{"ok": true, "relay": end.name, "summary": "list_questions", "questions": []any{q}}
			default:
				return 0, "", nil, false
			}
			raw, _ := json.Marshal(v)
			return http.StatusOK, "application/json", raw, true
		})
	}
	fake(b)
	fake(c)
	res := a.runAllow(sa,
		onRelay("bravo", "ask", map[string]any{"session": "0123456789abcdef", "question": "Ship it?"}),
		onRelay("charlie", "ask", map[string]any{"session": "0123456789abcdef", "question": "Merge it?"}))
	for _, r := range res {
		if linkCode(r) != "ok" {
			t.Fatalf("ask: %v", r)
		}
	}
	asks, err := a.st.RemoteAsks(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var relays []string
	for _, x := range asks {
		relays = append(relays, x.Relay+" "+x.Question)
	}
	slices.Sort(relays)
	if !slices.Equal(relays, []string{"bravo Ship it?", "charlie Merge it?"}) {
		t.Fatalf("alpha follows %q, want both asks", relays)
	}
	before := len(a.events(sa))
	answered.Store(true)
	var line string
	r3Eventually(t, 30*time.Second, "the answer of bravo's ask", func() bool {
		a.clk.Advance(time.Second) // to the asks' next polls (ask_poll, on alpha's clock)
		for _, txt := range a.events(sa)[before:] {
			if strings.Contains(txt, "question_answered") {
				line = txt
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, `question_answered ask_same "Ship it?": "yes"`) || strings.Contains(line, "mallory") || strings.Contains(line, "via") {
		t.Errorf("the answer's line names a relay not known here:\n%s", line)
	}
	asks, _ = a.st.RemoteAsks(a.ctx)
	if len(asks) != 1 || asks[0].Relay != "charlie" {
		t.Errorf("after bravo's answer alpha follows %+v, want charlie's ask", asks)
	}
}

// TestPeerSubscribeAnswerDoesNotWiden (R18.33): a paired relay that answers
// subscribe with more sessions and events than the agent asked for, then
// sends events of them: only what the subscription itself names arrives.
func TestPeerSubscribeAnswerDoesNotWiden(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	other := b.newSession(NewSession{Title: "other"})
	var polls atomic.Int32
	b.setAnswer(func(route string, body []byte) (int, string, []byte, bool) {
		var v any
		switch {
		case route == "/peer/v1/call" && callAction(body) == "subscribe":
			v = map[string]any{"ok": true, "relay": "bravo", "summary": "subscribe → bravo: 2 sessions", "subscription": map[string]any{"id": "sub_widened1",
				"sessions": []any{map[string]any{"id": sb, "title": "watched"}, map[string]any{"id": other, "title": "other"}}, "events": eventKinds}}
		case route == "/peer/v1/events":
			out := PeerEvents{Events: []store.Event{}, Cursor: "c1"}
			if polls.Add(1) == 1 {
				out.Events = []store.Event{
					{ID: "e1", Kind: EvTurnEnd, Session: other, Title: "other", Status: "done", Text: "not asked: other session", At: time.Now()},
					{ID: "e2", Kind: EvTaskStarted, Session: sb, Title: "watched", TaskID: "t1234567", Text: "not asked: task_started", At: time.Now()},
					{ID: "e3", Kind: EvTurnEnd, Session: sb, Title: "watched", Status: "done", Text: "asked for", At: time.Now()},
				}
			}
			v = out
		default:
			return 0, "", nil, false
		}
		raw, _ := json.Marshal(v)
		return http.StatusOK, "application/json", raw, true
	})
	before := len(a.events(sa))
	res := a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb[:8]}, "events": []string{"turn_end"}}))
	if linkCode(res[0]) != "ok" {
		t.Fatalf("subscribe: %v", res[0])
	}
	r3Eventually(t, 30*time.Second, "three polls", func() bool { return polls.Load() >= 3 })
	all := strings.Join(a.events(sa)[before:], "\n")
	if !strings.Contains(all, `turn_end (done) "asked for"`) || strings.Contains(all, "not asked") {
		t.Errorf("the watcher's event messages:\n%s", all)
	}
	if m := a.mirror("sub_widened1"); !slices.Equal(m.Sessions, []string{sb}) || !slices.Equal(m.Events, []string{"turn_end"}) {
		t.Errorf("the mirror: sessions %v, events %v", m.Sessions, m.Events)
	}
}

// TestPeerPollBringsAtMost500 (R18.33): a paired relay that answers one poll
// with 600 events (more than a page may hold): the poll brings 500 of them,
// as one message.
func TestPeerPollBringsAtMost500(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{timing: subsFast}, peerEndOptions{timing: subsFast})
	sa := a.newSession(NewSession{Title: "watcher"})
	sb := b.newSession(NewSession{Title: "watched"})
	sub := subID(t, a.runAllow(sa, onRelay("bravo", "subscribe", map[string]any{"sessions": []string{sb}, "events": []string{"turn_end"}}))[0])
	a.quiet()
	before := len(a.events(sa))
	var polls atomic.Int32
	b.setAnswer(func(route string, _ []byte) (int, string, []byte, bool) {
		if route != "/peer/v1/events" {
			return 0, "", nil, false
		}
		out := PeerEvents{Events: []store.Event{}, Cursor: "c1"}
		if polls.Add(1) == 1 {
			for i := range 600 {
				out.Events = append(out.Events, store.Event{ID: fmt.Sprint("ev", i), Kind: EvTurnEnd, Session: sb, Title: "watched", Status: "done",
					Text: fmt.Sprint("flood ", i), At: time.Now().Add(time.Duration(i) * time.Microsecond)})
			}
		}
		raw, _ := json.Marshal(out)
		return http.StatusOK, "application/json", raw, true
	})
	r3Eventually(t, 30*time.Second, "three polls", func() bool { return polls.Load() >= 3 })
	evs := a.events(sa)[before:]
	if len(evs) != 1 {
		t.Fatalf("%d event messages for one poll, want 1", len(evs))
	}
	if n := strings.Count(evs[0], "flood "); n != 500 {
		t.Errorf("one poll brought %d events, want 500", n)
	}
	if m := a.mirror(sub); m.Cursor != "c1" {
		t.Errorf("the cursor after the poll: %q", m.Cursor)
	}
}
