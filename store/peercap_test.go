package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// R18.21: a paired relay's conversations count the 4-at-work cap each (as
// sent), and all of them together per peer token (PeerLimit).

// Both caps, one after the other: a conversation's fifth session is refused
// by its own cap; the relay's 17th by the relay's, in whatever case the relay
// spells its name; another relay and this relay's own conversations count
// nothing there.
func TestPeerCapBothCaps(t *testing.T) {
	e := newEnv(t)
	opts := func(orch, drain string) QueueOpts {
		return QueueOpts{Orchestrator: orch, Limit: 4, Enforce: true, PeerLimit: 16, DrainID: drain}
	}
	// One conversation of relay alpha: 4 sessions, the fifth refused by the 4.
	for i := range 4 {
		sid := fmt.Sprint("one", i)
		if _, err := e.s.QueueTurn(e.ctx, newTurn(sid, "agent", "x", base), opts("peer:alpha:one", "d-"+sid)); err != nil {
			t.Fatalf("push %s: %v", sid, err)
		}
	}
	_, err := e.s.QueueTurn(e.ctx, newTurn("one4", "agent", "x", base), opts("peer:alpha:one", "d"))
	if !errors.Is(err, ErrSessionLimit) || errors.Is(err, ErrPeerSessionLimit) {
		t.Fatalf("fifth session of one conversation: %v, want the conversation's cap (ErrSessionLimit alone)", err)
	}
	// Twelve more conversations, one session each (another spelling of the
	// name counts the same): 16 in all.
	for i := range 12 {
		sid, orch := fmt.Sprint("c", i), fmt.Sprint("peer:Alpha:conv", i)
		if _, err := e.s.QueueTurn(e.ctx, newTurn(sid, "agent", "x", base), opts(orch, "d-"+sid)); err != nil {
			t.Fatalf("push %s: %v", sid, err)
		}
	}
	if n := e.scard(e.key("busypeer", "alpha")); n != 16 {
		t.Fatalf("busypeer:alpha has %d, want 16", n)
	}
	// The 17th, from a fresh conversation: refused by the relay's cap, nothing written.
	_, err = e.s.QueueTurn(e.ctx, newTurn("c17", "agent", "x", base), opts("peer:ALPHA:fresh", "d"))
	if !errors.Is(err, ErrPeerSessionLimit) || !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("17th session: %v, want ErrPeerSessionLimit (an ErrSessionLimit)", err)
	}
	if e.exists(e.key("busy", "peer:ALPHA:fresh")) || e.exists(e.key("q", "c17")) || e.exists(e.key("msgs", "c17")) || e.isMember(e.key("busypeer", "alpha"), "c17") {
		t.Error("the refused push left keys")
	}
	if n, _ := e.s.PeerBusyCount(e.ctx, "peer:alpha:whatever"); n != 16 {
		t.Errorf("PeerBusyCount = %d, want 16", n)
	}
	// A prompt to a session already at work just queues.
	if _, err := e.s.QueueTurn(e.ctx, newTurn("c0", "agent", "again", base), opts("peer:alpha:conv0", "d")); err != nil {
		t.Errorf("a prompt to a busy session: %v", err)
	}
	// Not enforced (an event, the owner): it goes in, counted.
	if _, err := e.s.QueueTurn(e.ctx, newTurn("ev", "event", "x", base), QueueOpts{Orchestrator: "peer:alpha:ev", Limit: 4, PeerLimit: 16, DrainID: "d"}); err != nil {
		t.Errorf("an unenforced prompt: %v", err)
	}
	// Another relay, and this relay's own conversations, are not alpha's.
	if _, err := e.s.QueueTurn(e.ctx, newTurn("b0", "agent", "x", base), opts("peer:beta:one", "d")); err != nil {
		t.Errorf("relay beta: %v", err)
	}
	if _, err := e.s.QueueTurn(e.ctx, newTurn("l0", "agent", "x", base), opts("local-conv", "d")); err != nil {
		t.Errorf("a local conversation: %v", err)
	}
	if got := e.keysOf("busypeer:*"); len(got) != 2 {
		t.Errorf("busypeer keys = %v, want alpha's and beta's", got)
	}
	// Without PeerLimit (0) nothing is counted per relay.
	if _, err := e.s.QueueTurn(e.ctx, newTurn("z0", "agent", "x", base), QueueOpts{Orchestrator: "peer:alpha:z", Limit: 4, Enforce: true, DrainID: "d"}); err != nil {
		t.Errorf("PeerLimit 0: %v", err)
	}
}

