package store

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"
)

// One table per Lua script: each row writes its keys, runs the script
// through the store's method and compares the answer and every key of the
// test's prefix afterwards (or the keys it names) with cmp.Diff.

// scState is a prefix's keys by name after the key base ("sess:s1"), each
// value typed as its Redis type.
type scState map[string]any

type (
	scHash   map[string]string
	scList   []string
	scSet    []string // sorted
	scZset   map[string]float64
	scStream int // how many entries
)

// load writes st.
func (e *testEnv) load(st scState) {
	e.t.Helper()
	for k, v := range st {
		k = KeyBase(e.prefix) + k
		var err error
		switch v := v.(type) {
		case string:
			err = e.rdb.Set(e.ctx, k, v, 0).Err()
		case scHash:
			err = e.rdb.HSet(e.ctx, k, map[string]string(v)).Err()
		case scList:
			err = e.rdb.RPush(e.ctx, k, toAny(v)...).Err()
		case scSet:
			err = e.rdb.SAdd(e.ctx, k, toAny(v)...).Err()
		case scZset:
			for m, sc := range v {
				if err = e.rdb.ZAdd(e.ctx, k, redis.Z{Member: m, Score: sc}).Err(); err != nil {
					break
				}
			}
		default:
			e.t.Fatalf("load %s: type %T", k, v)
		}
		if err != nil {
			e.t.Fatalf("load %s: %v", k, err)
		}
	}
}

func toAny(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

// state reads every key of the test's prefix, or only the keys named.
func (e *testEnv) state(only ...string) scState {
	e.t.Helper()
	base := KeyBase(e.prefix)
	var keys []string
	if len(only) > 0 {
		for _, k := range only {
			keys = append(keys, base+k)
		}
	} else {
		keys = e.keysOf("*")
	}
	st := scState{}
	for _, k := range keys {
		typ, err := e.rdb.Type(e.ctx, k).Result()
		if err != nil {
			e.t.Fatalf("TYPE %s: %v", k, err)
		}
		var v any
		switch typ {
		case "none":
			continue
		case "string":
			v, err = e.rdb.Get(e.ctx, k).Result()
		case "hash":
			var m map[string]string
			m, err = e.rdb.HGetAll(e.ctx, k).Result()
			v = scHash(m)
		case "list":
			var l []string
			l, err = e.rdb.LRange(e.ctx, k, 0, -1).Result()
			v = scList(l)
		case "set":
			var l []string
			l, err = e.rdb.SMembers(e.ctx, k).Result()
			slices.Sort(l)
			v = scSet(l)
		case "zset":
			var zs []redis.Z
			zs, err = e.rdb.ZRangeWithScores(e.ctx, k, 0, -1).Result()
			m := scZset{}
			for _, z := range zs {
				m[z.Member.(string)] = z.Score
			}
			v = m
		case "stream":
			var n int64
			n, err = e.rdb.XLen(e.ctx, k).Result()
			v = scStream(n)
		default:
			e.t.Fatalf("%s: type %s", k, typ)
		}
		if err != nil {
			e.t.Fatalf("read %s: %v", k, err)
		}
		st[strings.TrimPrefix(k, base)] = v
	}
	return st
}

// scriptRow is one row of a script's table.
type scriptRow struct {
	name   string
	before scState
	run    func(e *testEnv) any // calls the store's method; its answer
	want   any
	after  scState  // nil: as before
	only   []string // set: after names only these keys
}

func runScriptRows(t *testing.T, rows []scriptRow) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			e.load(r.before)
			got := r.run(e)
			if d := cmp.Diff(r.want, got); d != "" {
				t.Errorf("answer (-want +got):\n%s", d)
			}
			after := r.after
			if after == nil {
				after = r.before
			}
			if d := cmp.Diff(after, e.state(r.only...), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("keys after (-want +got):\n%s", d)
			}
		})
	}
}

// errName names the store's sentinel errors (any other error by its text).
func errName(err error) string {
	var lu *LoopUsedError
	var le *ErrLimit
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPeerSessionLimit):
		return "ErrPeerSessionLimit"
	case errors.Is(err, ErrSessionLimit):
		return "ErrSessionLimit"
	case errors.Is(err, ErrFenced):
		return "ErrFenced"
	case errors.Is(err, ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, ErrRelayNameTaken):
		return "ErrRelayNameTaken"
	case errors.As(err, &lu), errors.As(err, &le):
		return err.Error()
	}
	return "other: " + err.Error()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Whole session ids (32 hex digits): LoadCall looks them up.
var (
	sidA = strings.Repeat("a", 32)
	sidB = strings.Repeat("b", 32)
)

// at is the time the rows write, in ms.
var at = time.UnixMilli(1_780_000_000_000).UTC()

const atMS = "1780000000000"

