package domain

import (
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

// TestRulesDrainResumesATurnWhosePopWasLost (R18.11), moved down from
// relaytest/resume_test.go (issue 24 step 3): a drain whose first step ran
// in Redis but whose answer was lost (Redis stopped as it answered) finds
// its own turn "running" without a lease. The process that took it knows
// its agent never started and runs it; a turn another process took and
// left running is abandoned as before.
func TestRulesDrainResumesATurnWhosePopWasLost(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx, st, rl := f.ctx, f.st, f.r

	lostPop := func(title, owner string) (sid, tid string) {
		sid = f.session(NewSession{Title: title})
		// Queued as a prompt is, but with no drain task: only this test drains it.
		tr := &store.Turn{ID: store.NewID(16), Session: sid, Role: "user", Text: script(map[string]any{"reply": title + " done"}), CreatedAt: f.clk.Now()}
		if _, err := st.QueueTurn(ctx, tr, store.QueueOpts{Limit: 4, DrainID: "drain:" + sid + ":test"}); err != nil {
			t.Fatal(err)
		}
		// The drain's first step runs in Redis; its answer never arrives.
		d, err := st.StartDrain(ctx, sid, owner, time.Minute, f.clk.Now(), 0)
		if err != nil || d.State != store.DrainStarted || d.Turn.ID != tr.ID {
			t.Fatalf("start drain: %+v %v", d, err)
		}
		// The lease runs out (the drain that held it is gone).
		if err := st.ReleaseLease(ctx, sid, owner); err != nil {
			t.Fatal(err)
		}
		return sid, tr.ID
	}

	// Taken by this process: run now, once.
	sid, tid := lostPop("mine", rl.WorkerID()+":lost")
	if err := rl.Drain(ctx, sid); err != nil {
		t.Fatalf("drain: %v", err)
	}
	f.run()
	got := f.r2Turn(tid)
	if got.Status != store.TurnDone || got.Reply != "mine done" {
		t.Fatalf("the turn whose pop was lost ended %s %q (error %q), want done", got.Status, got.Reply, got.Error)
	}

	// Taken by another process that is gone: abandoned, not run.
	sid, tid = lostPop("theirs", "otherworker:x")
	if err := rl.Drain(ctx, sid); err != nil {
		t.Fatalf("drain: %v", err)
	}
	f.run()
	got = f.r2Turn(tid)
	if got.Status != store.TurnError || !strings.Contains(got.Error, "worker running this turn stopped") {
		t.Fatalf("another process's turn ended %s %q, want the abandoned error", got.Status, got.Error)
	}
}
