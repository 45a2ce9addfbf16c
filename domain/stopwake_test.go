package domain

import (
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/store"
)

// R7.15, R18.11: the notification hub wakes every waiter when its Redis
// subscription comes back (fireAll, after a lost connection), the turn's
// stop channel too; only a stop asked for stops a turn. Before the fix a
// reconnect stopped every turn this process ran.
func TestRulesHubWakeDoesNotStopTheTurn(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	s := f.session(NewSession{Title: "asker"})
	tid := f.prompt(s, script(map[string]any{"question": map[string]any{"text": "Which DB?", "options": []string{"pg", "mysql"}}},
		map[string]any{"reply": "chose"}))
	done := f.goRun()

	// The turn waits on its question: its stop channel is subscribed.
	var q *store.Question
	r3Eventually(t, 20*time.Second, "the turn asked its question", func() bool {
		tr, err := f.r.Turn(f.ctx, tid)
		if err != nil || tr.Question == "" {
			return false
		}
		if q, err = f.st.GetQuestion(f.ctx, tr.Question); err != nil {
			t.Fatalf("question %s: %v", tr.Question, err)
		}
		return true
	})

	f.r.hub.fireAll() // the subscription came back
	// The turn's keeper took the wake (its stop channel is empty again).
	stopKey := "stop:" + tid
	testwait.Eventually(t, 20*time.Second, time.Millisecond, func() bool {
		f.r.hub.mu.Lock()
		pending := 0
		for ch := range f.r.hub.waiters[stopKey] {
			pending += len(ch)
		}
		n := len(f.r.hub.waiters[stopKey])
		f.r.hub.mu.Unlock()
		if n == 0 {
			t.Fatalf("the turn no longer listens for a stop: it ended on the wake")
		}
		return pending == 0
	}, "the turn's keeper never took the wake")

	if _, err := f.r.AnswerQuestion(f.ctx, s, q.ID, []string{"pg"}, ""); err != nil {
		t.Fatalf("answer: %v", err)
	}
	<-done
	tr, err := f.r.Turn(f.ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != store.TurnDone || tr.Reply != "pgchose" {
		t.Fatalf("turn %s after a hub wake and the answer: %s %q, want done %q (the answer, then the reply)", tid, tr.Status, tr.Reply, "pgchose")
	}
}
