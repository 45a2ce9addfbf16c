package store

import (
	"errors"
	"testing"
	"time"
)

// QueueTurn marks the wait and publishes the session's notification in the
// push's one step; a refused prompt leaves neither.
func TestQueueTurnWaitingAndNotify(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	ps := e.s.SubscribeNotify(e.ctx)
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(e.ctx); err != nil {
		t.Fatal(err)
	}
	tr := newTurn("s1", "agent", "x", base)
	start, err := e.s.QueueTurn(e.ctx, tr, "", 4, true, "d1", time.Minute)
	if err != nil || !start {
		t.Fatalf("QueueTurn: start %v err %v", start, err)
	}
	if w, _ := e.s.Waiting(e.ctx, tr.ID); !w {
		t.Fatal("the caller's wait is not marked")
	}
	if ttl := e.rdb.PTTL(e.ctx, e.key("waiting", tr.ID)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("waiting ttl %v", ttl)
	}
	msg, err := ps.ReceiveMessage(e.ctx)
	if err != nil || msg.Payload != "session:s1" {
		t.Fatalf("notification %v %v", msg, err)
	}
	// No wait: no mark. PushTurn publishes nothing.
	t2 := newTurn("s1", "agent", "y", base)
	if _, err := e.s.QueueTurn(e.ctx, t2, "", 4, true, "d2", 0); err != nil {
		t.Fatal(err)
	}
	if w, _ := e.s.Waiting(e.ctx, t2.ID); w {
		t.Fatal("a wait is marked without one")
	}
	if got := e.queue("s1"); len(got) != 2 || got[0] != tr.ID || got[1] != t2.ID {
		t.Fatalf("queue %v", got)
	}
	// Refused by the 4-at-work cap: nothing marked.
	for i := range 4 {
		sid := "o" + string(rune('a'+i))
		e.createSession(sid, base)
		e.push(newTurn(sid, "agent", "x", base), "orch", 4, true, "d-"+sid)
	}
	e.createSession("o5", base)
	t3 := newTurn("o5", "agent", "x", base)
	if _, err := e.s.QueueTurn(e.ctx, t3, "orch", 4, true, "d3", time.Minute); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("want ErrSessionLimit, got %v", err)
	}
	if w, _ := e.s.Waiting(e.ctx, t3.ID); w {
		t.Fatal("a refused prompt marked a wait")
	}
}

