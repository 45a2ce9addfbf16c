package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// endKeys are endTurnScript's KEYS, in order (endKeyNames names them in the
// script).
const (
	endQueue    = iota // {relay}:q:<sid>              the session's queue of turn ids
	endCur             // {relay}:cur:<sid>            the session's running turn id
	endDrain           // {relay}:drain:<sid>          the session's drain flag
	endBusy            // {relay}:busy:<orch>          the orchestrator's busy sessions ({relay}:- when none)
	endTurnHash        // {relay}:turn:<id>            the turn hash
	endMsgs            // {relay}:msgs:<sid>           the session's messages (JSON list)
	endSess            // {relay}:sess:<sid>           the session hash
	endActive          // {relay}:sessions:active      active sessions by last activity (zset)
	endDrains          // {relay}:drains               sessions whose drain flag is set
	endEvents          // {relay}:events               the event stream
	endSubs            // {relay}:subidx:<event's sid> the subscriptions naming the event's session ({relay}:- when no event)
	endSubsAll         // {relay}:subidx:all           the subscriptions to all sessions
	endLease           // {relay}:lease:<sid>          the session's drain lease
	endUsage           // {relay}:usage:<provider>     the provider's usage counters ({relay}:usage: when no usage)
	endBusyPeer        // {relay}:busypeer:<relay>     the paired relay's busy sessions ({relay}:- when none)
	endKeys
)

var endKeyNames = [endKeys]string{endQueue: "queueKey", endCur: "curKey", endDrain: "drainKey", endBusy: "busyKey",
	endTurnHash: "turnKey", endMsgs: "msgsKey", endSess: "sessKey", endActive: "activeKey", endDrains: "drainsKey",
	endEvents: "eventsKey", endSubs: "subsKey", endSubsAll: "subsAllKey", endLease: "leaseKey", endUsage: "usageKey",
	endBusyPeer: "busyPeerKey"}

// endArgs are endTurnScript's ARGV, in order; the turn's field/value pairs
// follow them.
const (
	endSID           = iota // the session id
	endMsg                  // the message JSON ('' = none)
	endAt                   // at (ms): the turn's 'ended'
	endFence                // the fence: the drain's lease owner ('' = none)
	endEvent                // the event JSON ('' = none: nothing appended or published)
	endWatchedAnyway        // the event is watched whatever the subscriptions (1|0)
	endReleaseOwner         // the lease owner to release ('' = keep the lease)
	endChannel              // the notify channel
	endSessNote             // the session's notification
	endTurnNote             // the turn's notification
	endInputTokens          // input tokens ('' = no usage counted)
	endOutputTokens         // output tokens
	endCost                 // cost (micro-dollars)
	endClearPause           // clear the provider's pause (1|0)
	endArgs
)

var endArgNames = [endArgs]string{endSID: "sid", endMsg: "msg", endAt: "at", endFence: "fence", endEvent: "event",
	endWatchedAnyway: "watchedAnyway", endReleaseOwner: "releaseOwner", endChannel: "channel", endSessNote: "sessNote",
	endTurnNote: "turnNote", endInputTokens: "inputTokens", endOutputTokens: "outputTokens", endCost: "costMicroUSD",
	endClearPause: "clearPause"}