// Many conversations of one paired relay pushing at once, each naming a new
// origin.session: exactly 16 sessions get in, atomically with the 4 (R18.6).
func TestPeerCapConcurrent(t *testing.T) {
	e := newEnv(t)
	const n, limit = 48, 16
	var mu sync.Mutex
	var in []string
	refused := 0
	var wg sync.WaitGroup
	for i := range n {
		sid := fmt.Sprintf("s%02d", i)
		// Every third one through Reserve (create_session), the others through the push.
		orch := fmt.Sprintf("peer:alpha:conv%02d", i)
		wg.Go(func() {
			var err error
			if i%3 == 0 {
				err = e.s.ReserveUnder(e.ctx, orch, sid, 4, limit)
			} else {
				_, err = e.s.QueueTurn(e.ctx, newTurn(sid, "agent", "x", base), QueueOpts{Orchestrator: orch, Limit: 4, Enforce: true, PeerLimit: limit, DrainID: "d-" + sid})
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				in = append(in, sid)
			case errors.Is(err, ErrPeerSessionLimit):
				refused++
			default:
				t.Errorf("push %s: %v", sid, err)
			}
		})
	}
	wg.Wait()
	if len(in) != limit || refused != n-limit {
		t.Fatalf("%d got in, %d refused; want %d and %d", len(in), refused, limit, n-limit)
	}
	busy, err := e.rdb.SMembers(e.ctx, e.key("busypeer", "alpha")).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(busy)
	slices.Sort(in)
	if !slices.Equal(busy, in) {
		t.Errorf("busypeer:alpha = %v, want the sessions that got in %v", busy, in)
	}
	if got := len(e.keysOf("busy:*")); got != limit {
		t.Errorf("%d conversation semaphores, want %d (a refusal writes none)", got, limit)
	}
}

// Every way a session leaves the semaphore frees its slot in the relay's
// too: the drain finding the queue empty (PopTurn), a turn's end (FinishTurn,
// FinishTurnEmit), Unreserve and DeleteSession.
func TestPeerCapReleased(t *testing.T) {
	e := newEnv(t)
	const limit = 5
	opts := func(orch, drain string) QueueOpts {
		return QueueOpts{Orchestrator: orch, Limit: 4, Enforce: true, PeerLimit: limit, DrainID: drain}
	}
	orch := func(i int) string { return fmt.Sprint("peer:alpha:c", i) }
	for i := range 4 {
		sid := fmt.Sprint("s", i)
		e.createSession(sid, base)
		if _, err := e.s.QueueTurn(e.ctx, newTurn(sid, "agent", "x", base), opts(orch(i), "d-"+sid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.ReserveUnder(e.ctx, orch(4), "s4", 4, limit); err != nil {
		t.Fatal(err)
	}
	full := func(what string) {
		t.Helper()
		_, err := e.s.QueueTurn(e.ctx, newTurn("x", "agent", "x", base), opts("peer:alpha:new", "d"))
		if !errors.Is(err, ErrPeerSessionLimit) {
			t.Fatalf("%s: a sixth session = %v, want ErrPeerSessionLimit", what, err)
		}
	}
	freed := func(what, sid string) {
		t.Helper()
		if e.isMember(e.key("busypeer", "alpha"), sid) {
			t.Fatalf("%s: %s still counts for the relay", what, sid)
		}
		if err := e.s.ReserveUnder(e.ctx, "peer:alpha:again-"+sid, "again-"+sid, 4, limit); err != nil {
			t.Fatalf("%s: the freed slot: %v", what, err)
		}
		full(what + ", taken again")
	}
	full("five at work")
	now := base.Add(time.Second)
	at := base.Add(2 * time.Second)

	// s0: popped, then the drain finds its queue empty.
	if id, _ := e.s.PopTurn(e.ctx, "s0", orch(0), now); id == "" {
		t.Fatal("no turn on s0")
	}
	full("s0 running")
	if id, _ := e.s.PopTurn(e.ctx, "s0", orch(0), now); id != "" {
		t.Fatalf("s0 popped %q", id)
	}
	freed("PopTurn on an empty queue", "s0")

	// s1: FinishTurn of its last turn.
	id, _ := e.s.PopTurn(e.ctx, "s1", orch(1), now)
	if more, err := e.s.FinishTurn(e.ctx, "s1", orch(1), id, "", nil, at, "status", TurnDone); err != nil || more {
		t.Fatalf("FinishTurn: more %v err %v", more, err)
	}
	freed("FinishTurn", "s1")

	// s2: the hot path's end (FinishTurnEmit).
	d, err := e.s.StartDrain(e.ctx, "s2", "w1", time.Minute, now, 0)
	if err != nil || d.State != DrainStarted {
		t.Fatalf("StartDrain: %+v %v", d, err)
	}
	ev := &Event{ID: "ev_1", Kind: "turn_end", Session: "s2", Turn: d.Turn.ID, Status: "done", At: at}
	if more, _, _, _, err := e.s.FinishTurnEmit(e.ctx, "s2", orch(2), d.Turn.ID, "", nil, at, ev, "w1", nil, "status", TurnDone, "ended", ms(at)); err != nil || more {
		t.Fatalf("FinishTurnEmit: more %v err %v", more, err)
	}
	freed("FinishTurnEmit", "s2")

	// s4: a reserved session that was not created after all.
	if err := e.s.Unreserve(e.ctx, orch(4), "s4"); err != nil {
		t.Fatal(err)
	}
	if e.isMember(e.key("busy", orch(4)), "s4") {
		t.Fatal("Unreserve left the conversation's slot")
	}
	freed("Unreserve", "s4")

	// s3: deleted by the owner while at work.
	if err := e.s.DeleteSession(e.ctx, "s3", e.s.BusyKey(orch(3)), e.s.PeerBusyKey(orch(3))); err != nil {
		t.Fatal(err)
	}
	freed("DeleteSession", "s3")
}
