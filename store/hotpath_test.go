package store

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// QueueTurn marks the wait and publishes the session's notification in the
// push's one step; a refused prompt leaves neither.
func TestQueueTurnWaitingAndNotify(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	ps := e.notifications()
	tr := newTurn("s1", "agent", "x", base)
	q, err := e.s.QueueTurn(e.ctx, tr, QueueOpts{Limit: 4, Enforce: true, DrainID: "d1", Waiting: time.Minute})
	if err != nil || !q.Start || q.Drain != nil {
		t.Fatalf("QueueTurn: %+v err %v", q, err)
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
	if _, err := e.s.QueueTurn(e.ctx, t2, QueueOpts{Limit: 4, Enforce: true, DrainID: "d2"}); err != nil {
		t.Fatal(err)
	}
	if w, _ := e.s.Waiting(e.ctx, t2.ID); w {
		t.Fatal("a wait is marked without one")
	}
	if got := e.queue("s1"); len(got) != 2 || got[0] != tr.ID || got[1] != t2.ID {
		t.Fatalf("queue %v", got)
	}
	// Refused by the 4-at-work cap: nothing marked.
	e.fillCap("orch")
	t3 := newTurn("o5", "agent", "x", base)
	if _, err := e.s.QueueTurn(e.ctx, t3, QueueOpts{Orchestrator: "orch", Limit: 4, Enforce: true, DrainID: "d3", Waiting: time.Minute}); !errors.Is(err, ErrSessionLimit) {
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
	ps := e.notifications()
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
	// No history asked for (no provider uses it): none read, not the whole
	// list (LRANGE from -0 would be all of it).
	e.createSession("s3", base)
	e.push(newTurn("s3", "agent", "a", base), "", 4, true, "d3")
	e.push(newTurn("s3", "agent", "b", base), "", 4, true, "d3")
	d, err = e.s.StartDrain(e.ctx, "s3", "w1", time.Minute, now, 0)
	if err != nil || d.State != DrainStarted || d.History != nil {
		t.Fatalf("no history: %+v %v", d, err)
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
	ps := e.notifications()
	at := base.Add(2 * time.Second)
	ev := &Event{ID: "ev_1", Kind: "turn_end", Session: "s1", Turn: t1.ID, Status: "done", At: at}
	msg := &Message{ID: "m1", Role: "assistant", Text: "echo", CreatedAt: at}
	// More queued: the lease stays; not watched: both notifications.
	more, watched, released, ended, err := e.s.FinishTurnEmit(e.ctx, "s1", "orch", t1.ID, "", msg, at, ev, "w1", nil, "status", TurnDone, "reply", "echo")
	if err != nil || !more || watched || released {
		t.Fatalf("more %v watched %v err %v", more, watched, err)
	}
	// The turn as the step left it: what GetTurn reads.
	if want, _ := e.s.GetTurn(e.ctx, t1.ID); ended == nil || !reflect.DeepEqual(ended, want) || ended.Status != TurnDone || ended.Reply != "echo" {
		t.Fatalf("ended turn %+v, want %+v", ended, want)
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
	more, watched, released, _, err = e.s.FinishTurnEmit(e.ctx, "s1", "orch", t2.ID, "", nil, at, ev2, "w1", nil, "status", TurnDone)
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
	if _, _, released, _, err := e.s.FinishTurnEmit(e.ctx, "s1", "", id, "", nil, at, ev2, "w1", nil, "status", TurnDone); err != nil || !released {
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
	if _, _, released, _, err := e.s.FinishTurnEmit(e.ctx, "s1", "", id, "", nil, at, ev2, "w1", nil, "status", TurnDone); err != nil || released {
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

// rtHook counts a client's round trips (a pipeline is one).
type rtHook struct{ n int }

func (h *rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n++; return next(ctx, cmd) }
}
func (h *rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n++; return next(ctx, cmds) }
}

// ResolveSession finds what ResolveSessionID and GetSession found, a whole
// id in one round trip.
func TestResolveSession(t *testing.T) {
	e := newEnv(t)
	a, b := "abcdef01"+NewID(12), "abcdef01"+NewID(12) // share their first 8 characters
	e.createSession(a, base)
	e.createSession(b, base)
	e.createSession("short-id", base)
	h := &rtHook{}
	e.rdb.AddHook(h)

	s, n, err := e.s.ResolveSession(e.ctx, a)
	if err != nil || n != 1 || s == nil || s.ID != a || s.Title != "t "+a {
		t.Fatalf("whole id: %+v %d %v", s, n, err)
	}
	if h.n != 1 {
		t.Fatalf("a whole id took %d round trips, want 1", h.n)
	}
	if s, n, err := e.s.ResolveSession(e.ctx, a[:12]); err != nil || n != 1 || s == nil || s.ID != a {
		t.Fatalf("prefix: %+v %d %v", s, n, err)
	}
	if s, n, err := e.s.ResolveSession(e.ctx, a[:8]); err != nil || n != 2 || s != nil {
		t.Fatalf("ambiguous prefix: %+v %d %v", s, n, err)
	}
	if s, n, err := e.s.ResolveSession(e.ctx, "short-id"); err != nil || n != 1 || s == nil || s.ID != "short-id" {
		t.Fatalf("an id of another shape: %+v %d %v", s, n, err)
	}
	if s, n, err := e.s.ResolveSession(e.ctx, NewID(16)); err != nil || n != 0 || s != nil {
		t.Fatalf("unknown whole id: %+v %d %v", s, n, err)
	}
	// Listed but its record gone: not found, as GetSession says.
	if err := e.rdb.Del(e.ctx, e.key("sess", b)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.s.ResolveSession(e.ctx, b); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record gone: %v", err)
	}
	if _, _, err := e.s.ResolveSession(e.ctx, b[:12]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record gone, by prefix: %v", err)
	}
}

// A done turn's usage is counted with its outcome: tokens, cost, the end of
// a pause; without usage the provider's counters are not touched.
func TestFinishTurnEmitUsage(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	if err := e.s.SetUsagePaused(e.ctx, "prov", "rate limit", base); err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Second)
	for i, u := range []*UsageAdd{
		{Provider: "prov", InputTokens: 10, OutputTokens: 3, CostMicroUSD: 250, ClearPause: false},
		nil,
		{Provider: "prov", InputTokens: 5, OutputTokens: 2, ClearPause: true},
	} {
		tr := newTurn("s1", "agent", "x", base)
		e.push(tr, "", 4, true, "d")
		if _, err := e.s.PopTurn(e.ctx, "s1", "", at); err != nil {
			t.Fatal(err)
		}
		ev := &Event{ID: "ev_" + NewID(4), Kind: "turn_end", Session: "s1", Turn: tr.ID, Status: "done", At: at}
		if _, _, _, _, err := e.s.FinishTurnEmit(e.ctx, "s1", "", tr.ID, "", nil, at, ev, "", u, "status", TurnDone); err != nil {
			t.Fatal(err)
		}
		got, _ := e.s.GetTurn(e.ctx, tr.ID)
		if got.Status != TurnDone {
			t.Fatalf("turn %d: %+v", i, got)
		}
		reason, _, _ := e.s.UsagePaused(e.ctx, "prov")
		if wantPaused := i < 2; (reason != "") != wantPaused {
			t.Fatalf("after turn %d: paused %q", i, reason)
		}
	}
	m, err := e.s.Usage(e.ctx, "prov")
	if err != nil {
		t.Fatal(err)
	}
	if m["turns"] != 2 || m["inputTokens"] != 15 || m["outputTokens"] != 5 {
		t.Fatalf("usage %v", m)
	}
	if c := e.rdb.HGet(e.ctx, e.key("usage", "prov"), "costMicroUSD").Val(); c != "250" {
		t.Fatalf("cost %q", c)
	}
}

// A finish step tried again after its answer was lost changes nothing a
// second time: one reply message, one event, the usage counted once.
func TestFinishTurnEmitTwice(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	tr := newTurn("s1", "agent", "x", base)
	e.push(tr, "", 4, true, "d")
	if _, err := e.s.PopTurn(e.ctx, "s1", "", base); err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Second)
	msg := &Message{ID: "m1", Role: "assistant", Text: "echo", CreatedAt: at}
	ev := &Event{ID: "ev_1", Kind: "turn_end", Session: "s1", Turn: tr.ID, Status: "done", At: at}
	u := &UsageAdd{Provider: "prov", InputTokens: 10, OutputTokens: 2}
	for i := range 2 {
		_, _, _, ended, err := e.s.FinishTurnEmit(e.ctx, "s1", "", tr.ID, "", msg, at, ev, "", u,
			"status", TurnDone, "reply", "echo", "ended", at.UnixMilli())
		if err != nil || ended == nil || ended.Status != TurnDone || ended.Reply != "echo" {
			t.Fatalf("try %d: %+v %v", i, ended, err)
		}
	}
	if ids := e.messageIDs("s1"); len(ids) != 2 || ids[1] != "m1" {
		t.Fatalf("messages %v, want the prompt and one reply", ids)
	}
	if n := e.rdb.XLen(e.ctx, e.key("events")).Val(); n != 1 {
		t.Fatalf("events %d, want 1", n)
	}
	if m, _ := e.s.Usage(e.ctx, "prov"); m["turns"] != 1 || m["inputTokens"] != 10 {
		t.Fatalf("usage %v, counted once", m)
	}
}

// QueueTurn counts the caller's prompt toward loop protection in its one step
// (R5.2.6): a used-up count, or the 4-at-work cap (R6.1), writes nothing and
// counts nothing.
func TestQueueTurnLoopCount(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	loop := QueueOpts{Limit: 4, Enforce: true, DrainID: "d1", LoopOf: "caller", LoopLimit: 2}
	for i := range 2 {
		if _, err := e.s.QueueTurn(e.ctx, newTurn("s1", "agent", "x", base), loop); err != nil {
			t.Fatalf("prompt %d: %v", i+1, err)
		}
	}
	if got := e.get(e.key("loop", "caller")); got != "2" {
		t.Fatalf("loop count %q, want 2", got)
	}
	before := e.keysOf(e.key("*"))
	refused := newTurn("s1", "agent", "third", base)
	_, err := e.s.QueueTurn(e.ctx, refused, loop)
	var used *LoopUsedError
	if !errors.As(err, &used) || used.Count != 2 {
		t.Fatalf("third prompt: %v, want a LoopUsedError of 2", err)
	}
	if after := e.keysOf(e.key("*")); len(after) != len(before) || e.exists(e.key("turn", refused.ID)) {
		t.Fatalf("a refused prompt wrote keys: %v → %v", before, after)
	}
	if got := e.queue("s1"); len(got) != 2 || slices.Contains(got, refused.ID) {
		t.Fatalf("queue %v", got)
	}
	if ids := e.messageIDs("s1"); slices.Contains(ids, refused.ID) {
		t.Fatalf("messages %v", ids)
	}
	// Refused by the cap: the loop count stays.
	e.fillCap("orch")
	capped := QueueOpts{Orchestrator: "orch", Limit: 4, Enforce: true, DrainID: "d5", LoopOf: "other", LoopLimit: 30}
	if _, err := e.s.QueueTurn(e.ctx, newTurn("o5", "agent", "x", base), capped); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("want ErrSessionLimit, got %v", err)
	}
	if e.exists(e.key("loop", "other")) {
		t.Fatal("a prompt refused by the cap was counted")
	}
}

// QueueTurn with a lease owner takes the drain's first step (StartDrain) when
// its prompt starts the drain, and only then.
func TestQueueTurnStartsTheDrain(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	ps := e.notifications()
	start := QueueOpts{Limit: 4, DrainID: "d1", StartOwner: "w1:x", LeaseTTL: time.Minute, History: 8}
	t1 := newTurn("s1", "agent", "one", base)
	q, err := e.s.QueueTurn(e.ctx, t1, start)
	if err != nil || !q.Start || q.Drain == nil || q.Drain.State != DrainStarted {
		t.Fatalf("first prompt: %+v %v", q, err)
	}
	// The console is told once (queued and started in one step).
	if err := e.s.Notify(e.ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"session:s1", "marker"} {
		if msg, err := ps.ReceiveMessage(e.ctx); err != nil || msg.Payload != want {
			t.Fatalf("notification %v %v, want %s", msg, err, want)
		}
	}
	d := q.Drain
	if d.Turn.ID != t1.ID || d.Turn.Status != TurnRunning || d.Turn.Drainer != "w1:x" || !d.Turn.StartedAt.Equal(t1.CreatedAt) || d.Session.ID != "s1" {
		t.Fatalf("turn %+v session %+v", d.Turn, d.Session)
	}
	if len(d.History) != 1 || d.History[0].ID != t1.ID {
		t.Fatalf("history %+v", d.History)
	}
	if cur, _ := e.s.CurrentTurn(e.ctx, "s1"); cur != t1.ID {
		t.Fatalf("current %q", cur)
	}
	if h, _ := e.s.LeaseHolder(e.ctx, "s1"); h != "w1:x" {
		t.Fatalf("lease %q", h)
	}
	if got := e.get(e.key("drain", "s1")); got != "d1" {
		t.Fatalf("drain flag %q", got)
	}
	// The drain runs: the next prompt queues behind it and starts nothing.
	t2 := newTurn("s1", "agent", "two", base)
	q, err = e.s.QueueTurn(e.ctx, t2, QueueOpts{Limit: 4, DrainID: "d2", StartOwner: "w1:y", LeaseTTL: time.Minute})
	if err != nil || q.Start || q.Drain != nil {
		t.Fatalf("second prompt: %+v %v", q, err)
	}
	if got := e.queue("s1"); len(got) != 1 || got[0] != t2.ID {
		t.Fatalf("queue %v", got)
	}
	// The flag is clear but another drain still holds the lease: the flag is
	// set, nothing is popped, the caller hands the drain to the queue.
	e.createSession("s2", base)
	if err := e.rdb.Set(e.ctx, e.key("lease", "s2"), "other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t3 := newTurn("s2", "agent", "three", base)
	q, err = e.s.QueueTurn(e.ctx, t3, QueueOpts{Limit: 4, DrainID: "d3", StartOwner: "w1:z", LeaseTTL: time.Minute})
	if err != nil || !q.Start || q.Drain == nil || q.Drain.State != DrainLeaseHeld {
		t.Fatalf("lease held: %+v %v", q, err)
	}
	if got := e.queue("s2"); len(got) != 1 || got[0] != t3.ID {
		t.Fatalf("queue %v", got)
	}
	if _, err := e.s.QueueTurn(e.ctx, newTurn("s2", "agent", "x", base), QueueOpts{DrainID: "d4", StartOwner: "w1:z"}); err == nil {
		t.Fatal("a start without a lease ttl was accepted")
	}
}

// QueueTurn unlocks, in its one step, the pairing of the relay whose agent
// sent the prompt (by the name it gives itself or the local one; R4.4 b); an
// owner's mention stays one, and a refused prompt unlocks nothing.
func TestQueueTurnUnlocksTheSendersRelay(t *testing.T) {
	e := newEnv(t)
	for _, p := range []*Pairing{
		{Name: "bravo", RemoteName: "Build-Box", URL: "http://127.0.0.1:1"},
		{Name: "charlie", URL: "http://127.0.0.1:2"},
		{Name: "delta", URL: "http://127.0.0.1:3"},
	} {
		if err := e.s.AddPairing(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	e.createSession("s1", base)
	if err := e.s.Unlock(e.ctx, "s1", true, "charlie"); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"BUILD-BOX", "Charlie", "nobody"} {
		if _, err := e.s.QueueTurn(e.ctx, newTurn("s1", "agent", "x", base), QueueOpts{Limit: 4, DrainID: "d1", UnlockFrom: from}); err != nil {
			t.Fatalf("from %s: %v", from, err)
		}
	}
	un, _, err := e.s.UnlockState(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"bravo": "agent", "charlie": "owner"}; !reflect.DeepEqual(un, want) {
		t.Fatalf("unlocked %v, want %v", un, want)
	}
	// Refused by the cap: delta stays locked.
	e.fillCap("orch")
	if _, err := e.s.QueueTurn(e.ctx, newTurn("o5", "agent", "x", base), QueueOpts{Orchestrator: "orch", Limit: 4, Enforce: true, DrainID: "d5", UnlockFrom: "delta"}); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("want ErrSessionLimit, got %v", err)
	}
	if un, _, _ := e.s.UnlockState(e.ctx, "o5"); un["delta"] != "" {
		t.Fatal("a refused prompt unlocked its relay")
	}
}

// fillCap makes four sessions busy for orchestrator (the 4-at-work cap, R6.1)
// and creates a fifth, "o5", that it started.
func (e *testEnv) fillCap(orchestrator string) {
	e.t.Helper()
	for i := range 4 {
		sid := "o" + string(rune('a'+i))
		e.createSession(sid, base)
		e.push(newTurn(sid, "agent", "x", base), orchestrator, 4, true, "d-"+sid)
	}
	e.createSession("o5", base)
}

// notifications subscribes to the notification channel, confirmed, until the test ends.
func (e *testEnv) notifications() *redis.PubSub {
	e.t.Helper()
	ps := e.s.SubscribeNotify(e.ctx)
	e.t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	return ps
}

// A push that is run again (its answer was lost and go-redis retried it)
// writes nothing twice and says who took the turn.
func TestQueueTurnRunAgain(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	tr := newTurn("s1", "agent", "x", base)
	o := QueueOpts{Limit: 4, DrainID: "d1", StartOwner: "w1:x", LeaseTTL: time.Minute, LoopOf: "caller", LoopLimit: 30}
	if q, err := e.s.QueueTurn(e.ctx, tr, o); err != nil || q.Drain == nil || q.Drain.State != DrainStarted {
		t.Fatalf("first run: %+v %v", q, err)
	}
	q, err := e.s.QueueTurn(e.ctx, tr, o)
	if err != nil || !q.Again || q.Drainer != "w1:x" || q.Start || q.Drain != nil {
		t.Fatalf("second run: %+v %v", q, err)
	}
	if got := e.queue("s1"); len(got) != 0 {
		t.Fatalf("queue %v: the turn was queued again", got)
	}
	if ids := e.messageIDs("s1"); len(ids) != 1 {
		t.Fatalf("messages %v", ids)
	}
	if got := e.get(e.key("loop", "caller")); got != "1" {
		t.Fatalf("loop count %q, want 1", got)
	}
	// Not taken by any drain: no drainer.
	t2 := newTurn("s1", "agent", "y", base)
	if _, err := e.s.QueueTurn(e.ctx, t2, QueueOpts{Limit: 4, DrainID: "d2"}); err != nil {
		t.Fatal(err)
	}
	if q, err := e.s.QueueTurn(e.ctx, t2, QueueOpts{Limit: 4, DrainID: "d2"}); err != nil || !q.Again || q.Drainer != "" {
		t.Fatalf("queued turn run again: %+v %v", q, err)
	}
	if got := e.queue("s1"); len(got) != 1 || got[0] != t2.ID {
		t.Fatalf("queue %v", got)
	}
}

// LoadCall reads the caller's running turn whether or not the process
// guessed it (a wrong or missing guess costs a read, never a wrong answer),
// and its script touches only its KEYS (R21.2).
func TestLoadCallRunningTurn(t *testing.T) {
	e := newEnv(t)
	now := base.Add(time.Second)
	e.createSession("c1", base)
	c, err := e.s.LoadCall(e.ctx, "c1", "")
	if err != nil || c.Caller == nil || c.Current != "" || c.Turn != nil {
		t.Fatalf("idle caller: %+v %v", c, err)
	}
	t1 := newTurn("c1", "user", "one", base)
	if _, err := e.s.PushTurn(e.ctx, t1, "", 4, false, "d1"); err != nil {
		t.Fatal(err)
	}
	if d, err := e.s.StartDrain(e.ctx, "c1", "w1", time.Minute, now, 0); err != nil || d.State != DrainStarted || d.Turn.ID != t1.ID {
		t.Fatalf("start: %+v %v", d, err)
	}
	for i := range 2 { // no guess yet, then the right guess
		c, err = e.s.LoadCall(e.ctx, "c1", "")
		if err != nil || c.Current != t1.ID || c.Turn == nil || c.Turn.Text != "one" || c.Turn.Status != TurnRunning {
			t.Fatalf("call %d: %+v %v", i, c, err)
		}
	}
	e.s.curHint.Store("c1", "stale") // a wrong guess
	c, err = e.s.LoadCall(e.ctx, "c1", "")
	if err != nil || c.Current != t1.ID || c.Turn == nil || c.Turn.Text != "one" {
		t.Fatalf("wrong guess: %+v %v", c, err)
	}
}

// StartDrain and PopTurn name the turn they expect at the queue's head; with
// another there (or none guessed) they are told its id and ask again.
func TestDrainOtherHead(t *testing.T) {
	e := newEnv(t)
	now := base.Add(time.Second)
	e.createSession("s1", base)
	t1, t2 := newTurn("s1", "user", "one", base), newTurn("s1", "user", "two", base.Add(time.Millisecond))
	for _, tr := range []*Turn{t1, t2} {
		if _, err := e.s.PushTurn(e.ctx, tr, "", 4, false, "d1"); err != nil {
			t.Fatal(err)
		}
	}
	e.s.headHint.Store("s1", t2.ID) // wrong: t1 is at the head
	d, err := e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, now, 0)
	if err != nil || d.State != DrainStarted || d.Turn.ID != t1.ID || d.Turn.Status != TurnRunning {
		t.Fatalf("start: %+v %v", d, err)
	}
	if err := e.rdb.Del(e.ctx, e.key("cur", "s1")).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := e.s.PopTurn(e.ctx, "s1", "", now)
	if err != nil || id != t2.ID {
		t.Fatalf("pop: %q %v", id, err)
	}
	if st := e.rdb.HGet(e.ctx, e.key("turn", t2.ID), "status").Val(); st != string(TurnRunning) {
		t.Fatalf("popped turn status %q", st)
	}
	if id, err := e.s.PopTurn(e.ctx, "s1", "", now); err != nil || id != "" {
		t.Fatalf("empty pop: %q %v", id, err)
	}
}

// R8.18: the no-echo decision is one step against the wait's end: a turn_end
// for its waiting caller is held, one whose reply the caller received is
// dropped, and one nobody waits for (or whose reply did not reach the caller)
// is delivered.
func TestHoldEchoIfWaiting(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	tr := newTurn("s1", "agent", "x", base)
	e.push(tr, "", 4, true, "d")
	g := Batch{Kind: "plain", Sub: "sub_1"}
	if got, err := e.s.HoldEchoIfWaiting(e.ctx, tr.ID, g, "w"); err != nil || got != EchoDeliver {
		t.Fatalf("nobody waits: %q %v, want deliver", got, err)
	}
	if err := e.s.SetWaiting(e.ctx, tr.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.HoldEchoIfWaiting(e.ctx, tr.ID, g, "w"); err != nil || got != EchoHeld {
		t.Fatalf("the caller waits: %q %v, want held", got, err)
	}
	held, err := e.s.SeenEndWaiting(e.ctx, tr.ID, true)
	if err != nil || len(held["w"]) != 1 {
		t.Fatalf("held %v err %v", held, err)
	}
	if got, err := e.s.HoldEchoIfWaiting(e.ctx, tr.ID, g, "w"); err != nil || got != EchoSeen {
		t.Fatalf("the reply was received: %q %v, want seen", got, err)
	}
	t2 := newTurn("s1", "agent", "y", base)
	e.push(t2, "", 4, true, "d")
	if err := e.s.SetWaiting(e.ctx, t2.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SeenEndWaiting(e.ctx, t2.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.HoldEchoIfWaiting(e.ctx, t2.ID, g, "w"); err != nil || got != EchoDeliver {
		t.Fatalf("the reply did not reach the caller: %q %v, want deliver", got, err)
	}
}