func TestScriptLoadCall(t *testing.T) {
	type view struct {
		Caller, Current, Turn string
		Looked                bool
		Target                string
		Matches               int
		Err                   string
	}
	call := func(caller, ref string) func(e *testEnv) any {
		return func(e *testEnv) any {
			c, err := e.s.LoadCall(e.ctx, caller, ref)
			if err != nil {
				return errName(err)
			}
			v := view{Current: c.Current, Looked: c.Looked, Matches: c.TargetMatches, Err: errName(c.TargetErr)}
			if c.Caller != nil {
				v.Caller = c.Caller.ID
			}
			if c.Turn != nil {
				v.Turn = c.Turn.ID + " " + string(c.Turn.Status)
			}
			if c.Target != nil {
				v.Target = c.Target.ID
			}
			return v
		}
	}
	caller := scHash{"id": "c1", "title": "caller"}
	runScriptRows(t, []scriptRow{
		{name: "no caller", run: call("c1", ""), want: view{}},
		{name: "caller idle", before: scState{"sess:c1": caller}, run: call("c1", ""), want: view{Caller: "c1"}},
		{name: "caller running", before: scState{"sess:c1": caller, "cur:c1": "t1", "turn:t1": scHash{"id": "t1", "status": "running"}},
			run: call("c1", ""), want: view{Caller: "c1", Current: "t1", Turn: "t1 running"}},
		{name: "running turn's record gone", before: scState{"sess:c1": caller, "cur:c1": "t1"},
			run: call("c1", ""), want: view{Caller: "c1", Current: "t1"}},
		{name: "target by whole id", before: scState{"sess:c1": caller, "sids": scZset{sidA: 0, sidB: 0}, "sess:" + sidA: scHash{"id": sidA}},
			run: call("c1", sidA), want: view{Caller: "c1", Looked: true, Target: sidA, Matches: 1}},
		{name: "target's record gone", before: scState{"sess:c1": caller, "sids": scZset{sidA: 0}},
			run: call("c1", sidA), want: view{Caller: "c1", Looked: true, Matches: 1, Err: "ErrNotFound"}},
		{name: "target unknown", before: scState{"sess:c1": caller, "sids": scZset{sidB: 0}},
			run: call("c1", sidA), want: view{Caller: "c1", Looked: true}},
		{name: "a prefix is not looked up", before: scState{"sess:c1": caller, "sids": scZset{sidA: 0}, "sess:" + sidA: scHash{"id": sidA}},
			run: call("c1", "aaaa"), want: view{Caller: "c1"}},
	})
}

// busySet is n busy sessions s1…sn.
func busySet(n int, more ...string) scSet {
	out := scSet{}
	for i := range n {
		out = append(out, "s"+string(rune('1'+i)))
	}
	out = append(out, more...)
	slices.Sort(out)
	return out
}

func TestScriptReserve(t *testing.T) {
	reserve := func(orch string, limit, peerLimit int) func(e *testEnv) any {
		return func(e *testEnv) any { return errName(e.s.ReserveUnder(e.ctx, orch, "s9", limit, peerLimit)) }
	}
	runScriptRows(t, []scriptRow{
		{name: "no orchestrator", run: reserve("", 4, 0), want: ""},
		{name: "3 working", before: scState{"busy:o": busySet(3)}, run: reserve("o", 4, 0), want: "",
			after: scState{"busy:o": busySet(3, "s9")}},
		{name: "4 working", before: scState{"busy:o": busySet(4)}, run: reserve("o", 4, 0), want: "ErrSessionLimit"},
		{name: "5 working", before: scState{"busy:o": busySet(5)}, run: reserve("o", 4, 0), want: "ErrSessionLimit"},
		{name: "4 working, this one among them", before: scState{"busy:o": busySet(3, "s9")}, run: reserve("o", 4, 0), want: ""},
		{name: "paired relay below its cap", before: scState{"busypeer:delta": busySet(1)}, run: reserve("peer:delta:x", 4, 2), want: "",
			after: scState{"busypeer:delta": busySet(1, "s9"), "busy:peer:delta:x": scSet{"s9"}}},
		{name: "paired relay at its cap", before: scState{"busypeer:delta": busySet(2)}, run: reserve("peer:delta:x", 4, 2), want: "ErrPeerSessionLimit"},
		{name: "conversation's cap first", before: scState{"busy:peer:delta:x": busySet(4), "busypeer:delta": busySet(1)},
			run: reserve("peer:delta:x", 4, 2), want: "ErrSessionLimit"},
	})
}