func TestStartDrain(t *testing.T) {
	e := newEnv(t)
	now := base.Add(time.Second)
	// No session: nothing taken.
	d, err := e.s.StartDrain(e.ctx, "nope", "w1", time.Minute, now, 64)
	if err != nil || d.State != DrainNoSession {
		t.Fatalf("no session: %+v %v", d, err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "nope"); h != "" {
		t.Fatal("lease taken for a missing session")
	}
	e.createSession("s1", base)
	// Empty queue: lease taken, nothing popped.
	d, err = e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, now, 64)
	if err != nil || d.State != DrainEmpty || d.Session == nil || d.Session.ID != "s1" {
		t.Fatalf("empty: %+v %v", d, err)
	}
	// Lease held by another.
	d, err = e.s.StartDrain(e.ctx, "s1", "w2", time.Minute, now, 64)
	if err != nil || d.State != DrainLeaseHeld {
		t.Fatalf("held: %+v %v", d, err)
	}
	if err := e.s.ReleaseLease(e.ctx, "s1", "w1"); err != nil {
		t.Fatal(err)
	}
	t1, t2 := newTurn("s1", "agent", "one", base), newTurn("s1", "agent", "two", base)
	e.push(t1, "", 4, true, "d1")
	e.push(t2, "", 4, true, "d1")
	ps := e.s.SubscribeNotify(e.ctx)
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(e.ctx); err != nil {
		t.Fatal(err)
	}
	d, err = e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, now, 64)
	if err != nil || d.State != DrainStarted {
		t.Fatalf("started: %+v %v", d, err)
	}
	if d.Turn.ID != t1.ID || d.Turn.Status != TurnRunning || !d.Turn.StartedAt.Equal(now) || d.Turn.Text != "one" || d.Turn.Caller != "caller" {
		t.Fatalf("turn %+v", d.Turn)
	}
	if d.Watched {
		t.Fatal("watched without subscriptions")
	}
	if len(d.History) != 2 || d.History[0].ID != t1.ID || d.History[1].ID != t2.ID {
		t.Fatalf("history %+v", d.History)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, "s1"); cur != t1.ID {
		t.Fatalf("current %q", cur)
	}
	if got := e.queue("s1"); len(got) != 1 || got[0] != t2.ID {
		t.Fatalf("queue %v", got)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "w1" {
		t.Fatalf("lease %q", h)
	}
	if msg, err := ps.ReceiveMessage(e.ctx); err != nil || msg.Payload != "session:s1" {
		t.Fatalf("notification %v %v", msg, err)
	}
	// A turn left running (its worker died): lease taken, nothing popped.
	if err := e.s.ReleaseLease(e.ctx, "s1", "w1"); err != nil {
		t.Fatal(err)
	}
	d, err = e.s.StartDrain(e.ctx, "s1", "w3", time.Minute, now, 64)
	if err != nil || d.State != DrainCurrent {
		t.Fatalf("current: %+v %v", d, err)
	}
	if got := e.queue("s1"); len(got) != 1 {
		t.Fatalf("queue %v", got)
	}
	// Watched: a subscription names the session.
	if err := e.rdb.SAdd(e.ctx, e.key("subidx", "s2"), "sub_x").Err(); err != nil {
		t.Fatal(err)
	}
	e.createSession("s2", base)
	e.push(newTurn("s2", "agent", "x", base), "", 4, true, "d2")
	d, err = e.s.StartDrain(e.ctx, "s2", "w1", time.Minute, now, 64)
	if err != nil || d.State != DrainStarted || !d.Watched {
		t.Fatalf("watched: %+v %v", d, err)
	}
}