// endTurnScript is EndTurn's step. It answers {-1} (fenced: nothing
// written) or {more, watched, released, the turn's record}.
var endTurnScript = redis.NewScript(noneLua + fenceLua + endTurnLua + luaNames("KEYS", endKeyNames[:]) + luaNames("ARGV", endArgNames[:]) + `
local fieldsFrom = ` + strconv.Itoa(endArgs+1) + `
local function isWatched()
  if event == '' then return 0 end
  if watchedAnyway == '1' or redis.call('SCARD', subsKey) > 0 or redis.call('SCARD', subsAllKey) > 0 then return 1 end
  return 0
end
if (fence ~= '' or event ~= '') and redis.call('HGET', turnKey, 'ended') == at then
  -- This step already ran (its answer was lost and it is tried again, by
  -- this drain): the outcome, message, event and usage stay as they were
  -- written once, and it is not fenced.
  local more = 0
  if redis.call('LLEN', queueKey) > 0 then more = 1 end
  return {more, isWatched(), 0, redis.call('HGETALL', turnKey)}
end
if fenced(leaseKey, turnKey, fence) then
  return {-1}
end
if #ARGV > fieldsFrom then redis.call('HSET', turnKey, unpack(ARGV, fieldsFrom)) end
if inputTokens ~= '' then
  redis.call('HINCRBY', usageKey, 'turns', 1)
  redis.call('HINCRBY', usageKey, 'inputTokens', inputTokens)
  redis.call('HINCRBY', usageKey, 'outputTokens', outputTokens)
  if tonumber(costMicroUSD) > 0 then redis.call('HINCRBY', usageKey, 'costMicroUSD', costMicroUSD) end
  if clearPause == '1' then redis.call('HDEL', usageKey, 'paused', 'pausedAt') end
end
local more = endTurn(queueKey, curKey, drainKey, busyKey, busyPeerKey, turnKey, msgsKey, sessKey, activeKey, drainsKey, sid, msg, at)
if event == '' then
  return {more, 0, 0, redis.call('HGETALL', turnKey)}
end
redis.call('XADD', eventsKey, 'MAXLEN', '~', 10000, '*', 'e', event)
local watched = isWatched()
redis.call('PUBLISH', channel, sessNote)
local released = 0
if watched == 0 then
  redis.call('PUBLISH', channel, turnNote)
  if more == 0 and releaseOwner ~= '' and redis.call('GET', leaseKey) == releaseOwner then
    redis.call('DEL', leaseKey)
    released = 1
  end
end
return {more, watched, released, redis.call('HGETALL', turnKey)}
`)

// TurnEnd is a turn's end as EndTurn writes it.
type TurnEnd struct {
	Session      string
	Orchestrator string // whose 4-at-work cap the session counts toward ("" = none)
	Turn         string
	// Fence, the drain's lease owner, when set: the end is written only while
	// it holds the session's lease and the turn is still running; else
	// nothing at all, and ErrFenced.
	Fence string
	At    time.Time // when the turn ended: its "ended", the session's last activity
	Msg   *Message  // the message the turn leaves in the conversation (nil = none)
	// The outcome: the turn's status, reply, the model that replied, the error.
	Status                   TurnStatus
	Reply, ReplyModel, Error string
	// Event, when set (its ID and At set), is appended to the event stream in
	// the same step, followed by the notifications: "session:SID", then, when
	// no subscription might take the event, "turn:ID" (when one might, the
	// caller starts the event's fan-out and then publishes "turn:ID" itself).
	// Nil: no event and no notification.
	Event *Event
	// ReleaseOwner, with an event, no more turns queued and the event not
	// watched (nothing left for the drain to do): the session's lease is
	// released in the same step if ReleaseOwner still holds it.
	ReleaseOwner string
	Usage        *UsageAdd // the turn's usage, counted in the same step (nil = none)
}

// TurnEnded is what EndTurn did.
type TurnEnded struct {
	More     bool  // more turns are queued: the drain flag stays set, the caller enqueues the next drain
	Watched  bool  // a subscription might take the event
	Released bool  // the lease was released (TurnEnd.ReleaseOwner)
	Turn     *Turn // the turn's record as the step left it (what GetTurn would read now)
}

// fields are the turn's fields an end writes: its outcome, "ended" at At,
// no partial reply and no pending question.
func (e *TurnEnd) fields() []any {
	return []any{"status", e.Status, "reply", e.Reply, "replyModel", e.ReplyModel, "error", e.Error,
		"ended", ms(e.At), "partial", "", "question", ""}
}