func TestScriptPush(t *testing.T) {
	tr := func() *Turn { return &Turn{ID: "t9", Session: "s9", Role: "agent", Text: "x", CreatedAt: at} }
	push := func(orch string, enforce bool) func(e *testEnv) any {
		return func(e *testEnv) any {
			start, err := e.s.PushTurn(e.ctx, tr(), orch, 4, enforce, "d9")
			return []any{start, errName(err)}
		}
	}
	queue := func(o QueueOpts) func(e *testEnv) any {
		return func(e *testEnv) any {
			o.Limit, o.Enforce, o.DrainID = 4, true, "d9"
			q, err := e.s.QueueTurn(e.ctx, tr(), o)
			if err != nil {
				return errName(err)
			}
			return []any{q.Start, q.Again, q.Drainer}
		}
	}
	queued := []string{"busy:o", "q:s9", "drain:s9", "drains", "tids"}
	runScriptRows(t, []scriptRow{
		{name: "3 working", before: scState{"busy:o": busySet(3)}, run: push("o", true), want: []any{true, ""},
			only: queued, after: scState{"busy:o": busySet(3, "s9"), "q:s9": scList{"t9"}, "drain:s9": "d9", "drains": scSet{"s9"}, "tids": scZset{"t9": 0}}},
		{name: "4 working", before: scState{"busy:o": busySet(4)}, run: push("o", true), want: []any{false, "ErrSessionLimit"}},
		{name: "5 working", before: scState{"busy:o": busySet(5)}, run: push("o", true), want: []any{false, "ErrSessionLimit"}},
		{name: "4 working, not enforced", before: scState{"busy:o": busySet(4)}, run: push("o", false), want: []any{true, ""},
			only: queued, after: scState{"busy:o": busySet(4, "s9"), "q:s9": scList{"t9"}, "drain:s9": "d9", "drains": scSet{"s9"}, "tids": scZset{"t9": 0}}},
		{name: "4 working, this one among them", before: scState{"busy:o": busySet(3, "s9"), "drain:s9": "d1"}, run: push("o", true), want: []any{false, ""},
			only: queued, after: scState{"busy:o": busySet(3, "s9"), "q:s9": scList{"t9"}, "drain:s9": "d1", "tids": scZset{"t9": 0}}},
		{name: "paired relay at its cap", before: scState{"busypeer:delta": busySet(2)},
			run: queue(QueueOpts{Orchestrator: "peer:delta:x", PeerLimit: 2}), want: "ErrPeerSessionLimit"},
		{name: "loop count used up", before: scState{"loop:c1": "2"},
			run: queue(QueueOpts{LoopOf: "c1", LoopLimit: 2}), want: "loop protection: 2 prompts counted"},
		{name: "ran before", before: scState{"turn:t9": scHash{"id": "t9", "drainer": "w1"}},
			run: queue(QueueOpts{}), want: []any{false, true, "w1"}},
		{name: "the whole write", before: scState{"sess:s9": scHash{"id": "s9", "last": "1"}, "sessions:active": scZset{"s9": 1}},
			run: queue(QueueOpts{Waiting: time.Minute}), want: []any{true, false, ""},
			after: scState{
				"sess:s9": scHash{"id": "s9", "last": atMS, "pv": "x"}, "sessions:active": scZset{"s9": float64(at.UnixMilli())},
				"q:s9": scList{"t9"}, "drain:s9": "d9", "drains": scSet{"s9"}, "tids": scZset{"t9": 0}, "waiting:t9": "1",
				"msgs:s9": scList{mustJSON(Message{ID: "t9", Role: "agent", Text: "x", CreatedAt: at})},
				"turn:t9": scHash{"id": "t9", "session": "s9", "status": "queued", "role": "agent", "from": "",
					"origin": mustJSON(Origin{}), "caller": "", "created": atMS, "text": "x"},
			}},
	})
}

func TestScriptStartDrain(t *testing.T) {
	type view struct {
		State           DrainState
		Session, Turn   string
		Watched         bool
		History         int
		Err             string
		HistoryNotAsked bool
	}
	start := func(e *testEnv) any {
		d, err := e.s.StartDrain(e.ctx, "s1", "w1", time.Minute, at, 8)
		if err != nil {
			return view{Err: errName(err)}
		}
		v := view{State: d.State, Watched: d.Watched, History: len(d.History)}
		if d.Session != nil {
			v.Session = d.Session.ID
		}
		if d.Turn != nil {
			v.Turn = d.Turn.ID + " " + string(d.Turn.Status) + " " + d.Turn.Drainer
		}
		return v
	}
	sess := scHash{"id": "s1"}
	runScriptRows(t, []scriptRow{
		{name: "no session", run: start, want: view{State: DrainNoSession}},
		{name: "lease held", before: scState{"sess:s1": sess, "lease:s1": "w2"}, run: start, want: view{State: DrainLeaseHeld}},
		{name: "empty queue", before: scState{"sess:s1": sess}, run: start, want: view{State: DrainEmpty, Session: "s1"},
			after: scState{"sess:s1": sess, "lease:s1": "w1"}},
		{name: "a turn left running", before: scState{"sess:s1": sess, "cur:s1": "t0", "q:s1": scList{"t1"}},
			run: start, want: view{State: DrainCurrent, Session: "s1"},
			after: scState{"sess:s1": sess, "cur:s1": "t0", "q:s1": scList{"t1"}, "lease:s1": "w1"}},
		{name: "a turn queued", before: scState{"sess:s1": sess, "q:s1": scList{"t1", "t2"}, "turn:t1": scHash{"id": "t1", "status": "queued"},
			"msgs:s1": scList{mustJSON(Message{ID: "m1"}), mustJSON(Message{ID: "t1"})}, "subidx:all": scSet{"sub1"}},
			run: start, want: view{State: DrainStarted, Session: "s1", Turn: "t1 running w1", Watched: true, History: 2},
			after: scState{"sess:s1": sess, "q:s1": scList{"t2"}, "cur:s1": "t1", "lease:s1": "w1",
				"turn:t1": scHash{"id": "t1", "status": "running", "started": atMS, "drainer": "w1"},
				"msgs:s1": scList{mustJSON(Message{ID: "m1"}), mustJSON(Message{ID: "t1"})}, "subidx:all": scSet{"sub1"}}},
	})
}

// running is session s1 running turn t1 for orchestrator o, drained by w1.
func running(more scState) scState {
	st := scState{"cur:s1": "t1", "drain:s1": "d1", "drains": scSet{"s1"}, "busy:o": scSet{"s1", "s2"},
		"lease:s1": "w1", "turn:t1": scHash{"id": "t1", "status": "running"}}
	for k, v := range more {
		st[k] = v
	}
	return st
}

