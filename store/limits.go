package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Count limits are checked and written in one Lua step each (R18.6), so
// they hold under concurrent calls from one or many processes.

// ErrLimit is a count limit that is reached; Which names it.
type ErrLimit struct {
	Which string // "into" | "by" for schedules, "asker" | "session" for asks, "watcher" for subscriptions
	Count int    // the count found
}

func (e *ErrLimit) Error() string { return fmt.Sprintf("limit %s reached (%d)", e.Which, e.Count) }

// IsLimit reports whether err is an *ErrLimit and returns it.
func IsLimit(err error) (*ErrLimit, bool) {
	var le *ErrLimit
	ok := errors.As(err, &le)
	return le, ok
}

// addScheduleScript is AddSchedule's step.
var addScheduleScript = redis.NewScript(`
-- KEYS[1] = {relay}:sch:<id>          the schedule (JSON)
-- KEYS[2] = {relay}:schs              the active schedules
-- KEYS[3] = {relay}:schinto:<target>  the schedules firing into the target
-- KEYS[4] = {relay}:schby:<setter>    the schedules the setter set for others
-- ARGV[1] = the schedule JSON
-- ARGV[2] = the schedule id
-- ARGV[3] = the limit into the target
-- ARGV[4] = the limit by the setter
-- ARGV[5] = set for another session (1|0)
local into = redis.call('SCARD', KEYS[3])
if into >= tonumber(ARGV[3]) then return {-1, into} end
if ARGV[5] == '1' then
  local by = redis.call('SCARD', KEYS[4])
  if by >= tonumber(ARGV[4]) then return {-2, by} end
  redis.call('SADD', KEYS[4], ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[2])
return {1, 0}
`)

// AddSchedule writes a new active schedule unless intoLimit schedules already
// fire into its target or (for another session) its setter already set byLimit.
func (s *Store) AddSchedule(ctx context.Context, sc *Schedule, intoLimit, byLimit int) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("add schedule %s: %w", sc.ID, err)
	}
	other := "0"
	if sc.Setter != sc.Target {
		other = "1"
	}
	res, err := addScheduleScript.Run(ctx, s.scr, []string{s.k("sch", sc.ID), s.k("schs"), s.k("schinto", sc.Target), s.k("schby", sc.Setter)},
		string(b), sc.ID, intoLimit, byLimit, other).Int64Slice()
	if err != nil {
		return fmt.Errorf("add schedule %s: %w", sc.ID, err)
	}
	switch res[0] {
	case -1:
		return &ErrLimit{Which: "into", Count: int(res[1])}
	case -2:
		return &ErrLimit{Which: "by", Count: int(res[1])}
	}
	return nil
}

// addAskScript is AddAsk's step.
var addAskScript = redis.NewScript(`
-- KEYS[1] = {relay}:ask:<id>           the ask (JSON)
-- KEYS[2] = {relay}:asksby:<asker>     the asker's asks by time (zset)
-- KEYS[3] = {relay}:asks:open          the open asks by time (zset)
-- KEYS[4] = {relay}:asksin:<session>   the open asks concerning the session
-- KEYS[5] = {relay}:asksopen:<asker>   the asker's open asks
-- ARGV[1] = the ask JSON
-- ARGV[2] = the ask id
-- ARGV[3] = its score (created, ms)
-- ARGV[4] = the asker's limit
-- ARGV[5] = the session's limit
-- ARGV[6] = the cutoff (ms): asks made before it leave the asker's index (their records expired, R18.5)
local mine = redis.call('SCARD', KEYS[5])
if mine >= tonumber(ARGV[4]) then return {-1, mine} end
local about = redis.call('SCARD', KEYS[4])
if about >= tonumber(ARGV[5]) then return {-2, about} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('SADD', KEYS[5], ARGV[2])
return {1, 0}
`)

