package domain

// Fixture helpers of the action rule suites (actions_rules_test.go): a
// worker that runs each job as soon as it is enqueued (a tool call that
// waits for a reply, or a card asked inside a turn, needs the drains to run
// while the test's call blocks), and waits on the relay's notifications
// instead of sleeping.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// actUntilMax bounds a wait for something the relay does on its own (a
// card asked, a turn running); reaching it fails the test.
const actUntilMax = 30 * time.Second

// actRetryAfter is when actAuto's worker runs again a drain that found its
// session's lease held (asynq retries it after a second). No rule depends
// on it: the drain only waits for the one before it to end.
const actRetryAfter = 20 * time.Millisecond

// actAuto makes f's relay run every job due at the clock's now as soon as it
// is enqueued, each in a goroutine of its own (as a worker's concurrent
// tasks: a drain blocked on a card or a reply does not hold up the others).
// The jobs end with the test.
func actAuto(f *fixture) {
	f.t.Helper()
	e := f.enq
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	runJob := func(j job) {
		defer wg.Done()
		var err error
		if j.typ == "drain" {
			err = f.r.Drain(ctx, j.session)
		} else {
			err = f.r.RunJob(ctx, j.typ, j.payload)
		}
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, ErrRetryLater):
			// The session's lease is still held (its last drain is ending):
			// like asynq, run the drain again a little later.
			retry := time.NewTimer(actRetryAfter)
			defer retry.Stop()
			select {
			case <-ctx.Done():
			case <-retry.C:
				_ = e.add(j)
			}
		default:
			f.t.Errorf("job %s %s: %v", j.typ, j.session, err)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for {
				j, ok := f.enq.next(true, time.Time{})
				if !ok {
					j, ok = f.enq.next(false, f.clk.Now())
				}
				if !ok {
					break
				}
				wg.Add(1)
				go runJob(j)
			}
			select {
			case <-ctx.Done():
				return
			case <-e.added:
			}
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// actUntil waits until cond holds, checking it again at each of the relay's
// notifications (a turn started or ended, a card asked, a question raised).
func (f *fixture) actUntil(what string, cond func() bool) {
	f.t.Helper()
	ps := f.st.SubscribeNotify(f.ctx)
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(f.ctx); err != nil {
		f.t.Fatalf("subscribe to notifications: %v", err)
	}
	ch := ps.Channel()
	deadline := time.NewTimer(actUntilMax)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-ch:
		case <-deadline.C:
			f.t.Fatalf("%s: not within %s", what, actUntilMax)
		}
	}
}

// actCard waits for a pending card of session sid and returns it.
func (f *fixture) actCard(sid string) *store.Card {
	f.t.Helper()
	var card *store.Card
	f.actUntil("a card of "+sid, func() bool {
		cards, err := f.st.PendingCards(f.ctx)
		if err != nil {
			f.t.Fatalf("pending cards: %v", err)
		}
		for _, c := range cards {
			if c.Session == sid {
				card = c
				return true
			}
		}
		return false
	})
	return card
}

// actCards is the pending cards of session sid.
func (f *fixture) actCards(sid string) []*store.Card {
	f.t.Helper()
	cards, err := f.st.PendingCards(f.ctx)
	if err != nil {
		f.t.Fatalf("pending cards: %v", err)
	}
	var out []*store.Card
	for _, c := range cards {
		if c.Session == sid {
			out = append(out, c)
		}
	}
	return out
}

// actDecide waits for sid's next card, checks its action and target
// ("" none), decides it and returns it.
func (f *fixture) actDecide(sid, action, target, decision string) *store.Card {
	f.t.Helper()
	c := f.actCard(sid)
	got := ""
	if c.Target != nil {
		got = *c.Target
	}
	if c.Action != action || got != target {
		f.t.Fatalf("card %s on %q, want %s on %q: %+v", c.Action, got, action, target, c)
	}
	if _, err := f.r.DecideCard(f.ctx, c.ID, decision); err != nil {
		f.t.Fatalf("decide %s: %v", c.ID, err)
	}
	return c
}

// actTurn waits until turn id ended, or ran into one of the statuses given.
func (f *fixture) actTurn(id string, statuses ...store.TurnStatus) *store.Turn {
	f.t.Helper()
	var tr *store.Turn
	f.actUntil("turn "+id, func() bool {
		var err error
		if tr, err = f.r.Turn(f.ctx, id); err != nil {
			f.t.Fatalf("turn %s: %v", id, err)
		}
		for _, s := range statuses {
			if tr.Status == s {
				return true
			}
		}
		return len(statuses) == 0 && tr.Status.Ended()
	})
	return tr
}

// actInTurn runs tool as one scripted step of a turn of sid (relay "this"
// unless given); with a decision it waits for the card and decides it. It
// returns the tool's envelope and the card (nil without a decision).
func (f *fixture) actInTurn(sid string, tool map[string]any, decision string) (map[string]any, *store.Card) {
	f.t.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	mid := f.prompt(sid, script(map[string]any{"tool": tool}))
	var card *store.Card
	if decision != "" {
		card = f.actCard(sid)
		if _, err := f.r.DecideCard(f.ctx, card.ID, decision); err != nil {
			f.t.Fatalf("decide %s: %v", card.ID, err)
		}
	}
	f.actTurn(mid)
	res := f.toolResults(mid)
	if len(res) != 1 {
		f.t.Fatalf("turn of %s: %d tool results, want 1", sid, len(res))
	}
	return res[0], card
}

// actHas reports the fragments s lacks.
func actHas(t testing.TB, what string, s any, frags ...string) {
	t.Helper()
	txt, ok := s.(string)
	if !ok {
		t.Errorf("%s: want a string, got %T %v", what, s, s)
		return
	}
	for _, fr := range frags {
		if !strings.Contains(txt, fr) {
			t.Errorf("%s = %q, want it to contain %q", what, txt, fr)
		}
	}
}