func TestScriptFinish(t *testing.T) {
	finish := func(fence string) func(e *testEnv) any {
		return func(e *testEnv) any {
			more, err := e.s.FinishTurn(e.ctx, "s1", "o", "t1", fence, &Message{ID: "r1", Role: "assistant"}, at, "status", "done", "ended", ms(at))
			return []any{more, errName(err)}
		}
	}
	reply := mustJSON(Message{ID: "r1", Role: "assistant"})
	runScriptRows(t, []scriptRow{
		{name: "last turn", before: running(nil), run: finish("w1"), want: []any{false, ""},
			after: scState{"busy:o": scSet{"s2"}, "lease:s1": "w1", "msgs:s1": scList{reply},
				"turn:t1": scHash{"id": "t1", "status": "done", "ended": atMS}}},
		{name: "more queued", before: running(scState{"q:s1": scList{"t2"}}), run: finish("w1"), want: []any{true, ""},
			after: scState{"q:s1": scList{"t2"}, "drain:s1": "d1", "drains": scSet{"s1"}, "busy:o": scSet{"s1", "s2"}, "lease:s1": "w1",
				"msgs:s1": scList{reply}, "turn:t1": scHash{"id": "t1", "status": "done", "ended": atMS}}},
		{name: "fenced: another drain's lease", before: running(scState{"lease:s1": "w2"}), run: finish("w1"), want: []any{false, "ErrFenced"}},
		{name: "fenced: the turn is no longer running", before: running(scState{"turn:t1": scHash{"id": "t1", "status": "stopped"}}),
			run: finish("w1"), want: []any{false, "ErrFenced"}},
		{name: "ran before", before: running(scState{"turn:t1": scHash{"id": "t1", "status": "done", "ended": atMS}}),
			run: finish("w1"), want: []any{false, ""}},
	})
}

func TestScriptFinishEmit(t *testing.T) {
	ev := &Event{ID: "e1", Kind: "turn_end", Session: "s1", At: at}
	emit := func(fence string) func(e *testEnv) any {
		return func(e *testEnv) any {
			more, watched, released, ended, err := e.s.FinishTurnEmit(e.ctx, "s1", "o", "t1", fence, nil, at, ev, "w1",
				&UsageAdd{Provider: "p", InputTokens: 3, OutputTokens: 4}, "status", "done", "ended", ms(at))
			st := ""
			if ended != nil {
				st = string(ended.Status)
			}
			return []any{more, watched, released, st, errName(err)}
		}
	}
	runScriptRows(t, []scriptRow{
		{name: "last turn, not watched: the lease released", before: running(nil), run: emit("w1"), want: []any{false, false, true, "done", ""},
			after: scState{"busy:o": scSet{"s2"}, "events": scStream(1), "usage:p": scHash{"turns": "1", "inputTokens": "3", "outputTokens": "4"},
				"turn:t1": scHash{"id": "t1", "status": "done", "ended": atMS}}},
		{name: "watched: the lease kept", before: running(scState{"subidx:s1": scSet{"sub1"}}), run: emit("w1"), want: []any{false, true, false, "done", ""},
			after: scState{"busy:o": scSet{"s2"}, "events": scStream(1), "usage:p": scHash{"turns": "1", "inputTokens": "3", "outputTokens": "4"},
				"turn:t1": scHash{"id": "t1", "status": "done", "ended": atMS}, "subidx:s1": scSet{"sub1"}, "lease:s1": "w1"}},
		{name: "fenced", before: running(scState{"lease:s1": "w2"}), run: emit("w1"), want: []any{false, false, false, "", "ErrFenced"}},
	})
}

func TestScriptPop(t *testing.T) {
	pop := func(e *testEnv) any {
		id, err := e.s.PopTurnBy(e.ctx, "s1", "o", at, "w1")
		return []any{id, errName(err)}
	}
	runScriptRows(t, []scriptRow{
		{name: "empty: the session leaves the cap", before: scState{"drain:s1": "d1", "drains": scSet{"s1"}, "busy:o": scSet{"s1", "s2"}},
			run: pop, want: []any{"", ""}, after: scState{"busy:o": scSet{"s2"}}},
		{name: "the head taken", before: scState{"q:s1": scList{"t1", "t2"}, "turn:t1": scHash{"id": "t1", "status": "queued"}},
			run: pop, want: []any{"t1", ""},
			after: scState{"q:s1": scList{"t2"}, "cur:s1": "t1", "turn:t1": scHash{"id": "t1", "status": "running", "started": atMS, "drainer": "w1"}}},
	})
}

func TestScriptRequeue(t *testing.T) {
	requeue := func(e *testEnv) any { return errName(e.s.RequeueTurnBy(e.ctx, "s1", "t1", "w1")) }
	runScriptRows(t, []scriptRow{
		{name: "put back at the head", before: running(scState{"q:s1": scList{"t2"}}), run: requeue, want: "",
			after: scState{"q:s1": scList{"t1", "t2"}, "drain:s1": "d1", "drains": scSet{"s1"}, "busy:o": scSet{"s1", "s2"}, "lease:s1": "w1",
				"turn:t1": scHash{"id": "t1", "status": "queued", "started": "0"}}},
		{name: "fenced", before: running(scState{"lease:s1": "w2"}), run: requeue, want: "ErrFenced"},
	})
}

