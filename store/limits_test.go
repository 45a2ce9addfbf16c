package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func wantLimit(t *testing.T, err error, which string, count int) {
	t.Helper()
	le, ok := IsLimit(err)
	if !ok {
		t.Fatalf("err = %v, want an *ErrLimit %q", err, which)
	}
	if le.Which != which || le.Count != count {
		t.Fatalf("ErrLimit = {%s %d}, want {%s %d}", le.Which, le.Count, which, count)
	}
}

func newSchedule(setter, target string) *Schedule {
	return &Schedule{ID: "sch_" + NewID(5), Setter: setter, Target: target, Title: "t", Text: "x", First: base, EveryMinutes: 5, CreatedAt: base}
}

// AddSchedule: the into limit counts schedules firing into the target, the by
// limit those a setter set for other sessions (its own are not counted); a
// refused one writes nothing.
func TestAddSchedule(t *testing.T) {
	e := newEnv(t)
	const into, by = 2, 3

	s1, s2 := newSchedule("A", "B"), newSchedule("A", "B")
	for _, sc := range []*Schedule{s1, s2} {
		if err := e.s.AddSchedule(e.ctx, sc, into, by); err != nil {
			t.Fatalf("AddSchedule: %v", err)
		}
	}
	got, err := e.s.GetSchedule(e.ctx, s1.ID)
	if err != nil || got.Setter != "A" || got.Target != "B" || got.EveryMinutes != 5 {
		t.Errorf("GetSchedule = %+v, %v", got, err)
	}
	for _, k := range []string{e.key("schs"), e.key("schinto", "B"), e.key("schby", "A")} {
		if !e.isMember(k, s1.ID) || !e.isMember(k, s2.ID) {
			t.Errorf("%s lacks the schedules", k)
		}
	}

	refused := newSchedule("C", "B")
	wantLimit(t, e.s.AddSchedule(e.ctx, refused, into, by), "into", 2)
	e.noSchedule(refused)

	s3 := newSchedule("A", "C")
	if err := e.s.AddSchedule(e.ctx, s3, into, by); err != nil {
		t.Fatal(err)
	}
	refused = newSchedule("A", "D")
	wantLimit(t, e.s.AddSchedule(e.ctx, refused, into, by), "by", 3)
	e.noSchedule(refused)

	// A's schedules into itself count toward into:A only, not by:A.
	for range into {
		if err := e.s.AddSchedule(e.ctx, newSchedule("A", "A"), into, by); err != nil {
			t.Fatalf("own schedule: %v", err)
		}
	}
	if n := e.scard(e.key("schby", "A")); n != 3 {
		t.Errorf("schby:A has %d, want 3 (own schedules not counted)", n)
	}
	wantLimit(t, e.s.AddSchedule(e.ctx, newSchedule("A", "A"), into, by), "into", 2)

	// A limit of 0 refuses everything.
	wantLimit(t, e.s.AddSchedule(e.ctx, newSchedule("X", "Y"), 0, 10), "into", 0)
	wantLimit(t, e.s.AddSchedule(e.ctx, newSchedule("X", "Y"), 10, 0), "by", 0)
}

func (e *testEnv) noSchedule(sc *Schedule) {
	e.t.Helper()
	if e.exists(e.key("sch", sc.ID)) {
		e.t.Errorf("a refused schedule left its record")
	}
	for _, k := range []string{e.key("schs"), e.key("schinto", sc.Target), e.key("schby", sc.Setter)} {
		if e.isMember(k, sc.ID) {
			e.t.Errorf("a refused schedule is in %s", k)
		}
	}
}

func newAsk(asker, session string, at time.Time) *Ask {
	return &Ask{ID: "ask_" + NewID(5), Asker: asker, Session: session, Question: "q?", Status: "pending", CreatedAt: at}
}

