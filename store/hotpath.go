package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The send→reply hot path: steps that used to be several round trips, each
// now one (a pipeline, a MULTI or a script), with the same effects in the
// same order.

// loadCallKeys are loadCallScript's KEYS, in order (loadCallKeyNames names
// them in the script).
const (
	lcSess  = iota // {relay}:sess:<caller>  the caller's session hash
	lcCur          // {relay}:cur:<caller>   the caller's running turn id
	lcSids         // {relay}:sids           every session id (zset, read by lex range)
	lcRef          // {relay}:sess:<ref>     the looked-up session's hash ({relay}:sess: when none)
	lcGuess        // {relay}:turn:<guess>   the guessed running turn's hash ({relay}:- when no guess)
	loadCallKeys
)

var loadCallKeyNames = [loadCallKeys]string{lcSess: "sessKey", lcCur: "curKey", lcSids: "sidsKey", lcRef: "refKey", lcGuess: "guessKey"}

// loadCallArgs are loadCallScript's ARGV, in order.
const (
	lcGuessID = iota // the guessed running turn id ('' = none)
	lcLo             // the look-up's lex range start ('' = no target to look up)
	lcHi             // the look-up's lex range end
	loadCallArgs
)

var loadCallArgNames = [loadCallArgs]string{lcGuessID: "guess", lcLo: "lo", lcHi: "hi"}

// loadCallScript is LoadCall's one round trip: every key it touches is in
// its KEYS, so the caller's running turn is named by a guess (the last one
// seen). A running turn other than the guess comes back as its id with no
// record (false): the caller reads it.
var loadCallScript = redis.NewScript(luaNames("KEYS", loadCallKeyNames[:]) + luaNames("ARGV", loadCallArgNames[:]) + `
local sess = redis.call('HGETALL', sessKey)
local cur = redis.call('GET', curKey)
local turn = {}
if cur then
  if cur == guess then turn = redis.call('HGETALL', guessKey) else turn = false end
else cur = '' end
local ids, rec = {}, {}
if lo ~= '' then
  ids = redis.call('ZRANGEBYLEX', sidsKey, lo, hi, 'LIMIT', 0, 2)
  rec = redis.call('HGETALL', refKey)
end
return {sess, cur, turn, ids, rec}
`)

// Call is what a tool call reads first (LoadCall).
type Call struct {
	Caller  *Session // nil: the calling session does not exist
	Current string   // the caller's running turn id, "" when none
	Turn    *Turn    // that turn's record (nil when none or gone)
	// The target looked up with it: Looked says whether it was (ref was a
	// whole id); then as ResolveSession answers.
	Looked        bool
	Target        *Session
	TargetMatches int
	TargetErr     error
}

// LoadCall reads a tool call's caller (its record, its running turn's id
// and record) and, when ref is a whole session id, resolves and reads that
// session as ResolveSession would, all in one round trip.
func (s *Store) LoadCall(ctx context.Context, caller, ref string) (*Call, error) {
	lo, hi := "", ""
	if wholeID(ref) {
		r := prefixRange(ref)
		lo, hi = r.Min, r.Max
	} else {
		ref = ""
	}
	g := s.curHint.Load(caller)
	gkey := ""
	if g != "" {
		gkey = s.turnKey(g)
	}
	var k [loadCallKeys]string
	k[lcSess], k[lcCur], k[lcSids], k[lcRef], k[lcGuess] = s.sessKey(caller), s.k("cur", caller), s.k("sids"), s.sessKey(ref), gkey
	var a [loadCallArgs]any
	a[lcGuessID], a[lcLo], a[lcHi] = g, lo, hi
	res, err := loadCallScript.Run(ctx, s.scr, k[:], a[:]...).Slice()
	if err != nil {
		return nil, fmt.Errorf("load call of %s: %w", caller, err)
	}
	c := &Call{}
	if m := flatMap(res[0]); len(m) > 0 {
		c.Caller = sessionFrom(m)
	}
	c.Current, _ = res[1].(string)
	if c.Current == "" {
		s.curHint.Delete(caller)
	} else if c.Current != g {
		s.curHint.Store(caller, c.Current)
		// Not the guessed turn: its record is read now.
		m, err := s.rdb.HGetAll(ctx, s.turnKey(c.Current)).Result()
		if err != nil {
			return nil, fmt.Errorf("load call of %s: %w", caller, err)
		}
		res[2] = flatList(m)
	}
	if m := flatMap(res[2]); len(m) > 0 {
		c.Turn = turnFrom(m)
	}
	if ref == "" {
		return c, nil
	}
	c.Looked = true
	raw, _ := res[3].([]any)
	ids := make([]string, 0, len(raw))
	for _, v := range raw {
		if id, ok := v.(string); ok {
			ids = append(ids, id)
		}
	}
	id, n := pickMatch(ids, ref)
	c.TargetMatches = n
	switch {
	case id == "":
	case id != ref:
		c.Target, c.TargetErr = s.GetSession(ctx, id)
	default:
		if m := flatMap(res[4]); len(m) > 0 {
			c.Target = sessionFrom(m)
		} else {
			c.TargetErr = ErrNotFound
		}
	}
	return c, nil
}