func TestScriptPartial(t *testing.T) {
	partial := func(e *testEnv) any { return errName(e.s.SetTurnPartial(e.ctx, "s1", "t1", "w1", "so far", at)) }
	runScriptRows(t, []scriptRow{
		{name: "written", before: running(nil), run: partial, want: "",
			after: running(scState{"turn:t1": scHash{"id": "t1", "status": "running", "partial": "so far", "partialAt": atMS}})},
		{name: "fenced", before: running(scState{"lease:s1": "w2"}), run: partial, want: "ErrFenced"},
	})
}

func TestScriptDropDrain(t *testing.T) {
	flags := func(e *testEnv) any {
		m, err := e.s.DrainFlags(e.ctx)
		return []any{m, errName(err)}
	}
	runScriptRows(t, []scriptRow{
		{name: "a flag gone leaves the index", before: scState{"drains": scSet{"s1", "s2"}, "drain:s1": "d1"},
			run: flags, want: []any{map[string]string{"s1": "d1"}, ""}, after: scState{"drains": scSet{"s1"}, "drain:s1": "d1"}},
	})
}

func TestScriptRenew(t *testing.T) {
	renew := func(owner string) func(e *testEnv) any {
		return func(e *testEnv) any {
			ok, err := e.s.RenewLease(e.ctx, "s1", owner, time.Minute)
			return []any{ok, errName(err)}
		}
	}
	release := func(owner string) func(e *testEnv) any {
		return func(e *testEnv) any { return errName(e.s.ReleaseLease(e.ctx, "s1", owner)) }
	}
	held := scState{"lease:s1": "w1"}
	runScriptRows(t, []scriptRow{
		{name: "renewed by its owner", before: held, run: renew("w1"), want: []any{true, ""}},
		{name: "not by another", before: held, run: renew("w2"), want: []any{false, ""}},
		{name: "released by its owner", before: held, run: release("w1"), want: "", after: scState{}},
		{name: "not by another", before: held, run: release("w2"), want: ""},
	})
}

func TestScriptSeenEndWaiting(t *testing.T) {
	g := Batch{Kind: "plain", Events: []Event{{ID: "e1", Kind: "turn_end", At: at}}}
	echo := mustJSON(struct {
		Watcher string `json:"watcher"`
		Batch   Batch  `json:"group"`
	}{"w", g})
	end := func(seen bool) func(e *testEnv) any {
		return func(e *testEnv) any {
			m, err := e.s.SeenEndWaiting(e.ctx, "t1", seen)
			return []any{m, errName(err)}
		}
	}
	before := scState{"turn:t1": scHash{"id": "t1"}, "waiting:t1": "1", "echo:t1": scList{echo}}
	runScriptRows(t, []scriptRow{
		{name: "seen", before: before, run: end(true), want: []any{map[string][]Batch{"w": {g}}, ""},
			after: scState{"turn:t1": scHash{"id": "t1", "waited": "1"}}},
		{name: "not seen", before: before, run: end(false), want: []any{map[string][]Batch{"w": {g}}, ""},
			after: scState{"turn:t1": scHash{"id": "t1"}}},
	})
}

func TestScriptHoldEcho(t *testing.T) {
	g := Batch{Kind: "plain"}
	echo := mustJSON(struct {
		Watcher string `json:"watcher"`
		Batch   Batch  `json:"group"`
	}{"w", g})
	hold := func(e *testEnv) any {
		out, err := e.s.HoldEchoIfWaiting(e.ctx, "t1", g, "w")
		return []any{out, errName(err)}
	}
	runScriptRows(t, []scriptRow{
		{name: "seen", before: scState{"turn:t1": scHash{"waited": "1"}, "waiting:t1": "1"}, run: hold, want: []any{EchoSeen, ""}},
		{name: "held", before: scState{"waiting:t1": "1"}, run: hold, want: []any{EchoHeld, ""},
			after: scState{"waiting:t1": "1", "echo:t1": scList{echo}}},
		{name: "deliver", run: hold, want: []any{EchoDeliver, ""}},
	})
}

func TestScriptMoveHeld(t *testing.T) {
	move := func(e *testEnv) any {
		due, err := e.s.MoveHeld(e.ctx, "a", "b")
		return []any{due, errName(err)}
	}
	runScriptRows(t, []scriptRow{
		{name: "moved", before: scState{"held:a": scList{"x"}, "due:a": atMS}, run: move, want: []any{at, ""},
			after: scState{"held:b": scList{"x"}, "due:b": atMS}},
		{name: "nothing held", run: move, want: []any{time.Time{}, ""}},
	})
}

func TestScriptTakeHeld(t *testing.T) {
	ev := Event{ID: "e1", Kind: "turn_end", At: at}
	take := func(now time.Time) func(e *testEnv) any {
		return func(e *testEnv) any {
			evs, due, err := e.s.TakeHeld(e.ctx, "sub1", now)
			return []any{evs, due, errName(err)}
		}
	}
	held := scState{"held:sub1": scList{mustJSON(ev)}, "due:sub1": atMS}
	runScriptRows(t, []scriptRow{
		{name: "due", before: held, run: take(at), want: []any{[]Event{ev}, time.Time{}, ""}, after: scState{}},
		{name: "not yet due", before: held, run: take(at.Add(-time.Second)), want: []any{[]Event(nil), at, ""}},
		{name: "nothing held", run: take(at), want: []any{[]Event(nil), time.Time{}, ""}},
	})
}

