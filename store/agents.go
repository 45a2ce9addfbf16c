package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// SetAgentSession stores the agent CLI's conversation id with the session
// (R17.2) and the provider it belongs to.
func (s *Store) SetAgentSession(ctx context.Context, sid, provider, id string) error {
	if err := s.rdb.HSet(ctx, s.sessKey(sid), "agentSession", id, "agentProvider", provider).Err(); err != nil {
		return fmt.Errorf("set agent session %s: %w", sid, err)
	}
	return nil
}

// ClearAgentSession forgets the agent CLI's conversation: the next turn
// starts a fresh one (a new folder, R17.2).
func (s *Store) ClearAgentSession(ctx context.Context, sid string) error {
	if err := s.rdb.HDel(ctx, s.sessKey(sid), "agentSession", "agentProvider").Err(); err != nil {
		return fmt.Errorf("clear agent session %s: %w", sid, err)
	}
	return nil
}

// AppendMessage appends a message to a session's conversation (activity
// lines of a running turn, R17.3).
func (s *Store) AppendMessage(ctx context.Context, sid string, m *Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("append message %s: %w", sid, err)
	}
	if err := s.rdb.RPush(ctx, s.msgsKey(sid), b).Err(); err != nil {
		return fmt.Errorf("append message %s: %w", sid, err)
	}
	return nil
}

// AppendActivity appends an activity line to a session's conversation and
// publishes "session:SID" for the owner's console, in one round trip (the
// 🛰️ line of each relay_tool call, R17.3, R19.3).
func (s *Store) AppendActivity(ctx context.Context, sid string, m *Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("append activity %s: %w", sid, err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.msgsKey(sid), b)
		p.Publish(ctx, s.NotifyChannel(), "session:"+sid)
		return nil
	})
	if err != nil {
		return fmt.Errorf("append activity %s: %w", sid, err)
	}
	return nil
}

// activityScan is how many of a conversation's last messages
// SetActivityOutcome looks through for its line (bounded work; the line was
// written moments before, during the same call).
const activityScan = 64

// setOutcomeScript is SetActivityOutcome's step.
var setOutcomeScript = redis.NewScript(`
-- KEYS[1] = {relay}:msgs:<sid>  the session's conversation (list of JSON messages)
-- ARGV[1] = the activity line as it was written (JSON)
-- ARGV[2] = the line with its outcome (JSON)
-- ARGV[3] = how many of the last messages to look through
-- ARGV[4] = the notify channel, ARGV[5] = its note ("session:SID")
local n = tonumber(ARGV[3])
local tail = redis.call('LRANGE', KEYS[1], -n, -1)
for i = #tail, 1, -1 do
  if tail[i] == ARGV[1] then
    redis.call('LSET', KEYS[1], i - 1 - #tail, ARGV[2])
    redis.call('PUBLISH', ARGV[4], ARGV[5])
    return 1
  end
end
return 0
`)

// SetActivityOutcome adds a relay_tool call's outcome to its activity line m,
// appended by AppendActivity, among the conversation's last activityScan
// messages, and publishes "session:SID" (R23.3); false when the line is not
// among them (nothing is changed). m is left as it was written.
func (s *Store) SetActivityOutcome(ctx context.Context, sid string, m *Message, outcome string) (bool, error) {
	was, err := json.Marshal(m)
	if err != nil {
		return false, fmt.Errorf("set activity outcome %s: %w", sid, err)
	}
	with := *m
	with.Outcome = outcome
	now, err := json.Marshal(&with)
	if err != nil {
		return false, fmt.Errorf("set activity outcome %s: %w", sid, err)
	}
	n, err := setOutcomeScript.Run(ctx, s.scr, []string{s.msgsKey(sid)}, was, now, activityScan, s.NotifyChannel(), "session:"+sid).Int()
	return n == 1, wrap(err, "set activity outcome %s", sid)
}

// SetUsagePaused marks a provider paused by a usage or rate limit (R7.3,
// R17.3) with the reason; "" clears it (a turn succeeded again).
func (s *Store) SetUsagePaused(ctx context.Context, provider, reason string, at time.Time) error {
	k := s.k("usage", provider)
	if reason == "" {
		return wrap(s.rdb.HDel(ctx, k, "paused", "pausedAt").Err(), "clear usage pause of %s", provider)
	}
	return wrap(s.rdb.HSet(ctx, k, "paused", reason, "pausedAt", strconv.FormatInt(at.UnixMilli(), 10)).Err(), "pause usage of %s", provider)
}

// UsagePaused reads a provider's pause: its reason ("" when not paused) and time.
func (s *Store) UsagePaused(ctx context.Context, provider string) (string, time.Time, error) {
	vals, err := s.rdb.HMGet(ctx, s.k("usage", provider), "paused", "pausedAt").Result()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("usage pause of %s: %w", provider, err)
	}
	reason, _ := vals[0].(string)
	at, _ := vals[1].(string)
	return reason, fromMS(atoi64(at)), nil
}

// monthKey is a provider's counters of one calendar month (UTC, "2006-01"),
// kept for a spending cap (R7.8); they expire two months later.
func (s *Store) monthKey(provider, month string) string {
	return s.k("usage", provider, "m", month)
}

// AddMonthUsage adds a done turn's tokens and cost (micro-dollars) to a
// provider's counters of the month (R7.8).
func (s *Store) AddMonthUsage(ctx context.Context, provider, month string, tokens, microUSD int64) error {
	k := s.monthKey(provider, month)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k, "tokens", tokens)
		p.HIncrBy(ctx, k, "costMicroUSD", microUSD)
		p.Expire(ctx, k, 63*24*time.Hour)
		return nil
	})
	if err != nil {
		return fmt.Errorf("add month usage %s: %w", provider, err)
	}
	return nil
}

// MonthUsage reads a provider's tokens and cost (micro-dollars) of a month.
func (s *Store) MonthUsage(ctx context.Context, provider, month string) (tokens, microUSD int64, err error) {
	vals, err := s.rdb.HMGet(ctx, s.monthKey(provider, month), "tokens", "costMicroUSD").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("month usage %s: %w", provider, err)
	}
	t, _ := vals[0].(string)
	c, _ := vals[1].(string)
	return atoi64(t), atoi64(c), nil
}