func TestFinishTurnEmit(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	t1, t2 := newTurn("s1", "agent", "one", base), newTurn("s1", "agent", "two", base)
	e.push(t1, "orch", 4, true, "d1")
	e.push(t2, "orch", 4, true, "d1")
	now := base.Add(time.Second)
	if _, err := e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, now, 64); err != nil {
		t.Fatal(err)
	}
	ps := e.s.SubscribeNotify(e.ctx)
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(e.ctx); err != nil {
		t.Fatal(err)
	}
	at := base.Add(2 * time.Second)
	ev := &Event{ID: "ev_1", Kind: "turn_end", Session: "s1", Turn: t1.ID, Status: "done", At: at}
	msg := &Message{ID: "m1", Role: "assistant", Text: "echo", CreatedAt: at}
	// More queued: the lease stays; not watched: both notifications.
	more, watched, released, err := e.s.FinishTurnEmit(e.ctx, "s1", "orch", t1.ID, msg, at, ev, "w1", "status", TurnDone, "reply", "echo")
	if err != nil || !more || watched || released {
		t.Fatalf("more %v watched %v err %v", more, watched, err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "w1" {
		t.Fatalf("lease released with more queued: %q", h)
	}
	got, _ := e.s.GetTurn(e.ctx, t1.ID)
	if got.Status != TurnDone || got.Reply != "echo" {
		t.Fatalf("turn %+v", got)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, "s1"); cur != "" {
		t.Fatalf("current %q", cur)
	}
	if ids := e.messageIDs("s1"); len(ids) != 3 || ids[2] != "m1" {
		t.Fatalf("messages %v", ids)
	}
	if n := e.rdb.XLen(e.ctx, e.key("events")).Val(); n != 1 {
		t.Fatalf("events %d", n)
	}
	for _, want := range []string{"session:s1", "turn:" + t1.ID} {
		if m, err := ps.ReceiveMessage(e.ctx); err != nil || m.Payload != want {
			t.Fatalf("notification %v %v, want %s", m, err, want)
		}
	}
	// The last turn, watched: the lease stays (the drain starts the fan-out
	// under it), no turn:ID.
	if err := e.rdb.SAdd(e.ctx, e.key("subidx", "all"), "sub_x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.PopTurn(e.ctx, "s1", "orch", now); err != nil {
		t.Fatal(err)
	}
	ev2 := &Event{ID: "ev_2", Kind: "turn_end", Session: "s1", Turn: t2.ID, Status: "done", At: at}
	more, watched, released, err = e.s.FinishTurnEmit(e.ctx, "s1", "orch", t2.ID, nil, at, ev2, "w1", "status", TurnDone)
	if err != nil || more || !watched || released {
		t.Fatalf("more %v watched %v released %v err %v", more, watched, released, err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "w1" {
		t.Fatalf("lease released before the fan-out started: %q", h)
	}
	if e.rdb.Exists(e.ctx, e.key("drain", "s1")).Val() != 0 || e.rdb.SIsMember(e.ctx, e.key("busy", "orch"), "s1").Val() {
		t.Fatal("drain flag or busy member left")
	}
	if m, err := ps.ReceiveMessage(e.ctx); err != nil || m.Payload != "session:s1" {
		t.Fatalf("notification %v %v", m, err)
	}
	// Not watched, nothing more queued: the lease is released (its owner's only).
	if err := e.rdb.Del(e.ctx, e.key("subidx", "all")).Err(); err != nil {
		t.Fatal(err)
	}
	e.push(newTurn("s1", "agent", "three", base), "", 4, true, "d3")
	id, _ := e.s.PopTurn(e.ctx, "s1", "", now)
	if _, _, released, err := e.s.FinishTurnEmit(e.ctx, "s1", "", id, nil, at, ev2, "w1", "status", TurnDone); err != nil || !released {
		t.Fatalf("released %v err %v", released, err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "" {
		t.Fatalf("lease kept: %q", h)
	}
	e.push(newTurn("s1", "agent", "four", base), "", 4, true, "d4")
	id, _ = e.s.PopTurn(e.ctx, "s1", "", now)
	if ok, _ := e.s.AcquireLease(e.ctx, "s1", "w2", time.Minute); !ok {
		t.Fatal("lease")
	}
	if _, _, released, err := e.s.FinishTurnEmit(e.ctx, "s1", "", id, nil, at, ev2, "w1", "status", TurnDone); err != nil || released {
		t.Fatalf("released %v err %v", released, err)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "w2" {
		t.Fatalf("another's lease released: %q", h)
	}
}

func TestSeenEndWaiting(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	tr := newTurn("s1", "agent", "x", base)
	e.push(tr, "", 4, true, "d")
	if err := e.s.SetWaiting(e.ctx, tr.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.s.HoldEcho(e.ctx, tr.ID, Batch{Kind: "plain", Sub: "sub_1"}, "w"); err != nil {
		t.Fatal(err)
	}
	held, err := e.s.SeenEndWaiting(e.ctx, tr.ID, true)
	if err != nil || len(held["w"]) != 1 {
		t.Fatalf("held %v err %v", held, err)
	}
	got, _ := e.s.GetTurn(e.ctx, tr.ID)
	if !got.Waited {
		t.Fatal("not marked seen")
	}
	if w, _ := e.s.Waiting(e.ctx, tr.ID); w {
		t.Fatal("still waiting")
	}
	if e.rdb.Exists(e.ctx, e.key("echo", tr.ID)).Val() != 0 {
		t.Fatal("echoes left")
	}
	// Not seen: the wait ends, the turn is not marked.
	t2 := newTurn("s1", "agent", "y", base)
	e.push(t2, "", 4, true, "d")
	if _, err := e.s.SeenEndWaiting(e.ctx, t2.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.GetTurn(e.ctx, t2.ID); got.Waited {
		t.Fatal("marked seen")
	}
}