func TestScriptTakeBuffer(t *testing.T) {
	g := Batch{Kind: "plain", Sub: "sub1"}
	take := func(window time.Time) func(e *testEnv) any {
		return func(e *testEnv) any {
			gs, err := e.s.TakeBuffer(e.ctx, "w", window)
			return []any{gs, errName(err)}
		}
	}
	summary := func(e *testEnv) any {
		gs, err := e.s.TakeSummary(e.ctx, "w")
		return []any{gs, errName(err)}
	}
	buf := scState{"buf:w": scList{mustJSON(g)}, "win:w": atMS}
	runScriptRows(t, []scriptRow{
		{name: "its window", before: buf, run: take(at), want: []any{[]Batch{g}, ""}, after: scState{}},
		{name: "another window", before: buf, run: take(at.Add(time.Second)), want: []any{[]Batch{}, ""}},
		{name: "now", before: buf, run: take(time.Time{}), want: []any{[]Batch{g}, ""}, after: scState{}},
		{name: "the summary", before: scState{"wl:w": scList{mustJSON(g)}, "wlnext:w": atMS}, run: summary, want: []any{[]Batch{g}, ""}, after: scState{}},
	})
}

func TestScriptAddSchedule(t *testing.T) {
	sc := &Schedule{ID: "sch1", Setter: "a", Target: "b", Title: "t"}
	add := func(e *testEnv) any { return errName(e.s.AddSchedule(e.ctx, sc, 2, 2)) }
	runScriptRows(t, []scriptRow{
		{name: "added", run: add, want: "",
			after: scState{"sch:sch1": mustJSON(sc), "schs": scSet{"sch1"}, "schinto:b": scSet{"sch1"}, "schby:a": scSet{"sch1"}}},
		{name: "into its target: full", before: scState{"schinto:b": scSet{"x", "y"}}, run: add, want: "limit into reached (2)"},
		{name: "by its setter: full", before: scState{"schby:a": scSet{"x", "y"}}, run: add, want: "limit by reached (2)"},
	})
}

func TestScriptAddAsk(t *testing.T) {
	a := &Ask{ID: "q1", Asker: "a", Session: "b", Question: "?", CreatedAt: at}
	add := func(e *testEnv) any { return errName(e.s.AddAsk(e.ctx, a, 2, 2)) }
	old := float64(at.Add(-ClosedAskKeep - 25*time.Hour).UnixMilli())
	score := float64(at.UnixMilli())
	runScriptRows(t, []scriptRow{
		{name: "added, an old ask trimmed", before: scState{"asksby:a": scZset{"q0": old}}, run: add, want: "",
			after: scState{"ask:q1": mustJSON(a), "asksby:a": scZset{"q1": score}, "asks:open": scZset{"q1": score},
				"asksin:b": scSet{"q1"}, "asksopen:a": scSet{"q1"}}},
		{name: "the asker's: full", before: scState{"asksopen:a": scSet{"x", "y"}}, run: add, want: "limit asker reached (2)"},
		{name: "the session's: full", before: scState{"asksin:b": scSet{"x", "y"}}, run: add, want: "limit session reached (2)"},
	})
}

func TestScriptCloseAsk(t *testing.T) {
	a := &Ask{ID: "q1", Asker: "a", Session: "b", Status: "answered", CreatedAt: at}
	pending := mustJSON(&Ask{ID: "q1", Asker: "a", Session: "b", Status: "pending", CreatedAt: at})
	closeAsk := func(e *testEnv) any {
		ok, err := e.s.CloseAsk(e.ctx, a)
		return []any{ok, errName(err)}
	}
	open := scState{"ask:q1": pending, "asks:open": scZset{"q1": 1}, "asksin:b": scSet{"q1"}, "asksopen:a": scSet{"q1"}}
	runScriptRows(t, []scriptRow{
		{name: "closed", before: open, run: closeAsk, want: []any{true, ""}, after: scState{"ask:q1": mustJSON(a)}},
		{name: "no longer pending", before: scState{"ask:q1": mustJSON(a)}, run: closeAsk, want: []any{false, ""}},
		{name: "gone", run: closeAsk, want: []any{false, "ErrNotFound"}},
	})
}

func TestScriptAddSubscription(t *testing.T) {
	sub := &Subscription{ID: "sub1", Watcher: "w", Sessions: []string{"s1", "s2"}, Events: []string{"turn_end"}}
	add := func(e *testEnv) any { return errName(e.s.AddSubscription(e.ctx, sub, 2)) }
	runScriptRows(t, []scriptRow{
		{name: "added", run: add, want: "",
			after: scState{"sub:sub1": mustJSON(sub), "subs:w": scSet{"sub1"}, "subsall": scSet{"sub1"}, "subidx:s1": scSet{"sub1"}, "subidx:s2": scSet{"sub1"}}},
		{name: "the watcher's: full", before: scState{"subs:w": scSet{"x", "y"}}, run: add, want: "limit watcher reached (2)"},
	})
}