// AddAsk writes a new pending ask unless its asker already has askerLimit
// open asks or the session it concerns sessionLimit.
func (s *Store) AddAsk(ctx context.Context, a *Ask, askerLimit, sessionLimit int) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("add ask %s: %w", a.ID, err)
	}
	res, err := addAskScript.Run(ctx, s.scr, []string{s.k("ask", a.ID), s.k("asksby", a.Asker), s.k("asks", "open"),
		s.k("asksin", a.Session), s.k("asksopen", a.Asker)},
		string(b), a.ID, ms(a.CreatedAt), askerLimit, sessionLimit, ms(a.CreatedAt.Add(-ClosedAskKeep-24*time.Hour))).Int64Slice()
	if err != nil {
		return fmt.Errorf("add ask %s: %w", a.ID, err)
	}
	switch res[0] {
	case -1:
		return &ErrLimit{Which: "asker", Count: int(res[1])}
	case -2:
		return &ErrLimit{Which: "session", Count: int(res[1])}
	}
	return nil
}

// addSubscriptionScript is AddSubscription's step.
var addSubscriptionScript = redis.NewScript(`
-- KEYS[1]  = {relay}:sub:<id>         the subscription (JSON)
-- KEYS[2]  = {relay}:subs:<watcher>   the watcher's active subscriptions
-- KEYS[3]  = {relay}:subsall          every active subscription
-- KEYS[4..] = {relay}:subidx:<sid>... the index sets naming it by its sessions ({relay}:subidx:all for all)
-- ARGV[1] = the subscription JSON
-- ARGV[2] = the subscription id
-- ARGV[3] = the watcher's limit
local n = redis.call('SCARD', KEYS[2])
if n >= tonumber(ARGV[3]) then return {-1, n} end
redis.call('SET', KEYS[1], ARGV[1])
for i = 2, #KEYS do redis.call('SADD', KEYS[i], ARGV[2]) end
return {1, 0}
`)

// AddSubscription writes a new active subscription unless its watcher
// already has limit active ones.
func (s *Store) AddSubscription(ctx context.Context, sub *Subscription, limit int) error {
	b, err := json.Marshal(sub)
	if err != nil {
		return fmt.Errorf("add subscription %s: %w", sub.ID, err)
	}
	keys := []string{s.subKey(sub.ID), s.k("subs", sub.Watcher), s.k("subsall")}
	keys = append(keys, s.subIndexKeys(sub)...)
	res, err := addSubscriptionScript.Run(ctx, s.scr, keys, string(b), sub.ID, limit).Int64Slice()
	if err != nil {
		return fmt.Errorf("add subscription %s: %w", sub.ID, err)
	}
	if res[0] < 0 {
		return &ErrLimit{Which: "watcher", Count: int(res[1])}
	}
	return nil
}

// takeLoopScript is TakeLoop's step.
var takeLoopScript = redis.NewScript(`
-- KEYS[1] = {relay}:loop:<sid>  the conversation's loop-protection count
-- ARGV[1] = the limit
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return {0, n} end
redis.call('INCR', KEYS[1])
return {1, n + 1}
`)

// TakeLoop counts one prompt to another agent (loop protection, R5.2.6) if
// the count is below limit; taken=false means the count is used up (the
// caller asks a card) and nothing was counted. n is the count after it.
func (s *Store) TakeLoop(ctx context.Context, sid string, limit int) (taken bool, n int, err error) {
	res, err := takeLoopScript.Run(ctx, s.scr, []string{s.k("loop", sid)}, limit).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("loop count of %s: %w", sid, err)
	}
	return res[0] == 1, int(res[1]), nil
}

// giveBackLoopScript is GiveBackLoop's step.
var giveBackLoopScript = redis.NewScript(`
-- KEYS[1] = {relay}:loop:<sid>  the conversation's loop-protection count
-- (no ARGV)
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 1
`)

// GiveBackLoop undoes a TakeLoop whose prompt was not sent after all.
func (s *Store) GiveBackLoop(ctx context.Context, sid string) error {
	return wrap(giveBackLoopScript.Run(ctx, s.scr, []string{s.k("loop", sid)}).Err(), "give back a loop prompt of %s", sid)
}
