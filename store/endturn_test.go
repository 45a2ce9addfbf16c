package store

import (
	"strings"
	"testing"
	"time"
)

// EndTurn writes the outcome's one field list: status, reply, replyModel,
// error, "ended" at At, and clears partial and question. Without an event it
// appends none and publishes nothing (the caller emits the error's events
// one by one); with one, as FinishTurnEmit.
func TestEndTurnFields(t *testing.T) {
	e := newEnv(t)
	e.createSession("s1", base)
	t1, t2 := newTurn("s1", "agent", "one", base), newTurn("s1", "agent", "two", base)
	e.push(t1, "orch", 4, true, "d1")
	e.push(t2, "orch", 4, true, "d1")
	if _, err := e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, base, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SetTurnPartial(e.ctx, "s1", t1.ID, "w1", "so far", base); err != nil {
		t.Fatal(err)
	}
	ps := e.notifications()
	at := base.Add(time.Second)
	r, err := e.s.EndTurn(e.ctx, &TurnEnd{Session: "s1", Orchestrator: "orch", Turn: t1.ID, Fence: "w1", At: at,
		Msg: &Message{ID: "m1", Role: "event", Text: "The turn ended with an error: boom"}, Status: TurnError, Error: "boom", ReplyModel: "m"})
	if err != nil || !r.More || r.Watched || r.Released {
		t.Fatalf("EndTurn = %+v, %v; want more, not watched, not released", r, err)
	}
	got, _ := e.s.GetTurn(e.ctx, t1.ID)
	if got.Status != TurnError || got.Error != "boom" || got.ReplyModel != "m" || got.Partial != "" || got.Question != "" || !got.EndedAt.Equal(at) {
		t.Fatalf("turn %+v", got)
	}
	if n := e.rdb.XLen(e.ctx, e.key("events")).Val(); n != 0 {
		t.Fatalf("events %d, want none", n)
	}
	// Tried again (its answer lost): nothing a second time, not fenced.
	if r, err := e.s.EndTurn(e.ctx, &TurnEnd{Session: "s1", Orchestrator: "orch", Turn: t1.ID, Fence: "w1", At: at, Status: TurnError, Error: "boom"}); err != nil || !r.More {
		t.Fatalf("EndTurn again = %+v, %v", r, err)
	}
	if ids := e.messageIDs("s1"); len(ids) != 3 {
		t.Fatalf("messages %v, want the two prompts and one end", ids)
	}
	// With an event: its notifications follow.
	if _, err := e.s.PopTurnBy(e.ctx, "s1", "orch", at, "w1"); err != nil {
		t.Fatal(err)
	}
	ev := &Event{ID: "ev_1", Kind: "turn_end", Session: "s1", Turn: t2.ID, Status: "done", At: at}
	r, err = e.s.EndTurn(e.ctx, &TurnEnd{Session: "s1", Orchestrator: "orch", Turn: t2.ID, Fence: "w1", At: at, Status: TurnDone, Reply: "hi",
		Event: ev, ReleaseOwner: "w1"})
	if err != nil || r.More || r.Watched || !r.Released || r.Turn == nil || r.Turn.Reply != "hi" {
		t.Fatalf("EndTurn with an event = %+v, %v", r, err)
	}
	for _, want := range []string{"session:s1", "turn:" + t2.ID} {
		if m, err := ps.ReceiveMessage(e.ctx); err != nil || m.Payload != want {
			t.Fatalf("notification %v %v, want %s", m, err, want)
		}
	}
}

func TestLuaNames(t *testing.T) {
	if got, want := luaNames("KEYS", []string{"queueKey", "turnKey"}), "local queueKey = KEYS[1]\nlocal turnKey = KEYS[2]\n"; got != want {
		t.Fatalf("luaNames = %q, want %q", got, want)
	}
	// Every slot of every named script has a name of its own (an empty one
	// panics at init).
	for _, names := range [][]string{endKeyNames[:], endArgNames[:], pushKeyNames[:], pushArgNames[:], popKeyNames[:], popArgNames[:],
		startDrainKeyNames[:], startDrainArgNames[:], loadCallKeyNames[:], loadCallArgNames[:]} {
		seen := map[string]bool{}
		for _, n := range names {
			if n == "" || seen[n] || strings.ContainsAny(n, " []") {
				t.Errorf("slot name %q in %v: empty, twice or not a Lua name", n, names)
			}
			seen[n] = true
		}
	}
}
