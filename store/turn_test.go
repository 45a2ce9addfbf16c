package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// base is a fixed instant (whole milliseconds: the store keeps ms).
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTurn(sid, role, text string, at time.Time) *Turn {
	return &Turn{ID: NewID(8), Session: sid, Role: role, Text: text, CreatedAt: at,
		From: &Ref{Relay: "r", Session: "caller", Title: "Caller"}, Origin: Origin{Path: []string{"caller"}}, Caller: "caller"}
}

// push queues t and fails the test on an error.
func (e *testEnv) push(t *Turn, orch string, limit int, enforce bool, drainID string) bool {
	e.t.Helper()
	start, err := e.s.PushTurn(e.ctx, t, orch, limit, enforce, drainID)
	if err != nil {
		e.t.Fatalf("PushTurn %s: %v", t.ID, err)
	}
	return start
}

func (e *testEnv) createSession(sid string, last time.Time) {
	e.t.Helper()
	if err := e.s.CreateSession(e.ctx, &Session{ID: sid, Title: "t " + sid, Token: "tok" + NewID(6), CreatedAt: last, LastActivityAt: last}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) queue(sid string) []string { e.t.Helper(); return e.list(e.key("q", sid)) }

// messageIDs returns the ids of a session's messages in the list's order.
func (e *testEnv) messageIDs(sid string) []string {
	e.t.Helper()
	var ids []string
	for _, raw := range e.list(e.key("msgs", sid)) {
		var m Message
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			e.t.Fatalf("message %q: %v", raw, err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func ids(ts ...*Turn) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// The first push of an idle session sets the drain flag (the task id given)
// and the drains index and returns start=true; later ones only queue.
func TestPushTurnFirstStartsDrain(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	e.createSession(sid, base)

	t1 := newTurn(sid, "user", "one", base.Add(time.Second))
	if !e.push(t1, "", 4, false, "d1") {
		t.Fatal("first push: start=false, want true")
	}
	if got := e.get(e.key("drain", sid)); got != "d1" {
		t.Errorf("drain flag = %q, want d1", got)
	}
	if !e.isMember(e.key("drains"), sid) {
		t.Errorf("%s not in the drains index", sid)
	}
	// The turn record, the message, the id index and the session's activity.
	tr, err := e.s.GetTurn(e.ctx, t1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != TurnQueued || tr.Session != sid || tr.Role != "user" || tr.Text != "one" || tr.Caller != "caller" ||
		!tr.CreatedAt.Equal(t1.CreatedAt) || tr.From == nil || tr.From.Session != "caller" || !slices.Equal(tr.Origin.Path, []string{"caller"}) {
		t.Errorf("turn record = %+v", tr)
	}
	msgs, err := e.s.LastMessages(e.ctx, sid, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].ID != t1.ID || msgs[0].Text != "one" || msgs[0].Role != "user" {
		t.Errorf("messages = %+v", msgs)
	}
	if _, ok := e.zscore(e.key("tids"), t1.ID); !ok {
		t.Errorf("turn id not in tids")
	}
	if got := e.hget(e.key("sess", sid), "last"); got != strconv.FormatInt(ms(t1.CreatedAt), 10) {
		t.Errorf("session last = %s, want %d", got, ms(t1.CreatedAt))
	}
	if sc, _ := e.zscore(e.key("sessions", "active"), sid); int64(sc) != ms(t1.CreatedAt) {
		t.Errorf("sessions:active score = %v, want %d", sc, ms(t1.CreatedAt))
	}

	t2 := newTurn(sid, "agent", "two", base.Add(2*time.Second))
	t3 := newTurn(sid, "schedule", "three", base.Add(3*time.Second))
	if e.push(t2, "", 4, false, "d2") || e.push(t3, "", 4, false, "d3") {
		t.Error("a later push returned start=true")
	}
	if got := e.get(e.key("drain", sid)); got != "d1" {
		t.Errorf("drain flag = %q after later pushes, want d1 (unchanged)", got)
	}
	if got, want := e.queue(sid), ids(t1, t2, t3); !slices.Equal(got, want) {
		t.Errorf("queue = %v, want %v", got, want)
	}
	// Prompts (not events) queue in the order their messages were appended.
	if got := e.messageIDs(sid); !slices.Equal(got, e.queue(sid)) {
		t.Errorf("messages %v are not in queue order %v", got, e.queue(sid))
	}
	if got := e.hget(e.key("sess", sid), "last"); got != strconv.FormatInt(ms(t3.CreatedAt), 10) {
		t.Errorf("session last = %s, want the last push's %d", got, ms(t3.CreatedAt))
	}
}

// The sessions:active index only moves a session already in it (ZADD XX): an
// archived session is not put back.
func TestPushTurnKeepsArchivedOutOfActive(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	e.createSession(sid, base)
	if err := e.s.ArchiveSession(e.ctx, sid, base); err != nil {
		t.Fatal(err)
	}
	e.push(newTurn(sid, "user", "x", base.Add(time.Minute)), "", 4, false, "d")
	if _, ok := e.zscore(e.key("sessions", "active"), sid); ok {
		t.Error("a push put an archived session back into sessions:active")
	}
}

// R8.15: an event message is queued next, after the events already waiting
// and before every other waiting prompt; its message is still appended last.
func TestPushTurnEventGoesToHead(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

	u1 := newTurn(sid, "user", "u1", at(1))
	u2 := newTurn(sid, "agent", "u2", at(2))
	e.push(u1, "", 4, false, "d")
	e.push(u2, "", 4, false, "d")
	e1 := newTurn(sid, "event", "e1", at(3))
	e.push(e1, "", 4, false, "d")
	if got, want := e.queue(sid), ids(e1, u1, u2); !slices.Equal(got, want) {
		t.Fatalf("after one event: queue = %v, want %v", got, want)
	}
	e2 := newTurn(sid, "event", "e2", at(4))
	e.push(e2, "", 4, false, "d")
	if got, want := e.queue(sid), ids(e1, e2, u1, u2); !slices.Equal(got, want) {
		t.Fatalf("after two events: queue = %v, want %v", got, want)
	}
	u3 := newTurn(sid, "schedule", "u3", at(5))
	e.push(u3, "", 4, false, "d")
	if got, want := e.queue(sid), ids(e1, e2, u1, u2, u3); !slices.Equal(got, want) {
		t.Fatalf("a prompt after events: queue = %v, want %v", got, want)
	}
	if got, want := e.messageIDs(sid), ids(u1, u2, e1, e2, u3); !slices.Equal(got, want) {
		t.Errorf("messages = %v, want append order %v", got, want)
	}

	// Once the head is running, a new event goes before the remaining prompts.
	if id, err := e.s.PopTurn(e.ctx, sid, "", at(6)); err != nil || id != e1.ID {
		t.Fatalf("PopTurn = %q, %v; want %s", id, err, e1.ID)
	}
	if id, err := e.s.PopTurn(e.ctx, sid, "", at(6)); err != nil || id != e2.ID {
		t.Fatalf("PopTurn = %q, %v; want %s", id, err, e2.ID)
	}
	e3 := newTurn(sid, "event", "e3", at(7))
	e.push(e3, "", 4, false, "d")
	if got, want := e.queue(sid), ids(e3, u1, u2, u3); !slices.Equal(got, want) {
		t.Errorf("event behind a running turn: queue = %v, want %v", got, want)
	}

	// A queue of events only: a new event goes last.
	sid2 := "s" + NewID(4)
	a := newTurn(sid2, "event", "a", at(1))
	b := newTurn(sid2, "event", "b", at(2))
	e.push(a, "", 4, false, "d")
	e.push(b, "", 4, false, "d")
	if got, want := e.queue(sid2), ids(a, b); !slices.Equal(got, want) {
		t.Errorf("events only: queue = %v, want %v", got, want)
	}
}

// The 4-at-work cap: a push that would make a fifth session of one
// orchestrator busy is refused and leaves nothing behind; a push to a session
// already busy just queues.
func TestPushTurnSessionLimit(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	var sids []string
	for i := range 5 {
		sid := fmt.Sprintf("s%d%s", i, NewID(3))
		sids = append(sids, sid)
		e.createSession(sid, base)
	}
	for _, sid := range sids[:4] {
		if !e.push(newTurn(sid, "agent", "go", base.Add(time.Second)), orch, 4, true, "d-"+sid) {
			t.Fatalf("push to %s: start=false", sid)
		}
	}
	if n, err := e.s.BusyCount(e.ctx, orch); err != nil || n != 4 {
		t.Fatalf("BusyCount = %d, %v; want 4", n, err)
	}

	fifth := sids[4]
	refused := newTurn(fifth, "agent", "no room", base.Add(time.Minute))
	start, err := e.s.PushTurn(e.ctx, refused, orch, 4, true, "d-"+fifth)
	if !errors.Is(err, ErrSessionLimit) || start {
		t.Fatalf("push over the cap = %v, %v; want false, ErrSessionLimit", start, err)
	}
	for _, k := range []string{e.key("msgs", fifth), e.key("turn", refused.ID), e.key("q", fifth), e.key("drain", fifth), e.key("cur", fifth)} {
		if e.exists(k) {
			t.Errorf("a refused push left %s", k)
		}
	}
	if _, ok := e.zscore(e.key("tids"), refused.ID); ok {
		t.Error("a refused push left its id in tids")
	}
	if e.isMember(e.key("drains"), fifth) || e.isMember(e.key("busy", orch), fifth) {
		t.Error("a refused push left the session in drains or busy")
	}
	// The record, not the field: "last" is not written while it equals "created".
	if got, err := e.s.GetSession(e.ctx, fifth); err != nil || ms(got.LastActivityAt) != ms(base) {
		t.Errorf("a refused push moved the session's last activity to %v (%v)", got, err)
	}
	if sc, _ := e.zscore(e.key("sessions", "active"), fifth); int64(sc) != ms(base) {
		t.Errorf("a refused push moved sessions:active to %v", sc)
	}

	// At the cap, a push to a session already busy queues (and starts nothing).
	again := newTurn(sids[1], "agent", "more", base.Add(2*time.Second))
	if e.push(again, orch, 4, true, "dx") {
		t.Error("push to a busy session: start=true")
	}
	if got := len(e.queue(sids[1])); got != 2 {
		t.Errorf("queue of the busy session has %d turns, want 2", got)
	}
	if n, _ := e.s.BusyCount(e.ctx, orch); n != 4 {
		t.Errorf("BusyCount = %d, want 4", n)
	}

	// Without enforce (the owner's prompt) the session counts but is not refused.
	if !e.push(newTurn(fifth, "user", "owner", base.Add(3*time.Second)), orch, 4, false, "d-"+fifth) {
		t.Error("unenforced push: start=false")
	}
	if n, _ := e.s.BusyCount(e.ctx, orch); n != 5 {
		t.Errorf("BusyCount after an unenforced push = %d, want 5", n)
	}
}

// N sessions of one orchestrator pushed at once: exactly `limit` get in, and
// the refused ones leave nothing.
func TestPushTurnSessionLimitConcurrent(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	const n, limit = 16, 4
	var mu sync.Mutex
	var in, out []string
	var wg sync.WaitGroup
	for i := range n {
		sid := fmt.Sprintf("c%02d", i)
		wg.Go(func() {
			_, err := e.s.PushTurn(e.ctx, newTurn(sid, "agent", "x", base), orch, limit, true, "d-"+sid)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				in = append(in, sid)
			case errors.Is(err, ErrSessionLimit):
				out = append(out, sid)
			default:
				t.Errorf("push %s: %v", sid, err)
			}
		})
	}
	wg.Wait()
	if len(in) != limit || len(out) != n-limit {
		t.Fatalf("%d pushes got in and %d were refused; want %d and %d", len(in), len(out), limit, n-limit)
	}
	busy, err := e.rdb.SMembers(e.ctx, e.key("busy", orch)).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(busy)
	slices.Sort(in)
	if !slices.Equal(busy, in) {
		t.Errorf("busy = %v, want the sessions that got in %v", busy, in)
	}
	for _, sid := range out {
		if e.exists(e.key("q", sid)) || e.exists(e.key("msgs", sid)) || e.exists(e.key("drain", sid)) {
			t.Errorf("refused %s left keys", sid)
		}
	}
	if got := len(e.keysOf("turn:*")); got != limit {
		t.Errorf("%d turn records, want %d", got, limit)
	}
}

// Reserve takes a slot before a session exists; Unreserve gives it back.
func TestReserveUnreserve(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	for _, sid := range []string{"a", "b", "c", "d"} {
		if err := e.s.Reserve(e.ctx, orch, sid, 4); err != nil {
			t.Fatalf("Reserve %s: %v", sid, err)
		}
	}
	if err := e.s.Reserve(e.ctx, orch, "e", 4); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("fifth Reserve = %v, want ErrSessionLimit", err)
	}
	if e.isMember(e.key("busy", orch), "e") {
		t.Error("a refused Reserve added the session")
	}
	if err := e.s.Reserve(e.ctx, orch, "b", 4); err != nil {
		t.Errorf("Reserve of a session already reserved = %v, want nil", err)
	}
	// A reserved session's first prompt fits even at the cap.
	if !e.push(newTurn("c", "agent", "x", base), orch, 4, true, "d") {
		t.Error("push to a reserved session: start=false")
	}
	if err := e.s.Unreserve(e.ctx, orch, "a"); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.s.BusyCount(e.ctx, orch); n != 3 {
		t.Errorf("BusyCount after Unreserve = %d, want 3", n)
	}
	if err := e.s.Reserve(e.ctx, orch, "e", 4); err != nil {
		t.Errorf("Reserve after Unreserve = %v", err)
	}
	// No orchestrator: nothing to count.
	if err := e.s.Reserve(e.ctx, "", "z", 0); err != nil {
		t.Errorf("Reserve without orchestrator = %v", err)
	}
	if err := e.s.Unreserve(e.ctx, "", "z"); err != nil {
		t.Errorf("Unreserve without orchestrator = %v", err)
	}
	if got := e.keysOf("busy:*"); len(got) != 1 {
		t.Errorf("busy keys = %v, want only the orchestrator's", got)
	}
}

// Concurrent Reserves on one orchestrator never exceed the limit.
func TestReserveConcurrent(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	const n, limit = 20, 4
	var mu sync.Mutex
	ok := 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := e.s.Reserve(e.ctx, orch, fmt.Sprint("r", i), limit)
			if err != nil && !errors.Is(err, ErrSessionLimit) {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != limit || e.scard(e.key("busy", orch)) != limit {
		t.Errorf("%d Reserves succeeded, busy has %d; want %d", ok, e.scard(e.key("busy", orch)), limit)
	}
}

// PopTurn on a non-empty queue marks the head running and sets cur; on an
// empty queue it clears the drain flag, leaves the drains index and releases
// the orchestrator's slot.
func TestPopTurn(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	sid := "s" + NewID(4)
	t1 := newTurn(sid, "agent", "1", base)
	t2 := newTurn(sid, "agent", "2", base.Add(time.Second))
	e.push(t1, orch, 4, true, "d1")
	e.push(t2, orch, 4, true, "d1")

	now := base.Add(time.Minute)
	id, err := e.s.PopTurn(e.ctx, sid, orch, now)
	if err != nil || id != t1.ID {
		t.Fatalf("PopTurn = %q, %v; want %s", id, err, t1.ID)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, sid); cur != t1.ID {
		t.Errorf("cur = %q, want %s", cur, t1.ID)
	}
	tr, err := e.s.GetTurn(e.ctx, t1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != TurnRunning || !tr.StartedAt.Equal(now) {
		t.Errorf("popped turn: status %s started %v; want running at %v", tr.Status, tr.StartedAt, now)
	}
	if tr2, _ := e.s.GetTurn(e.ctx, t2.ID); tr2.Status != TurnQueued {
		t.Errorf("the next turn's status = %s, want queued", tr2.Status)
	}
	if got := e.queue(sid); !slices.Equal(got, ids(t2)) {
		t.Errorf("queue = %v, want %v", got, ids(t2))
	}
	if e.get(e.key("drain", sid)) != "d1" || !e.isMember(e.key("drains"), sid) || !e.isMember(e.key("busy", orch), sid) {
		t.Error("a pop with turns left cleared the drain flag, the drains index or the slot")
	}

	// Empty the queue, then pop on it.
	if id, _ := e.s.PopTurn(e.ctx, sid, orch, now); id != t2.ID {
		t.Fatalf("second PopTurn = %q, want %s", id, t2.ID)
	}
	id, err = e.s.PopTurn(e.ctx, sid, orch, now)
	if err != nil || id != "" {
		t.Fatalf("PopTurn on an empty queue = %q, %v; want \"\"", id, err)
	}
	if e.exists(e.key("drain", sid)) {
		t.Error("the drain flag is still set")
	}
	if e.isMember(e.key("drains"), sid) {
		t.Error("the session is still in the drains index")
	}
	if e.isMember(e.key("busy", orch), sid) {
		t.Error("the orchestrator's slot was not released")
	}

	// Without an orchestrator.
	sid2 := "s" + NewID(4)
	e.push(newTurn(sid2, "user", "x", base), "", 4, false, "d2")
	_, _ = e.s.PopTurn(e.ctx, sid2, "", now)
	if id, err := e.s.PopTurn(e.ctx, sid2, "", now); err != nil || id != "" {
		t.Fatalf("PopTurn (no orchestrator) on an empty queue = %q, %v", id, err)
	}
	if e.exists(e.key("drain", sid2)) || e.isMember(e.key("drains"), sid2) {
		t.Error("drain flag or index left (no orchestrator)")
	}
}

// FinishTurn records the outcome, appends the message, clears cur and moves
// the session's activity; with turns left it reports more and keeps the
// drain and the slot, else it clears them.
func TestFinishTurn(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	sid := "s" + NewID(4)
	e.createSession(sid, base)
	t1 := newTurn(sid, "agent", "1", base)
	t2 := newTurn(sid, "agent", "2", base)
	e.push(t1, orch, 4, true, "d1")
	e.push(t2, orch, 4, true, "d1")
	_, _ = e.s.PopTurn(e.ctx, sid, orch, base)

	at := base.Add(time.Minute)
	reply := &Message{ID: NewID(8), Role: "assistant", Text: "done 1", CreatedAt: at}
	more, err := e.s.FinishTurn(e.ctx, sid, orch, t1.ID, "", reply, at, "status", TurnDone, "reply", "done 1", "ended", ms(at))
	if err != nil || !more {
		t.Fatalf("FinishTurn with a turn queued = %v, %v; want true", more, err)
	}
	tr, _ := e.s.GetTurn(e.ctx, t1.ID)
	if tr.Status != TurnDone || tr.Reply != "done 1" || !tr.EndedAt.Equal(at) {
		t.Errorf("finished turn = %+v", tr)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, sid); cur != "" {
		t.Errorf("cur = %q after finish", cur)
	}
	if got, want := e.messageIDs(sid), []string{t1.ID, t2.ID, reply.ID}; !slices.Equal(got, want) {
		t.Errorf("messages = %v, want %v", got, want)
	}
	if got := e.hget(e.key("sess", sid), "last"); got != strconv.FormatInt(ms(at), 10) {
		t.Errorf("session last = %s, want %d", got, ms(at))
	}
	if sc, _ := e.zscore(e.key("sessions", "active"), sid); int64(sc) != ms(at) {
		t.Errorf("sessions:active score = %v, want %d", sc, ms(at))
	}
	if e.get(e.key("drain", sid)) != "d1" || !e.isMember(e.key("drains"), sid) || !e.isMember(e.key("busy", orch), sid) {
		t.Error("more=true but the drain flag, the drains index or the slot was cleared")
	}

	_, _ = e.s.PopTurn(e.ctx, sid, orch, at)
	more, err = e.s.FinishTurn(e.ctx, sid, orch, t2.ID, "", nil, at.Add(time.Second), "status", TurnError, "error", "boom")
	if err != nil || more {
		t.Fatalf("FinishTurn of the last turn = %v, %v; want false", more, err)
	}
	if tr, _ := e.s.GetTurn(e.ctx, t2.ID); tr.Status != TurnError || tr.Error != "boom" {
		t.Errorf("finished turn = %+v", tr)
	}
	if n, _ := e.s.MessageCount(e.ctx, sid); n != 3 {
		t.Errorf("a nil message appended something: %d messages", n)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, sid); cur != "" {
		t.Errorf("cur = %q after finish", cur)
	}
	if e.exists(e.key("drain", sid)) || e.isMember(e.key("drains"), sid) || e.isMember(e.key("busy", orch), sid) {
		t.Error("no more turns but the drain flag, the drains index or the slot is left")
	}
	if quiet, _ := e.s.SessionQuiet(e.ctx, sid); !quiet {
		t.Error("SessionQuiet = false after the last turn finished")
	}
}

// FinishTurn of a turn that is not the running one leaves cur alone.
func TestFinishTurnOtherThanCurrent(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	t1 := newTurn(sid, "user", "1", base)
	t2 := newTurn(sid, "user", "2", base)
	e.push(t1, "", 4, false, "d")
	e.push(t2, "", 4, false, "d")
	_, _ = e.s.PopTurn(e.ctx, sid, "", base) // t1 runs
	if _, err := e.s.FinishTurn(e.ctx, sid, "", t2.ID, "", nil, base, "status", TurnStopped); err != nil {
		t.Fatal(err)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, sid); cur != t1.ID {
		t.Errorf("cur = %q, want %s (finishing another turn must not clear it)", cur, t1.ID)
	}
}

// A finished turn frees its orchestrator's slot: the fifth session then fits.
func TestFinishTurnReleasesSlot(t *testing.T) {
	e := newEnv(t)
	orch := "o" + NewID(4)
	var first *Turn
	for i := range 4 {
		tr := newTurn(fmt.Sprint("s", i), "agent", "x", base)
		if i == 0 {
			first = tr
		}
		e.push(tr, orch, 4, true, "d")
	}
	if _, err := e.s.PushTurn(e.ctx, newTurn("s4", "agent", "x", base), orch, 4, true, "d"); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("fifth push = %v, want ErrSessionLimit", err)
	}
	_, _ = e.s.PopTurn(e.ctx, "s0", orch, base)
	if more, err := e.s.FinishTurn(e.ctx, "s0", orch, first.ID, "", nil, base, "status", TurnDone); err != nil || more {
		t.Fatalf("FinishTurn = %v, %v", more, err)
	}
	if _, err := e.s.PushTurn(e.ctx, newTurn("s4", "agent", "x", base), orch, 4, true, "d"); err != nil {
		t.Errorf("push after a slot was released = %v", err)
	}
}

// RequeueTurn puts a running turn back at the head, queued, with no cur.
func TestRequeueTurn(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	t1 := newTurn(sid, "user", "1", base)
	t2 := newTurn(sid, "user", "2", base)
	e.push(t1, "", 4, false, "d")
	e.push(t2, "", 4, false, "d")
	_, _ = e.s.PopTurn(e.ctx, sid, "", base.Add(time.Second))
	if err := e.s.RequeueTurn(e.ctx, sid, t1.ID); err != nil {
		t.Fatal(err)
	}
	if got, want := e.queue(sid), ids(t1, t2); !slices.Equal(got, want) {
		t.Errorf("queue = %v, want %v", got, want)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, sid); cur != "" {
		t.Errorf("cur = %q after requeue", cur)
	}
	tr, _ := e.s.GetTurn(e.ctx, t1.ID)
	if tr.Status != TurnQueued || !tr.StartedAt.IsZero() {
		t.Errorf("requeued turn: status %s started %v", tr.Status, tr.StartedAt)
	}
	if e.get(e.key("drain", sid)) != "d" {
		t.Error("requeue cleared the drain flag (the drain's retry must find it)")
	}
	if id, _ := e.s.PopTurn(e.ctx, sid, "", base.Add(2*time.Second)); id != t1.ID {
		t.Errorf("next pop = %q, want the requeued %s", id, t1.ID)
	}
}
