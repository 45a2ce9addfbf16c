package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Message is one entry of a session's conversation (R7.5).
type Message struct {
	ID        string    `json:"id"`
	Role      string    `json:"role"` // user | agent | assistant | event | schedule | activity (an agent CLI's relay_tool call, R17.3)
	Text      string    `json:"text"`
	From      *Ref      `json:"from,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Outcome   string    `json:"outcome,omitempty"` // an activity line's relay_tool call: "ok[, STATUS]" or its error code (R23.3)
}

// Origin is the chain a turn belongs to (R4.7).
type Origin struct {
	Path     []string `json:"path"`
	Unlocked []string `json:"unlocked,omitempty"`
}

// TurnStatus is where a turn is: queued, running, then done, error or stopped.
type TurnStatus string

// Turn statuses.
const (
	TurnQueued  TurnStatus = "queued"
	TurnRunning TurnStatus = "running"
	TurnDone    TurnStatus = "done"
	TurnError   TurnStatus = "error"
	TurnStopped TurnStatus = "stopped"
)

// MarshalBinary writes the status as its text (go-redis takes it as a command argument).
func (s TurnStatus) MarshalBinary() ([]byte, error) { return []byte(s), nil }

// Ended reports a final status (done, error, stopped).
func (s TurnStatus) Ended() bool { return s == TurnDone || s == TurnError || s == TurnStopped }

// Turn is one prompt processed by a session's agent. Its id is the prompt message's id.
type Turn struct {
	ID            string
	Session       string
	Status        TurnStatus
	Role          string
	From          *Ref
	Origin        Origin
	Caller        string // the session whose agent sent the prompt ("" for the owner)
	CreatedAt     time.Time
	StartedAt     time.Time
	EndedAt       time.Time
	Reply         string
	ReplyModel    string
	ModelAsked    string // the model the turn asked for, kept when another one ran (R7.13)
	Error         string
	Partial       string
	Question      string // id of the question card the turn waits on
	Waited        bool   // the caller received the finished reply (no-echo, R8.18)
	Text          string // the prompt
	StopRequested bool
	PartialAt     time.Time // last output of the running turn (stalled)
	// Drainer is the lease owner of the drain that took the turn off its
	// queue ("WORKERID:…"; "" when not recorded): a drain of that same
	// process that finds the turn left running knows whether its agent ever
	// started there.
	Drainer string
}

func (s *Store) turnKey(id string) string { return s.k("turn", id) }

func turnFrom(m map[string]string) *Turn {
	t := &Turn{
		ID: m["id"], Session: m["session"], Status: TurnStatus(m["status"]), Role: m["role"], Caller: m["caller"],
		CreatedAt: fromMS(atoi64(m["created"])), StartedAt: fromMS(atoi64(m["started"])),
		EndedAt: fromMS(atoi64(m["ended"])), Reply: m["reply"], ReplyModel: m["replyModel"], ModelAsked: m["modelAsked"],
		Error: m["error"], Partial: m["partial"], Question: m["question"], Waited: m["waited"] == "1",
		Text: m["text"], StopRequested: m["stopRequested"] == "1", PartialAt: fromMS(atoi64(m["partialAt"])),
		Drainer: m["drainer"],
	}
	if v := m["from"]; v != "" {
		var r Ref
		if json.Unmarshal([]byte(v), &r) == nil {
			t.From = &r
		}
	}
	if v := m["origin"]; v != "" {
		_ = json.Unmarshal([]byte(v), &t.Origin)
	}
	return t
}

// GetTurn reads a turn; ErrNotFound when it does not exist.
func (s *Store) GetTurn(ctx context.Context, id string) (*Turn, error) {
	m, err := s.rdb.HGetAll(ctx, s.turnKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("get turn %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	return turnFrom(m), nil
}

// ResolveTurnID finds a turn (message) id by full id or unique prefix.
func (s *Store) ResolveTurnID(ctx context.Context, idOrPrefix string) (string, int, error) {
	return s.resolve(ctx, s.k("tids"), idOrPrefix)
}

// setTurnFields writes some fields of a turn (the typed methods below).
func (s *Store) setTurnFields(ctx context.Context, id string, kv ...any) error {
	return wrap(s.rdb.HSet(ctx, s.turnKey(id), kv...).Err(), "set fields of turn %s", id)
}

// MarkTurnSeen records that the caller got the turn's reply (no echo, R8.18).
func (s *Store) MarkTurnSeen(ctx context.Context, id string) error {
	return s.setTurnFields(ctx, id, "waited", "1")
}

// SetTurnModelAsked records the model a turn was asked to run (R7.13).
func (s *Store) SetTurnModelAsked(ctx context.Context, id, model string) error {
	return s.setTurnFields(ctx, id, "modelAsked", model)
}

// partialScript is SetTurnPartial's step.
var partialScript = redis.NewScript(`
-- KEYS[1] = {relay}:turn:<id>    the turn hash
-- KEYS[2] = {relay}:lease:<sid>  the session's drain lease
-- ARGV[1] = the fence: the drain's lease owner ('' = none)
-- ARGV[2] = the partial text
-- ARGV[3] = at (ms)
` + fenceLua + `
if fenced(KEYS[2], KEYS[1], ARGV[1]) then
  return -1
end
redis.call('HSET', KEYS[1], 'partial', ARGV[2], 'partialAt', ARGV[3])
return 1
`)

// SetTurnPartial records the reply written so far (read_session's inFlight)
// of session sid's turn id, fenced by the drain's lease owner as FinishTurn.
func (s *Store) SetTurnPartial(ctx context.Context, sid, id, fence, text string, at time.Time) error {
	n, err := partialScript.Run(ctx, s.scr, []string{s.turnKey(id), s.k("lease", sid)}, fence, text, ms(at)).Int()
	if err != nil {
		return fmt.Errorf("partial reply of turn %s: %w", id, err)
	}
	if n == -1 {
		return fmt.Errorf("partial reply of turn %s: %w", id, ErrFenced)
	}
	return nil
}

// SetTurnQuestion records the question card a running turn waits on ("" for none).
func (s *Store) SetTurnQuestion(ctx context.Context, id, questionID string) error {
	return s.setTurnFields(ctx, id, "question", questionID)
}

// RequestTurnStop marks a turn to be stopped (a worker that missed the notification sees it).
func (s *Store) RequestTurnStop(ctx context.Context, id string) error {
	return s.setTurnFields(ctx, id, "stopRequested", "1")
}

// Messages.

func (s *Store) msgsKey(sid string) string { return s.k("msgs", sid) }

// LastMessages returns the last n messages, oldest first.
func (s *Store) LastMessages(ctx context.Context, sid string, n int) ([]Message, error) {
	raw, err := s.rdb.LRange(ctx, s.msgsKey(sid), int64(-n), -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read messages %s: %w", sid, err)
	}
	out := make([]Message, 0, len(raw))
	for _, r := range raw {
		var m Message
		if err := json.Unmarshal([]byte(r), &m); err == nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// MessageCount returns how many messages a session has.
func (s *Store) MessageCount(ctx context.Context, sid string) (int, error) {
	n, err := s.rdb.LLen(ctx, s.msgsKey(sid)).Result()
	return int(n), wrap(err, "count messages of %s", sid)
}

// Queue: one list of turn ids per session, one drain task at a time (the drain
// flag holds its task id), a per-session lease, and the 4-at-work semaphore: a set
// per orchestrating conversation holding its busy sessions (R6.1).

// ErrSessionLimit is returned when a prompt would make one more session busy than allowed.
var ErrSessionLimit = errors.New("session limit")

// ErrPeerSessionLimit is the refusal by the cap of a paired relay's
// conversations together (R18.21): it is also an ErrSessionLimit.
var ErrPeerSessionLimit = fmt.Errorf("peer token: %w", ErrSessionLimit)

// PeerConversationPrefix starts an orchestrator id that is a paired relay's
// conversation's stand-in here: "peer:RELAY:SESSION" (relay.PeerWatcherPrefix).
const PeerConversationPrefix = "peer:"

// PeerBusyKey is the second semaphore of a session whose orchestrator is a
// paired relay's conversation: the sessions every conversation of that relay
// started here, together (R18.21: per peer token, since a peer token speaks
// for one relay name and a name is bound to one token). "" for any other
// orchestrator. The relay is the stand-in's part before its first ":" after
// the prefix, lower-cased: the same for every conversation a token speaks for,
// however its origin.session is spelled.
func (s *Store) PeerBusyKey(orchestrator string) string {
	rest, ok := strings.CutPrefix(orchestrator, PeerConversationPrefix)
	if !ok {
		return ""
	}
	rel, _, _ := strings.Cut(rest, ":")
	return s.k("busypeer", strings.ToLower(rel))
}

// reserveScript is ReserveUnder's step: it returns 1, -1 (the
// conversation's cap) or -2 (the paired relay's cap); a refusal writes
// nothing.
var reserveScript = redis.NewScript(`
-- KEYS[1] = {relay}:busy:<orch>       the orchestrator's busy sessions ({relay}:- when none)
-- KEYS[2] = {relay}:busypeer:<relay>  the paired relay's busy sessions ({relay}:- when none)
-- ARGV[1] = the session id
-- ARGV[2] = the limit
-- ARGV[3] = enforce (1|0)
-- ARGV[4] = the paired relay's limit
` + noneLua + capLua + `
return reserve(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
`)

// capLua defines reserve(busy, peer, sid, limit, enforce, peerLimit), the
// 4-at-work cap (R6.1) and the paired relay's (R18.21), for the scripts that
// take them: reserveScript and pushScript (after noneLua). A session already
// busy for its orchestrator passes; else, with enforce '1', it is refused
// when busy holds limit sessions (-1) or, when peer is not the placeholder
// and the session not yet in it, when peer holds peerLimit (-2); a refusal
// writes nothing. Else the session joins peer (when given) and busy: 1. No
// orchestrator (busy the placeholder): 1, nothing written.
const capLua = `
local function reserve(busy, peer, sid, limit, enforce, peerLimit)
  if isnone(busy) then return 1 end
  if redis.call('SISMEMBER', busy, sid) == 1 then return 1 end
  if enforce == '1' and redis.call('SCARD', busy) >= tonumber(limit) then return -1 end
  if not isnone(peer) and redis.call('SISMEMBER', peer, sid) == 0 then
    if enforce == '1' and redis.call('SCARD', peer) >= tonumber(peerLimit) then return -2 end
    redis.call('SADD', peer, sid)
  end
  redis.call('SADD', busy, sid)
  return 1
end
`

// pushKeys are pushScript's KEYS, in order (pushKeyNames names them in the
// script).
const (
	pushQueue    = iota // {relay}:q:<sid>            the session's queue of turn ids
	pushDrain           // {relay}:drain:<sid>        the session's drain flag
	pushBusy            // {relay}:busy:<orch>        the orchestrator's busy sessions ({relay}:- when none)
	pushTurnHash        // {relay}:turn:<id>          the turn hash
	pushTids            // {relay}:tids               every turn id (zset, by lex)
	pushMsgs            // {relay}:msgs:<sid>         the session's messages (JSON list)
	pushSess            // {relay}:sess:<sid>         the session hash
	pushActive          // {relay}:sessions:active    active sessions by last activity (zset)
	pushDrains          // {relay}:drains             sessions whose drain flag is set
	pushQev             // {relay}:qev:<sid>          the queued turns of role event
	pushWaiting         // {relay}:waiting:<id>       the caller's wait on the turn
	pushLoop            // {relay}:loop:<caller>      the caller's loop-protection count ({relay}:- when not counted)
	pushLease           // {relay}:lease:<sid>        the session's drain lease
	pushCur             // {relay}:cur:<sid>          the session's running turn id
	pushSubs            // {relay}:subidx:<sid>       the subscriptions naming the session
	pushSubsAll         // {relay}:subidx:all         the subscriptions to all sessions
	pushRelays          // {relay}:relays             the pairings (JSON by name)
	pushUnlock          // {relay}:unlock:<sid>       the relays unlocked in the session's conversation
	pushBusyPeer        // {relay}:busypeer:<relay>   the paired relay's busy sessions ({relay}:- when none)
	pushKeys
)

var pushKeyNames = [pushKeys]string{pushQueue: "queueKey", pushDrain: "drainKey", pushBusy: "busyKey", pushTurnHash: "turnKey",
	pushTids: "tidsKey", pushMsgs: "msgsKey", pushSess: "sessKey", pushActive: "activeKey", pushDrains: "drainsKey",
	pushQev: "qevKey", pushWaiting: "waitingKey", pushLoop: "loopKey", pushLease: "leaseKey", pushCur: "curKey",
	pushSubs: "subsKey", pushSubsAll: "subsAllKey", pushRelays: "relaysKey", pushUnlock: "unlockKey", pushBusyPeer: "busyPeerKey"}

// pushArgs are pushScript's ARGV, in order; the turn's field/value pairs
// follow them.
const (
	pushTurnID     = iota // the turn id
	pushSID               // the session id
	pushLimit             // the 4-at-work limit
	pushEnforce           // enforce (1|0)
	pushDrainID           // the drain task id
	pushMsg               // the message JSON
	pushCreated           // created (ms)
	pushWaitTTL           // the wait's ttl (ms; 0 = the caller does not wait)
	pushChannel           // the notify channel
	pushNote              // the notification ('' = none)
	pushLoopLimit         // the loop limit
	pushOwner             // the drain's lease owner ('' = the drain is not started here)
	pushLeaseTTL          // the lease ttl (ms)
	pushNow               // now (ms)
	pushHistory           // how many last messages to return
	pushUnlockFrom        // the paired relay the prompt came from (lower case, '' = none)
	pushPeerLimit         // the paired relay's limit
	pushArgs
)

var pushArgNames = [pushArgs]string{pushTurnID: "turnID", pushSID: "sid", pushLimit: "limit", pushEnforce: "enforce",
	pushDrainID: "drainID", pushMsg: "msg", pushCreated: "created", pushWaitTTL: "waitTTL", pushChannel: "channel",
	pushNote: "note", pushLoopLimit: "loopLimit", pushOwner: "owner", pushLeaseTTL: "leaseTTL", pushNow: "now",
	pushHistory: "history", pushUnlockFrom: "unlockFrom", pushPeerLimit: "peerLimit"}

// pushScript is PushTurn's and QueueTurn's step. It returns {-2, loop
// count} (loop protection: nothing was written), {-1} (the 4-at-work cap:
// nothing was written), {-3} (the paired relay's cap, R18.21: nothing was
// written), {0} (queued behind a drain), {1} (queued, the drain flag set:
// the caller starts the drain), {1, startDrain's answer} (the drain's first
// step taken too) or {2, the turn's drainer} (the turn exists: this push ran
// before and its answer was lost).
var pushScript = redis.NewScript(noneLua + capLua + startDrainLua + previewLua + luaNames("KEYS", pushKeyNames[:]) + luaNames("ARGV", pushArgNames[:]) + `
local fieldsFrom = ` + strconv.Itoa(pushArgs+1) + `
if redis.call('EXISTS', turnKey) == 1 then
  -- This push ran already (its answer was lost and go-redis tried again):
  -- nothing is written twice; the caller learns who took the turn, if anyone.
  return {2, redis.call('HGET', turnKey, 'drainer') or ''}
end
local loop = 0
if not isnone(loopKey) then
  loop = tonumber(redis.call('GET', loopKey) or '0')
  if loop >= tonumber(loopLimit) then return {-2, loop} end
end
local cap = reserve(busyKey, busyPeerKey, sid, limit, enforce, peerLimit)
if cap == -1 then return {-1} end
-- R18.21: the paired relay's conversations together.
if cap == -2 then return {-3} end
if not isnone(loopKey) then redis.call('INCR', loopKey) end
if unlockFrom ~= '' then
  -- R4.4 (b): the paired relay whose agent wrote here is unlocked here (a
  -- mention by the owner stays one).
  local rel = redis.call('HGETALL', relaysKey)
  for i = 1, #rel, 2 do
    local ok, p = pcall(cjson.decode, rel[i + 1])
    if ok and type(p) == 'table' then
      local name, self = p['name'], p['remoteName']
      if (type(name) == 'string' and string.lower(name) == unlockFrom) or
         (type(self) == 'string' and string.lower(self) == unlockFrom) then
        redis.call('HSETNX', unlockKey, rel[i], 'agent')
      end
    end
  end
end
if tonumber(waitTTL) > 0 then redis.call('SET', waitingKey, '1', 'PX', waitTTL) end
redis.call('RPUSH', msgsKey, msg)
if redis.call('EXISTS', sessKey) == 1 then
  redis.call('HSET', sessKey, 'last', created)
  setPreview(sessKey, msg)
end
redis.call('ZADD', activeKey, 'XX', created, sid)
redis.call('HSET', turnKey, unpack(ARGV, fieldsFrom))
local placed = false
-- qev:SID names the queued turns of role event (the loop below reads it, not
-- the turns' records: every key a script touches is in its KEYS); it starts
-- afresh whenever the queue is empty.
if redis.call('LLEN', queueKey) == 0 then redis.call('DEL', qevKey) end
if redis.call('HGET', turnKey, 'role') == 'event' then
  redis.call('SADD', qevKey, turnID)
  -- R8.15: an event message is the next prompt: after the events already
  -- waiting at the head, before every other waiting prompt.
  for _, id in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    if redis.call('SISMEMBER', qevKey, id) == 0 then
      redis.call('LINSERT', queueKey, 'BEFORE', id, turnID)
      placed = true
      break
    end
  end
end
if not placed then redis.call('RPUSH', queueKey, turnID) end
redis.call('ZADD', tidsKey, 0, turnID)
local start = 0
if redis.call('EXISTS', drainKey) == 0 then
  redis.call('SET', drainKey, drainID)
  redis.call('SADD', drainsKey, sid)
  start = 1
  if owner ~= '' then
    local d = startDrain(sessKey, leaseKey, curKey, queueKey, msgsKey, subsKey, subsAllKey,
      owner, leaseTTL, now, turnKey, turnID, channel, 'session:' .. sid, history)
    -- A started turn published the session's notification already.
    if d[1] ~= 4 and note ~= '' then redis.call('PUBLISH', channel, note) end
    return {1, d}
  end
end
if note ~= '' then redis.call('PUBLISH', channel, note) end
return {start}
`)

// BusyKey is the semaphore key of an orchestrating conversation ("" = none).
func (s *Store) BusyKey(orchestrator string) string {
	if orchestrator == "" {
		return ""
	}
	return s.k("busy", orchestrator)
}

// Reserve makes sid busy in its orchestrator's semaphore before the session
// exists (create_session), failing with ErrSessionLimit when full.
func (s *Store) Reserve(ctx context.Context, orchestrator, sid string, limit int) error {
	return s.ReserveUnder(ctx, orchestrator, sid, limit, 0)
}

// ReserveUnder is Reserve with the paired relay's cap too (peerLimit > 0 and
// a paired relay's conversation as orchestrator, R18.21), in the same step:
// ErrPeerSessionLimit when that one is full.
func (s *Store) ReserveUnder(ctx context.Context, orchestrator, sid string, limit, peerLimit int) error {
	peer := ""
	if peerLimit > 0 {
		peer = s.PeerBusyKey(orchestrator)
	}
	r, err := reserveScript.Run(ctx, s.scr, []string{s.BusyKey(orchestrator), peer}, sid, limit, "1", peerLimit).Int()
	if err != nil {
		return fmt.Errorf("reserve %s: %w", sid, err)
	}
	switch r {
	case -1:
		return ErrSessionLimit
	case -2:
		return ErrPeerSessionLimit
	}
	return nil
}

// Unreserve undoes Reserve when the session was not created after all.
func (s *Store) Unreserve(ctx context.Context, orchestrator, sid string) error {
	if orchestrator == "" {
		return nil
	}
	peer := s.PeerBusyKey(orchestrator)
	if peer == "" {
		return wrap(s.rdb.SRem(ctx, s.BusyKey(orchestrator), sid).Err(), "unreserve %s of %s", sid, orchestrator)
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, s.BusyKey(orchestrator), sid)
		p.SRem(ctx, peer, sid)
		return nil
	})
	if err != nil {
		return fmt.Errorf("unreserve %s: %w", sid, err)
	}
	return nil
}

// PeerBusyCount returns how many sessions the conversations of the paired
// relay an orchestrator stands in for have at work here (R18.21).
func (s *Store) PeerBusyCount(ctx context.Context, orchestrator string) (int, error) {
	k := s.PeerBusyKey(orchestrator)
	if k == "" {
		return 0, nil
	}
	n, err := s.rdb.SCard(ctx, k).Result()
	return int(n), wrap(err, "count busy peer sessions of %s", orchestrator)
}

// BusyCount returns how many sessions of an orchestrator are busy.
func (s *Store) BusyCount(ctx context.Context, orchestrator string) (int, error) {
	if orchestrator == "" {
		return 0, nil
	}
	n, err := s.rdb.SCard(ctx, s.BusyKey(orchestrator)).Result()
	return int(n), wrap(err, "count busy sessions of %s", orchestrator)
}

// PushTurn appends the prompt message, creates the turn record and queues it
// on its session (and moves the session's last activity), atomically with the
// 4-at-work check (enforce) for the session's orchestrator: a refused prompt
// leaves nothing behind. Prompts queue last, in the order their messages
// were appended; an event message (role "event") is queued next instead,
// after the events already waiting (R8.15). It
// returns whether the caller must enqueue a drain task with id drainID.
func (s *Store) PushTurn(ctx context.Context, t *Turn, orchestrator string, limit int, enforce bool, drainID string) (bool, error) {
	q, err := s.pushTurn(ctx, t, QueueOpts{Orchestrator: orchestrator, Limit: limit, Enforce: enforce, DrainID: drainID}, false)
	if err != nil {
		return false, err
	}
	return q.Start, nil
}

// QueueOpts are QueueTurn's settings besides the turn.
type QueueOpts struct {
	Orchestrator string // whose 4-at-work cap the session counts toward ("" = none)
	Limit        int    // the cap
	Enforce      bool   // refuse the prompt when the cap is reached (ErrSessionLimit)
	DrainID      string // the drain flag set when this prompt starts the session's drain
	// Waiting > 0 marks that the prompt's caller waits on its reply (SetWaiting,
	// before the turn can run: no echo, R8.18).
	Waiting time.Duration
	// LoopOf, when set, counts the prompt toward that conversation's loop
	// protection (TakeLoop, R5.2.6) in the same step; with the count at
	// LoopLimit nothing is written and the error is a *LoopUsedError.
	LoopOf    string
	LoopLimit int
	// StartOwner, when set, also takes the drain's first step (StartDrain for
	// that lease owner, LeaseTTL, History) when this prompt starts the drain.
	StartOwner string
	LeaseTTL   time.Duration
	History    int
	// UnlockFrom is the paired relay whose agent sent the prompt, by the name
	// it gives itself: the pairing it matches (by that name or the local one)
	// is unlocked in the session's conversation (Unlock by an agent, R4.4 b).
	UnlockFrom string
	// PeerLimit > 0: a session whose Orchestrator is a paired relay's
	// conversation also counts toward that relay's cap, all its
	// conversations together (PeerBusyKey, R18.21), checked in the same
	// step (ErrPeerSessionLimit).
	PeerLimit int
}

// Queued is what QueueTurn did.
type Queued struct {
	// Start: this prompt set the drain flag (QueueOpts.DrainID); the caller
	// starts the drain (it was started when Drain is set).
	Start bool
	// Drain is the drain's first step, taken for QueueOpts.StartOwner.
	Drain *Drain
	// Again: this push had run before (go-redis tried it again after its
	// answer was lost); Start is unknown then, and Drainer is the lease owner
	// that took the turn ("" when none did yet).
	Again   bool
	Drainer string
}

// asciiLower lowers A–Z only, as Lua's string.lower does in the push script.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// LoopUsedError is QueueTurn's refusal when the caller's loop-protection count
// is used up (R5.2.6): Count prompts were counted.
type LoopUsedError struct{ Count int }

func (e *LoopUsedError) Error() string {
	return fmt.Sprintf("loop protection: %d prompts counted", e.Count)
}

// QueueTurn is PushTurn for the hot path, in the same one step: the QueueOpts
// (the wait mark, the loop count, the drain's first step), and it publishes
// the "session:SID" notification (the owner's console, R19.6).
func (s *Store) QueueTurn(ctx context.Context, t *Turn, o QueueOpts) (*Queued, error) {
	return s.pushTurn(ctx, t, o, true)
}

func (s *Store) pushTurn(ctx context.Context, t *Turn, o QueueOpts, notify bool) (*Queued, error) {
	args, err := s.pushArgs(t, o, notify)
	if err != nil {
		return nil, err
	}
	res, err := pushScript.Run(ctx, s.scr, s.pushKeys(t, o), args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("queue turn %s: %w", t.ID, err)
	}
	q, err := queuedFrom(res, t.ID, o.History)
	if err != nil {
		return nil, err // a refusal as it is (ErrSessionLimit, …)
	}
	if q.Start && q.Drain == nil {
		s.headHint.Store(t.Session, t.ID) // most likely the head of the queue the drain takes
	}
	return q, nil
}

// pushArgs are pushScript's ARGV for turn t queued with o, the turn's
// fields after them.
func (s *Store) pushArgs(t *Turn, o QueueOpts, notify bool) ([]any, error) {
	from, origin := "", ""
	if t.From != nil {
		b, _ := json.Marshal(t.From)
		from = string(b)
	}
	b, _ := json.Marshal(t.Origin)
	origin = string(b)
	msg, err := json.Marshal(Message{ID: t.ID, Role: t.Role, Text: t.Text, From: t.From, CreatedAt: t.CreatedAt})
	if err != nil {
		return nil, fmt.Errorf("queue turn %s: %w", t.ID, err)
	}
	note := ""
	if notify {
		note = "session:" + t.Session
	}
	waitMS := int64(0)
	if o.Waiting > 0 {
		waitMS = max(o.Waiting.Milliseconds(), 1)
	}
	ttl := int64(0)
	if o.StartOwner != "" {
		if o.LeaseTTL <= 0 {
			return nil, fmt.Errorf("lease of %s: ttl %v: a lease must expire", t.Session, o.LeaseTTL)
		}
		ttl = max(o.LeaseTTL.Milliseconds(), 1)
	}
	var a [pushArgs]any
	a[pushTurnID], a[pushSID], a[pushLimit], a[pushEnforce], a[pushDrainID] = t.ID, t.Session, o.Limit, b2s(o.Enforce), o.DrainID
	a[pushMsg], a[pushCreated], a[pushWaitTTL], a[pushChannel], a[pushNote] = msg, ms(t.CreatedAt), waitMS, s.NotifyChannel(), note
	a[pushLoopLimit], a[pushOwner], a[pushLeaseTTL], a[pushNow], a[pushHistory] = o.LoopLimit, o.StartOwner, ttl, ms(t.CreatedAt), o.History
	a[pushUnlockFrom], a[pushPeerLimit] = asciiLower(o.UnlockFrom), o.PeerLimit
	return append(a[:], "id", t.ID, "session", t.Session, "status", TurnQueued, "role", t.Role, "from", from,
		"origin", origin, "caller", t.Caller, "created", ms(t.CreatedAt), "text", t.Text), nil
}

// queuedFrom reads pushScript's answer (see there) for turn id; history is
// how many messages the drain's first step was asked for.
func queuedFrom(res []any, id string, history int) (*Queued, error) {
	code, _ := res[0].(int64)
	switch code {
	case -2:
		n, _ := res[1].(int64)
		return nil, &LoopUsedError{Count: int(n)}
	case -1:
		return nil, ErrSessionLimit
	case -3:
		return nil, ErrPeerSessionLimit
	case 2:
		d, _ := res[1].(string)
		return &Queued{Again: true, Drainer: d}, nil
	}
	q := &Queued{Start: code == 1}
	if len(res) > 1 {
		if _, other := otherHead(res[1]); other {
			// Another turn was at the head: the drain was not started here
			// (the caller starts it the usual way).
			return q, nil
		}
		var err error
		if q.Drain, err = drainFrom(res[1], history); err != nil {
			return nil, fmt.Errorf("queue turn %s: %w", id, err)
		}
	}
	return q, nil
}

// pushKeys are pushScript's KEYS for turn t queued with o.
func (s *Store) pushKeys(t *Turn, o QueueOpts) []string {
	sid := t.Session
	loopKey := "" // the caller's loop count: none when not counted
	if o.LoopOf != "" {
		loopKey = s.k("loop", o.LoopOf)
	}
	var k [pushKeys]string
	k[pushQueue], k[pushDrain], k[pushBusy], k[pushTurnHash] = s.k("q", sid), s.k("drain", sid), s.BusyKey(o.Orchestrator), s.turnKey(t.ID)
	k[pushTids], k[pushMsgs], k[pushSess], k[pushActive] = s.k("tids"), s.msgsKey(sid), s.sessKey(sid), s.k("sessions", "active")
	k[pushDrains], k[pushQev], k[pushWaiting], k[pushLoop] = s.drainsKey(), s.k("qev", sid), s.k("waiting", t.ID), loopKey
	k[pushLease], k[pushCur], k[pushSubs], k[pushSubsAll] = s.k("lease", sid), s.k("cur", sid), s.k("subidx", sid), s.k("subidx", "all")
	k[pushRelays], k[pushUnlock] = s.k("relays"), s.k("unlock", sid)
	if o.PeerLimit > 0 {
		k[pushBusyPeer] = s.PeerBusyKey(o.Orchestrator)
	}
	return k[:]
}

// popKeys are popScript's KEYS, in order (popKeyNames names them in the
// script).
const (
	popQueue    = iota // {relay}:q:<sid>           the session's queue of turn ids
	popCur             // {relay}:cur:<sid>         the session's running turn id
	popDrain           // {relay}:drain:<sid>       the session's drain flag
	popBusy            // {relay}:busy:<orch>       the orchestrator's busy sessions ({relay}:- when none)
	popDrains          // {relay}:drains            sessions whose drain flag is set
	popBusyPeer        // {relay}:busypeer:<relay>  the paired relay's busy sessions ({relay}:- when none)
	popTurnHash        // {relay}:turn:<expect>     the turn expected at the head ({relay}:- when none)
	popKeys
)

var popKeyNames = [popKeys]string{popQueue: "queueKey", popCur: "curKey", popDrain: "drainKey", popBusy: "busyKey",
	popDrains: "drainsKey", popBusyPeer: "busyPeerKey", popTurnHash: "turnKey"}

// popArgs are popScript's ARGV, in order.
const (
	popSID     = iota // the session id
	popNow            // now (ms)
	popExpect         // the turn id expected at the head ('' = none)
	popDrainer        // the drainer ('' = not recorded)
	popArgs
)

var popArgNames = [popArgs]string{popSID: "sid", popNow: "now", popExpect: "expect", popDrainer: "drainer"}

// popScript is PopTurnBy's step. Another turn at the head comes back as
// {its id}, nothing written: the caller asks again naming it (every key a
// script touches is in its KEYS).
var popScript = redis.NewScript(noneLua + luaNames("KEYS", popKeyNames[:]) + luaNames("ARGV", popArgNames[:]) + `
local head = redis.call('LINDEX', queueKey, 0)
if head and head ~= expect then return {head} end
local id = redis.call('LPOP', queueKey)
if not id then
  redis.call('DEL', drainKey)
  redis.call('SREM', drainsKey, sid)
  if not isnone(busyKey) then redis.call('SREM', busyKey, sid) end
  if not isnone(busyPeerKey) then redis.call('SREM', busyPeerKey, sid) end
  return false
end
redis.call('SET', curKey, id)
redis.call('HSET', turnKey, 'status', 'running', 'started', now)
if drainer and drainer ~= '' then redis.call('HSET', turnKey, 'drainer', drainer) end
return id
`)

// PopTurn takes the session's next queued turn and marks it running; "" when
// the queue is empty (the session then leaves its orchestrator's semaphore
// and the drain flag is cleared).
func (s *Store) PopTurn(ctx context.Context, sid, orchestrator string, now time.Time) (string, error) {
	return s.PopTurnBy(ctx, sid, orchestrator, now, "")
}

// PopTurnBy is PopTurn recording drainer (the drain's lease owner) in the turn.
func (s *Store) PopTurnBy(ctx context.Context, sid, orchestrator string, now time.Time, drainer string) (string, error) {
	expect := ""
	for range 8 {
		tkey := ""
		if expect != "" {
			tkey = s.turnKey(expect)
		}
		var k [popKeys]string
		k[popQueue], k[popCur], k[popDrain], k[popDrains] = s.k("q", sid), s.k("cur", sid), s.k("drain", sid), s.drainsKey()
		k[popBusy], k[popBusyPeer], k[popTurnHash] = s.BusyKey(orchestrator), s.PeerBusyKey(orchestrator), tkey
		var a [popArgs]any
		a[popSID], a[popNow], a[popExpect], a[popDrainer] = sid, ms(now), expect, drainer
		v, err := popScript.Run(ctx, s.scr, k[:], a[:]...).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("pop turn %s: %w", sid, err)
		}
		if head, ok := v.([]any); ok && len(head) == 1 {
			expect, _ = head[0].(string) // another turn at the head: ask again naming it
			continue
		}
		id, _ := v.(string)
		return id, nil
	}
	return "", fmt.Errorf("pop turn %s: the queue's head kept changing", sid)
}

// endTurnLua defines endTurn(q, cur, drain, busy, busypeer, turn, msgs, sess,
// active, drains, sid, msg, at), the end of a turn EndTurn writes once the
// turn's fields are set: the session's current
// turn cleared (when it is this one), the message appended (msg "" = none),
// the session's last activity moved to at (ms), and, when nothing more is
// queued, the drain flag and the busy (4-at-work) and peer-busy entries
// dropped. It returns 1 when more turns are queued, else 0.
const endTurnLua = previewLua + `
local function endTurn(q, cur, drain, busy, busypeer, turn, msgs, sess, active, drains, sid, msg, at)
  if redis.call('GET', cur) == redis.call('HGET', turn, 'id') then redis.call('DEL', cur) end
  if msg ~= '' then redis.call('RPUSH', msgs, msg) end
  if redis.call('EXISTS', sess) == 1 then
    redis.call('HSET', sess, 'last', at)
    setPreview(sess, msg)
  end
  redis.call('ZADD', active, 'XX', at, sid)
  if redis.call('LLEN', q) > 0 then return 1 end
  redis.call('DEL', drain)
  redis.call('SREM', drains, sid)
  if not isnone(busy) then redis.call('SREM', busy, sid) end
  if not isnone(busypeer) then redis.call('SREM', busypeer, sid) end
  return 0
end
`

// previewLua defines setPreview(sess, msg): the start of a message's text
// (msg its JSON; "" = none) kept on the session hash as "pv", so the
// console's sessions list shows each session's last message without reading
// its conversation (R23.1): a machine header line left out when text
// follows it, runs of whitespace made one space, at most previewBytes
// (a hash keeps small values compactly). The domain makes it one plain line
// of at most 80 characters when read.
const previewLua = `
local function setPreview(sess, msg)
  if msg == '' then return end
  local ok, m = pcall(cjson.decode, msg)
  if not ok or type(m) ~= 'table' or type(m['text']) ~= 'string' then return end
  local t = string.sub(m['text'], 1, 800)
  local nl = string.find(t, '\n', 1, true)
  if nl and string.sub(t, 1, 1) == '[' and string.match(string.sub(t, 1, nl - 1), '%]%s*$') and string.find(t, '%S', nl) then
    t = string.sub(t, nl + 1)
  end
  t = string.gsub(t, '%s+', ' ')
  redis.call('HSET', sess, 'pv', string.sub(t, 1, ` + previewBytes + `))
end
`

// previewBytes is how much of a message's text previewLua keeps: 80
// characters of two bytes.
const previewBytes = "160"

// fenceLua defines fenced(lease, turn, owner): a drain's write (owner its
// lease owner; "" = not fenced) must be refused, because owner no longer
// holds the session's lease or the turn is no longer running. Every write a
// drain makes after its turn started checks it first (ErrFenced).
const fenceLua = `
local function fenced(lease, turn, owner)
  return owner ~= '' and (redis.call('GET', lease) ~= owner or redis.call('HGET', turn, 'status') ~= 'running')
end
`

// ErrFenced is a drain's write refused because the drain no longer holds its
// session's lease, or its turn is no longer running: another process took
// the session over (this one was paused, or cut off from Redis, past the
// lease). Nothing was written.
var ErrFenced = errors.New("the session's lease is no longer this drain's")

// requeueScript is RequeueTurnBy's step.
var requeueScript = redis.NewScript(`
-- KEYS[1] = {relay}:q:<sid>      the session's queue of turn ids
-- KEYS[2] = {relay}:cur:<sid>    the session's running turn id
-- KEYS[3] = {relay}:turn:<id>    the turn hash
-- KEYS[4] = {relay}:lease:<sid>  the session's drain lease
-- ARGV[1] = the turn id
-- ARGV[2] = the fence: the drain's lease owner ('' = none)
` + fenceLua + `
if fenced(KEYS[4], KEYS[3], ARGV[2]) then
  return -1
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[3], 'status', 'queued', 'started', 0)
return 1
`)

// RequeueTurn puts a running turn back at the head of its session's queue
// (graceful shutdown): it runs again on another worker, nothing lost.
func (s *Store) RequeueTurn(ctx context.Context, sid, turnID string) error {
	return s.RequeueTurnBy(ctx, sid, turnID, "")
}

// RequeueTurnBy is RequeueTurn fenced by the drain's lease owner (as
// FinishTurn): a drain that lost its session's lease puts nothing back.
func (s *Store) RequeueTurnBy(ctx context.Context, sid, turnID, fence string) error {
	n, err := requeueScript.Run(ctx, s.scr, []string{s.k("q", sid), s.k("cur", sid), s.turnKey(turnID), s.k("lease", sid)}, turnID, fence).Int()
	if err != nil {
		return fmt.Errorf("requeue turn %s: %w", turnID, err)
	}
	if n == -1 {
		return fmt.Errorf("requeue turn %s: %w", turnID, ErrFenced)
	}
	return nil
}

// CurrentTurn returns the id of the session's running turn, "" when none.
func (s *Store) CurrentTurn(ctx context.Context, sid string) (string, error) {
	id, err := s.rdb.Get(ctx, s.k("cur", sid)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, wrap(err, "current turn of %s", sid)
}

// QueuedTurns returns the ids of a session's queued turns in order.
func (s *Store) QueuedTurns(ctx context.Context, sid string) ([]string, error) {
	ids, err := s.rdb.LRange(ctx, s.k("q", sid), 0, -1).Result()
	return ids, wrap(err, "queued turns of %s", sid)
}

// drainsKey is the index of sessions whose drain flag is set (the recovery
// sweep reads it instead of scanning the keyspace).
func (s *Store) drainsKey() string { return s.k("drains") }

// SetDrainID records the id of the session's pending drain task.
func (s *Store) SetDrainID(ctx context.Context, sid, id string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k("drain", sid), id, redis.KeepTTL)
		p.SAdd(ctx, s.drainsKey(), sid)
		return nil
	})
	if err != nil {
		return fmt.Errorf("set the drain of %s: %w", sid, err)
	}
	return nil
}

// DrainFlags lists sessions with a drain in progress and their task ids
// (recovery sweep): one SMEMBERS and one MGET; index entries whose flag is
// gone are dropped.
func (s *Store) DrainFlags(ctx context.Context) (map[string]string, error) {
	sids, err := s.rdb.SMembers(ctx, s.drainsKey()).Result()
	if err != nil || len(sids) == 0 {
		return map[string]string{}, wrap(err, "drain flags")
	}
	keys := make([]string, len(sids))
	for i, sid := range sids {
		keys[i] = s.k("drain", sid)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read drain flags: %w", err)
	}
	out := make(map[string]string, len(sids))
	var gone []any
	for i, v := range vals {
		if id, ok := v.(string); ok {
			out[sids[i]] = id
		} else {
			gone = append(gone, sids[i])
		}
	}
	for _, sid := range gone {
		// A flag may be set again meanwhile: drop the member only while its flag is absent.
		_ = dropDrainScript.Run(ctx, s.scr, []string{s.drainsKey(), s.k("drain", sid.(string))}, sid).Err()
	}
	return out, nil
}

// dropDrainScript drops a session from the drains index while its flag is absent.
var dropDrainScript = redis.NewScript(`
-- KEYS[1] = {relay}:drains       sessions whose drain flag is set
-- KEYS[2] = {relay}:drain:<sid>  the session's drain flag
-- ARGV[1] = the session id
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end
return 1
`)

// IndexDrainFlags adds every drain flag found by a keyspace scan to the
// index (once at start: flags written before the index existed).
func (s *Store) IndexDrainFlags(ctx context.Context) (int, error) {
	prefix := s.k("drain", "")
	n := 0
	err := s.scan(ctx, prefix+"*", func(k string) error {
		if err := s.rdb.SAdd(ctx, s.drainsKey(), k[len(prefix):]).Err(); err != nil {
			return fmt.Errorf("index drain flag %s: %w", k, err)
		}
		n++
		return nil
	})
	return n, wrap(err, "index drain flags")
}

// Lease: one worker drains a session at a time.

// AcquireLease takes the session's lease for owner for ttl.
func (s *Store) AcquireLease(ctx context.Context, sid, owner string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("lease of %s: ttl %v: a lease must expire", sid, ttl)
	}
	ok, err := s.rdb.SetNX(ctx, s.k("lease", sid), owner, ttl).Result()
	return ok, wrap(err, "acquire lease of %s", sid)
}

// renewScript is RenewLease's and ReleaseLease's step.
var renewScript = redis.NewScript(`
-- KEYS[1] = {relay}:lease:<sid>  the session's drain lease
-- ARGV[1] = the owner
-- ARGV[2] = the ttl (ms; 0 = release)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[2] == '0' then return redis.call('DEL', KEYS[1]) end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// RenewLease extends the lease if owner still holds it.
func (s *Store) RenewLease(ctx context.Context, sid, owner string, ttl time.Duration) (bool, error) {
	// At least 1 ms: 0 means release to the script.
	n, err := renewScript.Run(ctx, s.scr, []string{s.k("lease", sid)}, owner, max(ttl.Milliseconds(), 1)).Int()
	return n == 1, wrap(err, "renew lease of %s", sid)
}

// ReleaseLease drops the lease if owner holds it.
func (s *Store) ReleaseLease(ctx context.Context, sid, owner string) error {
	return wrap(renewScript.Run(ctx, s.scr, []string{s.k("lease", sid)}, owner, 0).Err(), "release lease of %s", sid)
}

// LeaseHolder returns who holds a session's lease, "" when nobody.
func (s *Store) LeaseHolder(ctx context.Context, sid string) (string, error) {
	v, err := s.rdb.Get(ctx, s.k("lease", sid)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, wrap(err, "lease holder of %s", sid)
}

// Notifications: one pub/sub channel carries "turn:ID", "card:ID", "q:ID" and
// "stop:ID" so waiting calls and running turns wake without polling.

// NotifyChannel is the pub/sub channel name.
func (s *Store) NotifyChannel() string { return s.k("notify") }

// SubscribeNotify subscribes to the relay's notifications (pub/sub stays
// behind the store; the caller closes the subscription).
func (s *Store) SubscribeNotify(ctx context.Context) *redis.PubSub {
	return s.rdb.Subscribe(ctx, s.NotifyChannel())
}

// Notify publishes a notification.
func (s *Store) Notify(ctx context.Context, what string) error {
	return wrap(s.rdb.Publish(ctx, s.NotifyChannel(), what).Err(), "publish a notification")
}

// Counters.

// IncrLoop counts one prompt to another agent and returns the new count.
func (s *Store) IncrLoop(ctx context.Context, sid string) (int, error) {
	n, err := s.rdb.Incr(ctx, s.k("loop", sid)).Result()
	return int(n), wrap(err, "count a loop prompt of %s", sid)
}

// LoopCount returns the loop-protection count of a conversation.
func (s *Store) LoopCount(ctx context.Context, sid string) (int, error) {
	v, err := s.rdb.Get(ctx, s.k("loop", sid)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	n, _ := strconv.Atoi(v)
	return n, wrap(err, "loop count of %s", sid)
}

// ResetLoop resets the loop-protection count (owner wrote, or allowed a card).
func (s *Store) ResetLoop(ctx context.Context, sid string) error {
	return wrap(s.rdb.Del(ctx, s.k("loop", sid)).Err(), "reset loop count of %s", sid)
}

// Flag reads a per-conversation flag (cards asked once per conversation).
func (s *Store) Flag(ctx context.Context, sid, name string) (bool, error) {
	v, err := s.rdb.HGet(ctx, s.k("flags", sid), name).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == "1", wrap(err, "flag %s of %s", name, sid)
}

// SetFlag sets a per-conversation flag.
func (s *Store) SetFlag(ctx context.Context, sid, name string) error {
	return wrap(s.rdb.HSet(ctx, s.k("flags", sid), name, "1").Err(), "set flag %s of %s", name, sid)
}

// Usage counters per provider (R7.3): turns and tokens.

// Usage reads a provider's counters.
func (s *Store) Usage(ctx context.Context, provider string) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("usage", provider)).Result()
	if err != nil {
		return nil, fmt.Errorf("usage of %s: %w", provider, err)
	}
	out := map[string]int64{"turns": 0, "inputTokens": 0, "outputTokens": 0}
	for k, v := range m {
		out[k] = atoi64(v)
	}
	return out, nil
}