// EndTurn writes a turn's end in one step: its outcome, the message it
// leaves in the conversation, the usage, the session's last activity moved
// and its current turn cleared; with nothing more queued, the session's
// drain flag and its 4-at-work entries dropped; then the turn's event and
// its notifications (TurnEnd.Event). A step tried again after its answer was
// lost (the turn already ended at At) changes nothing a second time.
func (s *Store) EndTurn(ctx context.Context, e *TurnEnd) (*TurnEnded, error) {
	return s.endTurn(ctx, e, e.fields())
}

// endTurn is EndTurn writing the turn's field/value pairs kv.
func (s *Store) endTurn(ctx context.Context, e *TurnEnd, kv []any) (*TurnEnded, error) {
	args, err := s.endArgs(e)
	if err != nil {
		return nil, fmt.Errorf("finish turn %s: %w", e.Turn, err)
	}
	res, err := endTurnScript.Run(ctx, s.scr, s.endKeys(e), append(args, kv...)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("finish turn %s: %w", e.Turn, err)
	}
	if len(res) == 1 {
		return nil, fmt.Errorf("finish turn %s: %w", e.Turn, ErrFenced)
	}
	if len(res) < 4 {
		return nil, fmt.Errorf("finish turn %s: %d values in the answer, want 4", e.Turn, len(res))
	}
	one := func(v any) bool { n, _ := v.(int64); return n == 1 }
	r := &TurnEnded{More: one(res[0]), Watched: one(res[1]), Released: one(res[2])}
	if m := flatMap(res[3]); len(m) > 0 {
		r.Turn = turnFrom(m)
	}
	return r, nil
}

// endKeys are endTurnScript's KEYS for e.
func (s *Store) endKeys(e *TurnEnd) []string {
	sid := e.Session
	var k [endKeys]string
	k[endQueue], k[endCur], k[endDrain] = s.k("q", sid), s.k("cur", sid), s.k("drain", sid)
	k[endBusy], k[endBusyPeer] = s.BusyKey(e.Orchestrator), s.PeerBusyKey(e.Orchestrator)
	k[endTurnHash], k[endMsgs], k[endSess] = s.turnKey(e.Turn), s.msgsKey(sid), s.sessKey(sid)
	k[endActive], k[endDrains], k[endLease] = s.k("sessions", "active"), s.drainsKey(), s.k("lease", sid)
	k[endEvents], k[endSubsAll] = s.k("events"), s.k("subidx", "all")
	if e.Event != nil {
		k[endSubs] = s.k("subidx", e.Event.Session)
	}
	k[endUsage] = s.k("usage", "")
	if e.Usage != nil {
		k[endUsage] = s.k("usage", e.Usage.Provider)
	}
	return k[:]
}

// endArgs are endTurnScript's ARGV for e, before the turn's fields.
func (s *Store) endArgs(e *TurnEnd) ([]any, error) {
	a := make([]any, endArgs, endArgs+14)
	a[endSID], a[endAt], a[endFence], a[endReleaseOwner] = e.Session, ms(e.At), e.Fence, e.ReleaseOwner
	a[endMsg], a[endEvent], a[endWatchedAnyway] = "", "", "0"
	a[endChannel], a[endSessNote], a[endTurnNote] = s.NotifyChannel(), "session:"+e.Session, "turn:"+e.Turn
	if e.Msg != nil {
		b, err := json.Marshal(e.Msg)
		if err != nil {
			return nil, err
		}
		a[endMsg] = string(b)
	}
	if e.Event != nil {
		b, err := json.Marshal(e.Event)
		if err != nil {
			return nil, err
		}
		a[endEvent], a[endWatchedAnyway] = string(b), b2s(e.Event.Sub != "" || e.Event.Watcher != "")
	}
	a[endInputTokens], a[endOutputTokens], a[endCost], a[endClearPause] = "", "", "", ""
	if u := e.Usage; u != nil {
		a[endInputTokens], a[endOutputTokens], a[endCost], a[endClearPause] = u.InputTokens, u.OutputTokens, u.CostMicroUSD, b2s(u.ClearPause)
	}
	return a, nil
}