func TestScriptLoop(t *testing.T) {
	take := func(e *testEnv) any {
		ok, n, err := e.s.TakeLoop(e.ctx, "c1", 2)
		return []any{ok, n, errName(err)}
	}
	giveBack := func(e *testEnv) any { return errName(e.s.GiveBackLoop(e.ctx, "c1")) }
	runScriptRows(t, []scriptRow{
		{name: "take: first", run: take, want: []any{true, 1, ""}, after: scState{"loop:c1": "1"}},
		{name: "take: below the limit", before: scState{"loop:c1": "1"}, run: take, want: []any{true, 2, ""}, after: scState{"loop:c1": "2"}},
		{name: "take: used up", before: scState{"loop:c1": "2"}, run: take, want: []any{false, 2, ""}},
		{name: "give back", before: scState{"loop:c1": "2"}, run: giveBack, want: "", after: scState{"loop:c1": "1"}},
		{name: "give back: none counted", run: giveBack, want: ""},
	})
}

func TestScriptSetLink(t *testing.T) {
	set := func(online bool, reason string) func(e *testEnv) any {
		return func(e *testEnv) any {
			changed, err := e.s.SetLink(e.ctx, "Delta", online, at, reason)
			return []any{changed, errName(err)}
		}
	}
	runScriptRows(t, []scriptRow{
		{name: "first online", run: set(true, ""), want: []any{true, ""}, after: scState{"relaylink": scHash{"delta:online": "1", "delta:seen": atMS}}},
		{name: "offline: seen kept", before: scState{"relaylink": scHash{"delta:online": "1", "delta:seen": "5"}}, run: set(false, "down"), want: []any{true, ""},
			after: scState{"relaylink": scHash{"delta:online": "0", "delta:seen": "5", "delta:reason": "down"}}},
		{name: "online again: unchanged", before: scState{"relaylink": scHash{"delta:online": "1", "delta:seen": "5"}}, run: set(true, ""), want: []any{false, ""},
			after: scState{"relaylink": scHash{"delta:online": "1", "delta:seen": atMS}}},
	})
}

func TestScriptPeerTokens(t *testing.T) {
	tok := "peer-token-1"
	h := TokenHash(tok)
	id := h[:peerTokenIDLen]
	revoke := func(id string) func(e *testEnv) any {
		return func(e *testEnv) any {
			ok, err := e.s.RevokePeerToken(e.ctx, id)
			return []any{ok, errName(err)}
		}
	}
	bind := func(relay string) func(e *testEnv) any {
		return func(e *testEnv) any {
			name, err := e.s.BindPeerToken(e.ctx, tok, relay)
			return []any{name, errName(err)}
		}
	}
	runScriptRows(t, []scriptRow{
		{name: "revoke", before: scState{"peertok": scHash{h: "{}", "other": "{}"}, "peertokrelay": scHash{h: "delta"}, "peertokused": scHash{h: "1"}},
			run: revoke(id), want: []any{true, ""}, after: scState{"peertok": scHash{"other": "{}"}}},
		{name: "revoke: none", before: scState{"peertok": scHash{"other": "{}"}}, run: revoke(id), want: []any{false, ""}},
		{name: "bind: first", before: scState{"peertok": scHash{h: "{}"}}, run: bind("Delta"), want: []any{"delta", ""},
			after: scState{"peertok": scHash{h: "{}"}, "peertokrelay": scHash{h: "delta"}}},
		{name: "bind: already bound", before: scState{"peertokrelay": scHash{h: "echo"}}, run: bind("Delta"), want: []any{"echo", ""}},
		{name: "bind: the name is another token's", before: scState{"peertok": scHash{"h2": "{}"}, "peertokrelay": scHash{"h2": "delta"}},
			run: bind("delta"), want: []any{"", "ErrRelayNameTaken"}},
		{name: "bind: the other token is gone", before: scState{"peertokrelay": scHash{"h2": "delta"}},
			run: bind("delta"), want: []any{"delta", ""}, after: scState{"peertokrelay": scHash{"h2": "delta", h: "delta"}}},
	})
}

func TestScriptTokens(t *testing.T) {
	h := TokenHash("turn-tok")
	drop := func(e *testEnv) any { return errName(e.s.DropTurnToken(e.ctx, "s1", "turn-tok")) }
	upgrade := func(e *testEnv) any {
		n, err := e.s.UpgradeTokens(e.ctx)
		return []any{n, errName(err)}
	}
	ph, oh, lh := TokenHash("plain"), TokenHash("owner-plain"), TokenHash("left")
	runScriptRows(t, []scriptRow{
		{name: "drop a turn token", before: scState{"tokh:" + h: "s1", "sess:s1": scHash{"id": "s1", "turntok": h}}, run: drop, want: "",
			after: scState{"sess:s1": scHash{"id": "s1"}}},
		{name: "drop: the session has another", before: scState{"tokh:" + h: "s1", "sess:s1": scHash{"id": "s1", "turntok": "x"}}, run: drop, want: "",
			after: scState{"sess:s1": scHash{"id": "s1", "turntok": "x"}}},
		{name: "upgrade plain tokens", before: scState{"owner": "owner-plain", "sess:s1": scHash{"id": "s1", "token": "plain"}, "tok:plain": "s1", "tok:left": "s2"},
			run: upgrade, want: []any{3, ""},
			after: scState{"ownerh": oh, "sess:s1": scHash{"id": "s1", "tokh": ph}, "tokh:" + ph: "s1", "tokh:" + lh: "s2", "tokfmt": tokFormat}},
	})
}