// actNoKey reports keys m has.
func actNoKey(t testing.TB, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := m[k]; ok {
			t.Errorf("%s: unexpected %q = %v", what, k, v)
		}
	}
}

// actFail calls and wants the code.
func (f *fixture) actFail(caller string, args map[string]any, code string) map[string]any {
	f.t.Helper()
	env := f.call(caller, args)
	if env["ok"] != false || env["code"] != code {
		f.t.Fatalf("%v: want %s, got %v", args, code, env)
	}
	return env
}

// actChildren is the ids of the sessions an agent of conversation orch started.
func (f *fixture) actChildren(orch string) []string {
	f.t.Helper()
	items, _, err := f.r.SessionList(f.ctx, "all", 1000)
	if err != nil {
		f.t.Fatalf("sessions: %v", err)
	}
	var ids []string
	for _, s := range items {
		if s.StartedBy != nil && s.StartedBy.Session == orch {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// actTotal is the number of sessions of a scope.
func (f *fixture) actTotal(scope string) int {
	f.t.Helper()
	_, n, err := f.r.SessionList(f.ctx, scope, 1000)
	if err != nil {
		f.t.Fatalf("sessions: %v", err)
	}
	return n
}

// actTool is a scripted step calling relay_tool with args.
func actTool(args map[string]any) map[string]any { return map[string]any{"tool": args} }

// actStored reads a session record from the store.
func (f *fixture) actStored(sid string) *store.Session {
	f.t.Helper()
	s, err := f.st.GetSession(f.ctx, sid)
	if err != nil {
		f.t.Fatalf("session %s: %v", sid, err)
	}
	return s
}

// actResults waits for turn id to end done and returns its tool results (want of them).
func (f *fixture) actResults(id string, want int) []map[string]any {
	f.t.Helper()
	f.actTurn(id)
	res := f.toolResults(id)
	if len(res) != want {
		f.t.Fatalf("turn %s: %d tool results, want %d", id, len(res), want)
	}
	return res
}

// actQuestion waits for a pending question of session sid and returns it.
func (f *fixture) actQuestion(sid string) *store.Question {
	f.t.Helper()
	var q *store.Question
	f.actUntil("a question in "+sid, func() bool {
		qs, err := f.r.QuestionCards(f.ctx, sid)
		if err != nil {
			f.t.Fatalf("questions of %s: %v", sid, err)
		}
		if len(qs) == 1 {
			q = qs[0]
			return true
		}
		return false
	})
	return q
}

// actWith is base with extra's keys set (nil values too).
func actWith(base, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// actGroup is the owner's group id, nil when there is none.
func (f *fixture) actGroup(id string) *relay.Group {
	f.t.Helper()
	gs, err := f.r.Groups(f.ctx)
	if err != nil {
		f.t.Fatalf("groups: %v", err)
	}
	for _, g := range gs {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// actNewGroup makes an owner's group and returns its id.
func (f *fixture) actNewGroup(name string) string {
	f.t.Helper()
	g, err := f.r.CreateGroup(f.ctx, name)
	if err != nil {
		f.t.Fatalf("create group %q: %v", name, err)
	}
	return g.ID
}

// actSettings is an envelope's settings object.
func actSettings(env map[string]any) map[string]any {
	m, _ := env["settings"].(map[string]any)
	return m
}

// actMetrics counts the cards the relay reports, by decision ("asked" when shown).
type actMetrics struct {
	mu      sync.Mutex
	cards   map[string]int
	started []time.Time   // the wall time of each TurnStarted (the turn's max_turn_seconds clock started just before, R18.13)
	came    chan struct{} // a TurnStarted came
}

func (m *actMetrics) ToolCall(string, string, time.Duration)     {}
func (m *actMetrics) TurnFinished(string, string, time.Duration) {}
func (m *actMetrics) Event(string)                               {}
func (m *actMetrics) Delivery(string)                            {}
func (m *actMetrics) NotifyFailed()                              {}
func (m *actMetrics) CardDecided(decision string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cards[decision]++
}

func (m *actMetrics) TurnStarted(string) {
	m.mu.Lock()
	m.started = append(m.started, time.Now())
	m.mu.Unlock()
	select {
	case m.came <- struct{}{}:
	default:
	}
}

func (m *actMetrics) card(decision string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cards[decision]
}

// turnStarted waits for the n-th TurnStarted (1-based) and returns its wall time.
func (m *actMetrics) turnStarted(f *fixture, n int) time.Time {
	f.t.Helper()
	deadline := time.NewTimer(actUntilMax)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		if len(m.started) >= n {
			at := m.started[n-1]
			m.mu.Unlock()
			return at
		}
		m.mu.Unlock()
		select {
		case <-m.came:
		case <-deadline.C:
			f.t.Fatalf("turn start %d: not within %s", n, actUntilMax)
		}
	}
}

// newActMetrics is a fixtureOptions.metrics that counts cards and keeps when
// each turn's agent started.
func newActMetrics() *actMetrics {
	return &actMetrics{cards: map[string]int{}, came: make(chan struct{}, 16)}
}

// actRaw runs one relay_tool call of raw JSON arguments (their key order as
// written) and returns the envelope and whether it is an error.
func (f *fixture) actRaw(caller, raw string) (map[string]any, bool) {
	f.t.Helper()
	out, isErr := f.r.CallTool(f.ctx, caller, json.RawMessage(raw), nil)
	var env map[string]any
	if err := json.Unmarshal(out, &env); err != nil {
		f.t.Fatalf("envelope %s: %v", out, err)
	}
	return env, isErr
}