// ResolveSession finds the session whose id is ref or starts with it and
// reads it: matches is how many ids start with ref (1 when found; more: ref
// is ambiguous, the session is nil). A whole id (32 hex digits, the shape of
// every session id) is looked up and read in one round trip; a shorter
// prefix takes a second one to read the session it names. A matching id
// whose record is gone is ErrNotFound.
func (s *Store) ResolveSession(ctx context.Context, ref string) (sess *Session, matches int, err error) {
	if !wholeID(ref) {
		id, n, err := s.ResolveSessionID(ctx, ref)
		if err != nil || id == "" {
			return nil, n, err
		}
		sess, err = s.GetSession(ctx, id)
		return sess, 1, err
	}
	var ids *redis.StringSliceCmd
	var rec *redis.MapStringStringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ids = p.ZRangeByLex(ctx, s.k("sids"), prefixRange(ref))
		rec = p.HGetAll(ctx, s.sessKey(ref))
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("resolve session %s: %w", ref, err)
	}
	id, n := pickMatch(ids.Val(), ref)
	switch {
	case id == "":
		return nil, n, nil
	case id != ref: // cannot happen for a whole id unless ids change shape
		sess, err = s.GetSession(ctx, id)
		return sess, 1, err
	case len(rec.Val()) == 0:
		return nil, 1, ErrNotFound
	}
	return sessionFrom(rec.Val()), 1, nil
}