// AddAsk: the asker's open asks and the concerned session's open asks are
// limited; a refused ask writes nothing; all indexes are written.
func TestAddAsk(t *testing.T) {
	e := newEnv(t)
	const askerLimit, sessionLimit = 2, 3
	a1, a2 := newAsk("X", "S", base), newAsk("X", "S", base.Add(time.Second))
	for _, a := range []*Ask{a1, a2} {
		if err := e.s.AddAsk(e.ctx, a, askerLimit, sessionLimit); err != nil {
			t.Fatal(err)
		}
	}
	if sc, ok := e.zscore(e.key("asksby", "X"), a1.ID); !ok || int64(sc) != ms(a1.CreatedAt) {
		t.Errorf("asksby:X score = %v, %v", sc, ok)
	}
	if _, ok := e.zscore(e.key("asks", "open"), a2.ID); !ok {
		t.Error("not in asks:open")
	}
	if !e.isMember(e.key("asksin", "S"), a1.ID) || !e.isMember(e.key("asksopen", "X"), a2.ID) {
		t.Error("asksin:S / asksopen:X lack the asks")
	}
	if got, err := e.s.GetAsk(e.ctx, a1.ID); err != nil || got.Question != "q?" || got.Status != "pending" {
		t.Errorf("GetAsk = %+v, %v", got, err)
	}

	refused := newAsk("X", "T", base)
	wantLimit(t, e.s.AddAsk(e.ctx, refused, askerLimit, sessionLimit), "asker", 2)
	e.noAsk(refused)

	if err := e.s.AddAsk(e.ctx, newAsk("Y", "S", base), askerLimit, sessionLimit); err != nil {
		t.Fatal(err)
	}
	refused = newAsk("Z", "S", base)
	wantLimit(t, e.s.AddAsk(e.ctx, refused, askerLimit, sessionLimit), "session", 3)
	e.noAsk(refused)
	if a, s, err := e.s.OpenAskCounts(e.ctx, "X", "S"); err != nil || a != 2 || s != 3 {
		t.Errorf("OpenAskCounts = %d, %d, %v; want 2, 3", a, s, err)
	}
}

func (e *testEnv) noAsk(a *Ask) {
	e.t.Helper()
	if e.exists(e.key("ask", a.ID)) {
		e.t.Error("a refused ask left its record")
	}
	for _, k := range []string{e.key("asksby", a.Asker), e.key("asks", "open")} {
		if _, ok := e.zscore(k, a.ID); ok {
			e.t.Errorf("a refused ask is in %s", k)
		}
	}
	for _, k := range []string{e.key("asksin", a.Session), e.key("asksopen", a.Asker)} {
		if e.isMember(k, a.ID) {
			e.t.Errorf("a refused ask is in %s", k)
		}
	}
}