// R23.5: an external session's new token; the old one names nothing at once.
func TestScriptRotateSessionToken(t *testing.T) {
	oh, nh := TokenHash("old-tok"), TokenHash("new-tok")
	rotate := func(e *testEnv) any {
		ok, err := e.s.RotateSessionToken(e.ctx, "s1", "new-tok")
		return []any{ok, errName(err)}
	}
	runScriptRows(t, []scriptRow{
		{name: "rotate", before: scState{"tokh:" + oh: "s1", "sess:s1": scHash{"id": "s1", "tokh": oh}}, run: rotate, want: []any{true, ""},
			after: scState{"tokh:" + nh: "s1", "sess:s1": scHash{"id": "s1", "tokh": nh}}},
		{name: "rotate: no token before", before: scState{"sess:s1": scHash{"id": "s1"}}, run: rotate, want: []any{true, ""},
			after: scState{"tokh:" + nh: "s1", "sess:s1": scHash{"id": "s1", "tokh": nh}}},
		{name: "rotate: archived", before: scState{"sess:s1": scHash{"id": "s1", "archived": "1"}}, run: rotate, want: []any{false, ""},
			after: scState{"sess:s1": scHash{"id": "s1", "archived": "1"}}},
		{name: "rotate: no session", before: scState{"tokh:" + oh: "s2"}, run: rotate, want: []any{false, ""},
			after: scState{"tokh:" + oh: "s2"}},
	})
}

// R24.1: a task changes only while working; an ended one is kept MCPTaskKept.
func TestScriptUpdateMCPTask(t *testing.T) {
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	kept := strconv.FormatInt(at.Add(MCPTaskKept).UnixMilli(), 10)
	working := scState{"mcptask:t1": scHash{"owner": "a", "status": "working", "card": "1", "turn": "", "created": "1", "updated": "1", "expires": "2"}}
	update := func(c MCPTaskChange) func(e *testEnv) any {
		return func(e *testEnv) any {
			ok, err := e.s.UpdateMCPTask(e.ctx, "t1", c, at)
			return []any{ok, errName(err)}
		}
	}
	no := false
	runScriptRows(t, []scriptRow{
		{name: "waits on its turn", before: working, run: update(MCPTaskChange{Status: MCPTaskWorking, Card: &no, Turn: "u1"}), want: []any{true, ""},
			after: scState{"mcptask:t1": scHash{"owner": "a", "status": "working", "card": "0", "turn": "u1", "created": "1", "updated": ms,
				"expires": strconv.FormatInt(at.Add(MCPTaskWorkingTTL).UnixMilli(), 10)}}},
		{name: "completed", before: working, run: update(MCPTaskChange{Status: MCPTaskCompleted, Result: []byte(`{"ok":true}`)}), want: []any{true, ""},
			after: scState{"mcptask:t1": scHash{"owner": "a", "status": "completed", "card": "1", "turn": "", "created": "1", "updated": ms,
				"expires": kept, "result": `{"ok":true}`, "iserr": "0"}}},
		{name: "cancelled stays cancelled", before: scState{"mcptask:t1": scHash{"status": "cancelled"}},
			run: update(MCPTaskChange{Status: MCPTaskCompleted, Result: []byte(`{}`)}), want: []any{false, ""},
			after: scState{"mcptask:t1": scHash{"status": "cancelled"}}},
		{name: "gone", run: update(MCPTaskChange{Status: MCPTaskCancelled}), want: []any{false, "ErrNotFound"}},
	})
}

// TestScriptSetActivityOutcomeR23_3: a relay_tool call's outcome is added to
// its 🛰️ line, found from the tail among the last 64 messages; a line further
// back, or gone, is left alone.
func TestScriptSetActivityOutcomeR23_3(t *testing.T) {
	line := &Message{ID: "a1", Role: "activity", Text: "🛰️ send → desk session 1a2b3c4d", CreatedAt: at}
	set := func(outcome string) func(e *testEnv) any {
		return func(e *testEnv) any {
			ok, err := e.s.SetActivityOutcome(e.ctx, "s1", line, outcome)
			return []any{ok, errName(err), line.Outcome}
		}
	}
	with := func(outcome string) string {
		m := *line
		m.Outcome = outcome
		return mustJSON(m)
	}
	reply, other := mustJSON(Message{ID: "r1", Role: "assistant"}), mustJSON(Message{ID: "a0", Role: "activity", Text: "🛰️ wait → desk"})
	far := scList{mustJSON(line)}
	for range activityScan {
		far = append(far, reply)
	}
	runScriptRows(t, []scriptRow{
		{name: "the last message", before: scState{"msgs:s1": scList{reply, mustJSON(line)}}, run: set("ok, replied"), want: []any{true, "", ""},
			after: scState{"msgs:s1": scList{reply, with("ok, replied")}}},
		{name: "messages written after it", before: scState{"msgs:s1": scList{other, mustJSON(line), reply, other}},
			run: set("REMOTE_RELAY_FORBIDDEN"), want: []any{true, "", ""},
			after: scState{"msgs:s1": scList{other, with("REMOTE_RELAY_FORBIDDEN"), reply, other}}},
		{name: "further back than 64", before: scState{"msgs:s1": far}, run: set("ok"), want: []any{false, "", ""}},
		{name: "no such line", before: scState{"msgs:s1": scList{other, reply}}, run: set("ok"), want: []any{false, "", ""}},
		{name: "no conversation", run: set("ok"), want: []any{false, "", ""}},
	})
}