// wholeID reports whether ref has the shape of a whole session id: 32
// lowercase hex digits (NewID(16)).
func wholeID(ref string) bool {
	if len(ref) != 32 {
		return false
	}
	for i := 0; i < len(ref); i++ {
		if c := ref[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DrainState is what StartDrain found.
type DrainState int

// StartDrain's outcomes.
const (
	DrainNoSession DrainState = iota // the session does not exist; nothing was taken
	DrainLeaseHeld                   // another drain holds the session's lease
	DrainCurrent                     // lease taken; a turn is left running (its worker died)
	DrainEmpty                       // lease taken; the queue is empty
	DrainStarted                     // lease taken; the next turn was popped and marked running
)

// Drain is StartDrain's result.
type Drain struct {
	State   DrainState
	Session *Session  // every state but DrainNoSession and DrainLeaseHeld
	Turn    *Turn     // DrainStarted: the turn, as marked running
	Watched bool      // DrainStarted: a subscription names the session or all sessions
	History []Message // DrainStarted: the session's last messages, oldest first (nil when none were asked for)
}

// startDrainLua defines startDrain, a drain's first step (StartDrain), for the
// scripts that take it: startDrainScript and pushScript.
//
// tkey is the key of the turn expected at the queue's head (expect; every key
// a script touches is in its KEYS): when another turn is at the head and the
// drain would take it, nothing is written and the answer is {5, that id}: the
// caller asks again naming it.
const startDrainLua = `
local function startDrain(sess, lease, cur, q, msgs, sub, suball, owner, ttl, now, tkey, expect, chan, note, hist)
  if redis.call('EXISTS', sess) == 0 then return {0} end
  local head = redis.call('LINDEX', q, 0)
  if head and head ~= expect and redis.call('EXISTS', lease) == 0 and redis.call('EXISTS', cur) == 0 then
    return {5, head}
  end
  if not redis.call('SET', lease, owner, 'NX', 'PX', ttl) then return {1} end
  local s = redis.call('HGETALL', sess)
  if redis.call('GET', cur) then return {2, s} end
  local id = redis.call('LPOP', q)
  if not id then return {3, s} end
  redis.call('SET', cur, id)
  redis.call('HSET', tkey, 'status', 'running', 'started', now, 'drainer', owner)
  local turn = redis.call('HGETALL', tkey)
  redis.call('PUBLISH', chan, note)
  local subs = redis.call('SCARD', sub) + redis.call('SCARD', suball)
  local m = {}
  if tonumber(hist) > 0 then m = redis.call('LRANGE', msgs, -tonumber(hist), -1) end
  return {4, s, id, turn, subs, m}
end
`

// startDrainKeys are startDrainScript's KEYS, in order (startDrainKeyNames
// names them in the script).
const (
	sdSess     = iota // {relay}:sess:<sid>       the session hash
	sdLease           // {relay}:lease:<sid>      the session's drain lease
	sdCur             // {relay}:cur:<sid>        the session's running turn id
	sdQueue           // {relay}:q:<sid>          the session's queue of turn ids
	sdMsgs            // {relay}:msgs:<sid>       the session's messages (JSON list)
	sdSubs            // {relay}:subidx:<sid>     the subscriptions naming the session
	sdSubsAll         // {relay}:subidx:all       the subscriptions to all sessions
	sdTurnHash        // {relay}:turn:<expect>    the turn expected at the head ({relay}:- when none)
	startDrainKeys
)

var startDrainKeyNames = [startDrainKeys]string{sdSess: "sessKey", sdLease: "leaseKey", sdCur: "curKey", sdQueue: "queueKey",
	sdMsgs: "msgsKey", sdSubs: "subsKey", sdSubsAll: "subsAllKey", sdTurnHash: "turnKey"}

// startDrainArgs are startDrainScript's ARGV, in order.
const (
	sdOwner   = iota // the lease owner
	sdTTL            // the lease ttl (ms)
	sdNow            // now (ms)
	sdExpect         // the turn id expected at the head ('' = none)
	sdChannel        // the notify channel
	sdNote           // the notification ('session:<sid>')
	sdHistory        // how many last messages to return
	startDrainArgs
)

var startDrainArgNames = [startDrainArgs]string{sdOwner: "owner", sdTTL: "ttl", sdNow: "now", sdExpect: "expect",
	sdChannel: "channel", sdNote: "note", sdHistory: "history"}

// startDrainScript is StartDrain's step: startDrain on its KEYS and ARGV.
var startDrainScript = redis.NewScript(startDrainLua + luaNames("KEYS", startDrainKeyNames[:]) + luaNames("ARGV", startDrainArgNames[:]) + `
return startDrain(sessKey, leaseKey, curKey, queueKey, msgsKey, subsKey, subsAllKey,
  owner, ttl, now, turnKey, expect, channel, note, history)
`)

// StartDrain is a drain's first step in one round trip: it takes the
// session's lease for owner (for ttl) and, when no turn is left running and
// a turn is queued, pops it and marks it running (as PopTurnBy owner), publishes
// "session:SID" (the owner's console), and returns the session, the turn,
// whether any subscription might watch the session and its last history
// messages. With a turn left running or an empty queue it only takes the
// lease: the caller goes the long way (CurrentTurn, PopTurn) under it.
func (s *Store) StartDrain(ctx context.Context, sid, owner string, ttl time.Duration, now time.Time, history int) (*Drain, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("lease of %s: ttl %v: a lease must expire", sid, ttl)
	}
	expect := s.headHint.LoadAndDelete(sid)
	for range 8 {
		tkey := ""
		if expect != "" {
			tkey = s.turnKey(expect)
		}
		var k [startDrainKeys]string
		k[sdSess], k[sdLease], k[sdCur], k[sdQueue] = s.sessKey(sid), s.k("lease", sid), s.k("cur", sid), s.k("q", sid)
		k[sdMsgs], k[sdSubs], k[sdSubsAll], k[sdTurnHash] = s.msgsKey(sid), s.k("subidx", sid), s.k("subidx", "all"), tkey
		var a [startDrainArgs]any
		a[sdOwner], a[sdTTL], a[sdNow], a[sdExpect] = owner, max(ttl.Milliseconds(), 1), ms(now), expect
		a[sdChannel], a[sdNote], a[sdHistory] = s.NotifyChannel(), "session:"+sid, history
		res, err := startDrainScript.Run(ctx, s.scr, k[:], a[:]...).Result()
		if err != nil {
			return nil, fmt.Errorf("start drain %s: %w", sid, err)
		}
		if head, ok := otherHead(res); ok {
			expect = head // another turn is at the head: ask again naming it
			continue
		}
		d, err := drainFrom(res, history)
		if err != nil {
			return nil, fmt.Errorf("start drain %s: %w", sid, err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("start drain %s: the queue's head kept changing", sid)
}

// drainOtherHead is startDrain's answer when another turn than the expected
// one is at the queue's head (nothing was written).
const drainOtherHead = 5

// otherHead reads startDrain's {5, id}.
func otherHead(v any) (string, bool) {
	res, _ := v.([]any)
	if len(res) != 2 {
		return "", false
	}
	if code, _ := res[0].(int64); code != drainOtherHead {
		return "", false
	}
	id, _ := res[1].(string)
	return id, id != ""
}

// drainFrom reads startDrain's answer.
func drainFrom(v any, history int) (*Drain, error) {
	res, _ := v.([]any)
	if len(res) == 0 {
		return nil, fmt.Errorf("unexpected answer %v", v)
	}
	code, _ := res[0].(int64)
	d := &Drain{State: DrainState(code)}
	if d.State == DrainNoSession || d.State == DrainLeaseHeld {
		return d, nil
	}
	d.Session = sessionFrom(flatMap(res[1]))
	if d.State != DrainStarted {
		return d, nil
	}
	id, _ := res[2].(string)
	d.Turn = turnFrom(flatMap(res[3]))
	d.Turn.ID = id
	n, _ := res[4].(int64)
	d.Watched = n > 0
	if history <= 0 {
		return d, nil // no history asked for: History stays nil
	}
	raw, _ := res[5].([]any)
	d.History = make([]Message, 0, len(raw))
	for _, r := range raw {
		var m Message
		if str, ok := r.(string); ok && json.Unmarshal([]byte(str), &m) == nil {
			d.History = append(d.History, m)
		}
	}
	return d, nil
}

// flatList is m as an HGETALL reply (field, value, …).
func flatList(m map[string]string) []any {
	out := make([]any, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

// flatMap turns a script's HGETALL reply (field, value, …) into a map.
func flatMap(v any) map[string]string {
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		m[k] = val
	}
	return m
}

// UsageAdd is a done turn's usage, counted with its outcome (EndTurn).
type UsageAdd struct {
	Provider                  string
	InputTokens, OutputTokens int64
	CostMicroUSD              int64 // added when > 0
	ClearPause                bool  // the provider's pause by a usage limit ends (the turn succeeded)
}

// seenEndWaitingScript is SeenEndWaiting's step.
var seenEndWaitingScript = redis.NewScript(`
-- KEYS[1] = {relay}:turn:<id>     the turn hash
-- KEYS[2] = {relay}:waiting:<id>  the caller's wait on the turn
-- KEYS[3] = {relay}:echo:<id>     the echoes held while it waits
-- ARGV[1] = seen: mark the turn seen first (1|0)
if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'waited', '1') end
redis.call('DEL', KEYS[2])
local items = redis.call('LRANGE', KEYS[3], 0, -1)
if #items > 0 then redis.call('DEL', KEYS[3]) end
return items
`)

// SeenEndWaiting ends a caller's wait on a turn and returns the echoes held
// meanwhile (watcher → groups), in one step; with seen, the turn is first
// marked seen (MarkTurnSeen), so it is seen before its wait ends.
func (s *Store) SeenEndWaiting(ctx context.Context, turn string, seen bool) (map[string][]Batch, error) {
	items, err := seenEndWaitingScript.Run(ctx, s.scr, []string{s.turnKey(turn), s.k("waiting", turn), s.k("echo", turn)}, b2s(seen)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("end the wait on %s: %w", turn, err)
	}
	return decodeEchoes(items), nil
}