// AddAsk trims the asker's index of asks made more than ClosedAskKeep + 1 day
// before the new one; newer entries and other askers' stay.
func TestAddAskTrimsAskerIndex(t *testing.T) {
	e := newEnv(t)
	now := base
	cutoff := now.Add(-ClosedAskKeep - 24*time.Hour)
	k := e.key("asksby", "W")
	old := map[string]time.Time{
		"older":     cutoff.Add(-time.Hour),
		"atCutoff":  cutoff,
		"justAfter": cutoff.Add(time.Millisecond),
		"recent":    now.Add(-6 * 24 * time.Hour),
	}
	for id, at := range old {
		if err := e.rdb.ZAdd(e.ctx, k, redisZ(at, id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.ZAdd(e.ctx, e.key("asksby", "V"), redisZ(cutoff.Add(-time.Hour), "othersOld")).Err(); err != nil {
		t.Fatal(err)
	}
	a := newAsk("W", "S", now)
	if err := e.s.AddAsk(e.ctx, a, 10, 10); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"older": false, "atCutoff": false, "justAfter": true, "recent": true, a.ID: true} {
		if _, ok := e.zscore(k, id); ok != want {
			t.Errorf("asksby:W has %s = %v, want %v", id, ok, want)
		}
	}
	if _, ok := e.zscore(e.key("asksby", "V"), "othersOld"); !ok {
		t.Error("another asker's index was trimmed")
	}

	// An ask still open stays listed by AsksBy though trimmed from asksby.
	openOld := newAsk("U", "S", now.Add(-10*24*time.Hour))
	if err := e.s.AddAsk(e.ctx, openOld, 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := e.s.AddAsk(e.ctx, newAsk("U", "S", now), 10, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.zscore(e.key("asksby", "U"), openOld.ID); ok {
		t.Error("the old open ask was not trimmed from asksby:U")
	}
	list, err := e.s.AsksBy(e.ctx, "U", time.Time{})
	if err != nil || len(list) != 2 {
		t.Errorf("AsksBy = %d asks, %v; want 2 (the old one still open)", len(list), err)
	}
}

// CloseAsk writes the final record with the 7-day expiry, takes the ask out
// of the open indexes (the asker's history stays) and refuses a second close.
func TestCloseAsk(t *testing.T) {
	e := newEnv(t)
	a := newAsk("X", "S", base)
	if err := e.s.AddAsk(e.ctx, a, 1, 1); err != nil {
		t.Fatal(err)
	}
	closed := *a
	closed.Status, closed.Answer, closed.Via, closed.EndedAt = "answered", "yes", "console", base.Add(time.Hour)
	ok, err := e.s.CloseAsk(e.ctx, &closed)
	if err != nil || !ok {
		t.Fatalf("CloseAsk = %v, %v; want true", ok, err)
	}
	if d := e.pttl(e.key("ask", a.ID)); d <= ClosedAskKeep-time.Minute || d > ClosedAskKeep {
		t.Errorf("closed ask PTTL = %v, want about %v", d, ClosedAskKeep)
	}
	got, err := e.s.GetAsk(e.ctx, a.ID)
	if err != nil || got.Status != "answered" || got.Answer != "yes" {
		t.Errorf("closed record = %+v, %v", got, err)
	}
	if _, in := e.zscore(e.key("asks", "open"), a.ID); in || e.isMember(e.key("asksin", "S"), a.ID) || e.isMember(e.key("asksopen", "X"), a.ID) {
		t.Error("a closed ask is still in an open index")
	}
	if _, in := e.zscore(e.key("asksby", "X"), a.ID); !in {
		t.Error("a closed ask left the asker's history")
	}

	again := closed
	again.Status, again.Answer = "dismissed", ""
	ok, err = e.s.CloseAsk(e.ctx, &again)
	if err != nil || ok {
		t.Fatalf("second CloseAsk = %v, %v; want false", ok, err)
	}
	if got, _ := e.s.GetAsk(e.ctx, a.ID); got.Status != "answered" {
		t.Errorf("a refused close rewrote the record (status %s)", got.Status)
	}
	if d := e.pttl(e.key("ask", a.ID)); d <= 0 {
		t.Errorf("a refused close dropped the expiry (PTTL %v)", d)
	}

	if _, err := e.s.CloseAsk(e.ctx, newAsk("X", "S", base)); !errors.Is(err, ErrNotFound) {
		t.Errorf("CloseAsk of a missing ask = %v, want ErrNotFound", err)
	}
	// The closed ask no longer counts toward the limits of 1.
	if err := e.s.AddAsk(e.ctx, newAsk("X", "S", base), 1, 1); err != nil {
		t.Errorf("AddAsk after the close = %v", err)
	}
}

// AddSubscription: a watcher's active subscriptions are limited; the record,
// the watcher's set, subsall and the session (or "all") indexes are written.
func TestAddSubscription(t *testing.T) {
	e := newEnv(t)
	const limit = 2
	s1 := &Subscription{ID: "sub_" + NewID(4), Watcher: "W", Sessions: []string{"a", "b"}, Events: []string{"turn_end"}, CreatedAt: base}
	s2 := &Subscription{ID: "sub_" + NewID(4), Watcher: "W", All: true, Events: []string{"turn_end"}, CreatedAt: base.Add(time.Second)}
	for _, sub := range []*Subscription{s1, s2} {
		if err := e.s.AddSubscription(e.ctx, sub, limit); err != nil {
			t.Fatal(err)
		}
	}
	for k, id := range map[string]string{
		e.key("subs", "W"): s1.ID, e.key("subsall"): s1.ID, e.key("subidx", "a"): s1.ID, e.key("subidx", "b"): s1.ID,
		e.key("subidx", "all"): s2.ID,
	} {
		if !e.isMember(k, id) {
			t.Errorf("%s lacks %s", k, id)
		}
	}
	if e.isMember(e.key("subidx", "all"), s1.ID) || e.isMember(e.key("subidx", "a"), s2.ID) {
		t.Error("a subscription is in an index it does not belong to")
	}
	if got, err := e.s.GetSubscription(e.ctx, s1.ID); err != nil || got.Watcher != "W" || len(got.Sessions) != 2 {
		t.Errorf("GetSubscription = %+v, %v", got, err)
	}
	if got, _ := e.s.SubscriptionsOf(e.ctx, "a"); len(got) != 2 {
		t.Errorf("SubscriptionsOf(a) = %d, want 2 (named + all)", len(got))
	}

	refused := &Subscription{ID: "sub_" + NewID(4), Watcher: "W", Sessions: []string{"c"}, CreatedAt: base}
	wantLimit(t, e.s.AddSubscription(e.ctx, refused, limit), "watcher", 2)
	if e.exists(e.key("sub", refused.ID)) || e.isMember(e.key("subsall"), refused.ID) || e.exists(e.key("subidx", "c")) || e.scard(e.key("subs", "W")) != 2 {
		t.Error("a refused subscription left something")
	}
	// Another watcher has its own count.
	if err := e.s.AddSubscription(e.ctx, &Subscription{ID: "sub_" + NewID(4), Watcher: "V", Sessions: []string{"c"}}, limit); err != nil {
		t.Errorf("another watcher: %v", err)
	}
}

// TakeLoop counts up to the limit and no further; GiveBackLoop undoes one,
// never below zero.
func TestTakeLoop(t *testing.T) {
	e := newEnv(t)
	sid := "s" + NewID(4)
	for i := 1; i <= 3; i++ {
		if ok, n, err := e.s.TakeLoop(e.ctx, sid, 3); err != nil || !ok || n != i {
			t.Fatalf("take %d = %v, %d, %v", i, ok, n, err)
		}
	}
	if ok, n, err := e.s.TakeLoop(e.ctx, sid, 3); err != nil || ok || n != 3 {
		t.Fatalf("take over the limit = %v, %d, %v; want false, 3", ok, n, err)
	}
	if n, _ := e.s.LoopCount(e.ctx, sid); n != 3 {
		t.Errorf("LoopCount = %d, want 3 (a refused take counts nothing)", n)
	}
	if err := e.s.GiveBackLoop(e.ctx, sid); err != nil {
		t.Fatal(err)
	}
	if ok, n, _ := e.s.TakeLoop(e.ctx, sid, 3); !ok || n != 3 {
		t.Errorf("take after a give-back = %v, %d", ok, n)
	}
	for range 5 {
		if err := e.s.GiveBackLoop(e.ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := e.s.LoopCount(e.ctx, sid); n != 0 {
		t.Errorf("LoopCount after more give-backs than takes = %d, want 0", n)
	}
	// Nothing taken yet: a give-back leaves 0.
	fresh := "s" + NewID(4)
	if err := e.s.GiveBackLoop(e.ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.s.LoopCount(e.ctx, fresh); n != 0 {
		t.Errorf("LoopCount = %d, want 0", n)
	}
	if ok, n, _ := e.s.TakeLoop(e.ctx, fresh, 0); ok || n != 0 {
		t.Errorf("take with limit 0 = %v, %d", ok, n)
	}
	// A reset (the owner wrote) starts over.
	if err := e.s.ResetLoop(e.ctx, sid); err != nil {
		t.Fatal(err)
	}
	if ok, n, _ := e.s.TakeLoop(e.ctx, sid, 3); !ok || n != 1 {
		t.Errorf("take after a reset = %v, %d", ok, n)
	}
}

// N goroutines racing on one limit never exceed it: loop count, schedules
// into one target, asks of one asker, subscriptions of one watcher.
func TestLimitsConcurrent(t *testing.T) {
	e := newEnv(t)
	const n, limit = 40, 7
	race := func(name string, try func(i int) (bool, error)) int {
		t.Helper()
		var ok atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				taken, err := try(i)
				if err != nil {
					t.Errorf("%s %d: %v", name, i, err)
				}
				if taken {
					ok.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := int(ok.Load()); got != limit {
			t.Errorf("%s: %d of %d racing calls got in, want exactly %d", name, got, n, limit)
		}
		return int(ok.Load())
	}
	limitErr := func(err error) (bool, error) {
		if err == nil {
			return true, nil
		}
		if _, ok := IsLimit(err); ok {
			return false, nil
		}
		return false, err
	}

	sid := "s" + NewID(4)
	race("TakeLoop", func(int) (bool, error) {
		ok, c, err := e.s.TakeLoop(e.ctx, sid, limit)
		if c > limit {
			return ok, fmt.Errorf("count %d over the limit", c)
		}
		return ok, err
	})
	if c, _ := e.s.LoopCount(e.ctx, sid); c != limit {
		t.Errorf("loop count = %d, want %d", c, limit)
	}

	race("AddSchedule", func(i int) (bool, error) {
		return limitErr(e.s.AddSchedule(e.ctx, newSchedule(fmt.Sprint("setter", i), "T"), limit, 100))
	})
	if c := e.scard(e.key("schinto", "T")); c != limit {
		t.Errorf("schinto:T has %d, want %d", c, limit)
	}
	race("AddSchedule by", func(i int) (bool, error) {
		return limitErr(e.s.AddSchedule(e.ctx, newSchedule("B", fmt.Sprint("target", i)), 100, limit))
	})
	if c := e.scard(e.key("schby", "B")); c != limit {
		t.Errorf("schby:B has %d, want %d", c, limit)
	}
	if got := len(e.keysOf("sch:*")); got != 2*limit {
		t.Errorf("%d schedule records, want %d", got, 2*limit)
	}

	race("AddAsk", func(i int) (bool, error) {
		return limitErr(e.s.AddAsk(e.ctx, newAsk("X", fmt.Sprint("s", i), base), limit, 100))
	})
	if c := e.scard(e.key("asksopen", "X")); c != limit {
		t.Errorf("asksopen:X has %d, want %d", c, limit)
	}
	race("AddSubscription", func(i int) (bool, error) {
		return limitErr(e.s.AddSubscription(e.ctx, &Subscription{ID: fmt.Sprint("sub", i), Watcher: "W", All: true}, limit))
	})
	if c := e.scard(e.key("subs", "W")); c != limit {
		t.Errorf("subs:W has %d, want %d", c, limit)
	}

	// Takes and give-backs interleaved: the count stays within [0, limit].
	sid2 := "s" + NewID(4)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				ok, c, err := e.s.TakeLoop(e.ctx, sid2, 3)
				if err != nil || c < 0 || c > 3 {
					t.Errorf("TakeLoop = %v, %d, %v", ok, c, err)
					return
				}
				if ok {
					if err := e.s.GiveBackLoop(e.ctx, sid2); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if c, _ := e.s.LoopCount(e.ctx, sid2); c != 0 {
		t.Errorf("loop count after balanced takes and give-backs = %d, want 0", c)
	}
}

func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(ms(at)), Member: member}
}
