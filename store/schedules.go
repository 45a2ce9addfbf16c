package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Schedule is a prompt the relay queues later (R9.1).
type Schedule struct {
	ID           string    `json:"id"`
	Setter       string    `json:"setter"` // the conversation that set it
	Target       string    `json:"target"` // the conversation it fires into
	Title        string    `json:"title"`
	Text         string    `json:"text"`
	First        time.Time `json:"first"` // the grid's first time
	At           time.Time `json:"at,omitzero"`
	EveryMinutes int       `json:"everyMinutes,omitempty"`
	Origin       Origin    `json:"origin"`
	CreatedAt    time.Time `json:"createdAt"`
	NextFireAt   time.Time `json:"nextFireAt,omitzero"`
	LastFiredAt  time.Time `json:"lastFiredAt,omitzero"`
	FiredCount   int       `json:"firedCount"`
	SkippedCount int       `json:"skippedCount"`
	HeldSince    time.Time `json:"heldSince,omitzero"`
	LastTurn     string    `json:"lastTurn,omitempty"`
	EndedAt      time.Time `json:"endedAt,omitzero"`
	EndReason    string    `json:"endReason,omitempty"`
}

// Once reports whether the schedule fires one time only.
func (s *Schedule) Once() bool { return s.EveryMinutes == 0 }

// SaveSchedule writes a schedule and its indexes.
func (s *Store) SaveSchedule(ctx context.Context, sc *Schedule) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("save schedule %s: %w", sc.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k("sch", sc.ID), b, 0)
		if sc.EndReason == "" {
			p.SAdd(ctx, s.k("schs"), sc.ID)
			p.SAdd(ctx, s.k("schinto", sc.Target), sc.ID)
			if sc.Setter != sc.Target {
				p.SAdd(ctx, s.k("schby", sc.Setter), sc.ID)
			}
		} else {
			p.SRem(ctx, s.k("schs"), sc.ID)
			p.SRem(ctx, s.k("schinto", sc.Target), sc.ID)
			p.SRem(ctx, s.k("schby", sc.Setter), sc.ID)
			for _, who := range []string{sc.Setter, sc.Target} {
				p.ZAdd(ctx, s.k("schended", who), redis.Z{Score: float64(ms(sc.EndedAt)), Member: sc.ID})
			}
			p.Expire(ctx, s.k("sch", sc.ID), 8*24*time.Hour)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save schedule %s: %w", sc.ID, err)
	}
	return nil
}

// GetSchedule reads a schedule.
func (s *Store) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	return getJSON[Schedule](ctx, s.rdb, s.k("sch", id))
}

func (s *Store) schedulesByIDs(ctx context.Context, ids []string) ([]*Schedule, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.k("sch", id)
	}
	out, err := mgetJSON[Schedule](ctx, s.rdb, keys)
	if err != nil {
		return nil, fmt.Errorf("read %d schedules: %w", len(ids), err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// SchedulesInto lists the active schedules firing into a conversation.
func (s *Store) SchedulesInto(ctx context.Context, sid string) ([]*Schedule, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("schinto", sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("schedules into %s: %w", sid, err)
	}
	return s.schedulesByIDs(ctx, ids)
}

// SchedulesBy lists the active schedules a conversation set for other sessions.
func (s *Store) SchedulesBy(ctx context.Context, sid string) ([]*Schedule, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("schby", sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("schedules by %s: %w", sid, err)
	}
	return s.schedulesByIDs(ctx, ids)
}

// EndedSchedules lists schedules of a conversation (either side) ended since `since`.
func (s *Store) EndedSchedules(ctx context.Context, sid string, since time.Time) ([]*Schedule, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.k("schended", sid), &redis.ZRangeBy{Min: fmt.Sprint(ms(since)), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("ended schedules of %s: %w", sid, err)
	}
	return s.schedulesByIDs(ctx, ids)
}

// ActiveSchedules lists every active schedule (recovery, owner list).
func (s *Store) ActiveSchedules(ctx context.Context) ([]*Schedule, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("schs")).Result()
	if err != nil {
		return nil, fmt.Errorf("active schedules: %w", err)
	}
	return s.schedulesByIDs(ctx, ids)
}

// Ask is a non-blocking question to the owner (R10.1).
type Ask struct {
	ID             string    `json:"id"`
	Asker          string    `json:"asker"`   // the conversation that asked
	Session        string    `json:"session"` // the session it concerns (the asker's own without `session`)
	Question       string    `json:"question"`
	Options        []string  `json:"options,omitempty"`
	Recommendation string    `json:"recommendation,omitempty"`
	Detail         string    `json:"detail,omitempty"`
	Status         string    `json:"status"` // pending | answered | dismissed | withdrawn
	Answer         string    `json:"answer,omitempty"`
	Choice         string    `json:"choice,omitempty"`
	Via            string    `json:"via,omitempty"`
	CreatedAt      time.Time `json:"createdAt"`
	EndedAt        time.Time `json:"endedAt,omitzero"`
}

// ClosedAskKeep is how long an answered, dismissed or withdrawn ask is kept (R18.5).
const ClosedAskKeep = 7 * 24 * time.Hour

// GetAsk reads an ask.
func (s *Store) GetAsk(ctx context.Context, id string) (*Ask, error) {
	return getJSON[Ask](ctx, s.rdb, s.k("ask", id))
}

// closeAskScript is CloseAsk's step.
var closeAskScript = redis.NewScript(`
-- KEYS[1] = {relay}:ask:<id>          the ask (JSON)
-- KEYS[2] = {relay}:asks:open         the open asks by time (zset)
-- KEYS[3] = {relay}:asksin:<session>  the open asks concerning its session
-- KEYS[4] = {relay}:asksopen:<asker>  the asker's open asks
-- ARGV[1] = the closed record (JSON)
-- ARGV[2] = the ask id
-- ARGV[3] = how long the closed record is kept (ms)
local v = redis.call('GET', KEYS[1])
if not v then return -1 end
local a = cjson.decode(v)
if a.status ~= 'pending' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('SREM', KEYS[3], ARGV[2])
redis.call('SREM', KEYS[4], ARGV[2])
return 1
`)

// CloseAsk ends a pending ask with its final record, kept ClosedAskKeep;
// false when it was no longer pending.
func (s *Store) CloseAsk(ctx context.Context, a *Ask) (bool, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return false, fmt.Errorf("close ask %s: %w", a.ID, err)
	}
	n, err := closeAskScript.Run(ctx, s.scr, []string{s.k("ask", a.ID), s.k("asks", "open"), s.k("asksin", a.Session), s.k("asksopen", a.Asker)},
		string(b), a.ID, ClosedAskKeep.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("close ask %s: %w", a.ID, err)
	}
	if n < 0 {
		return false, ErrNotFound
	}
	return n == 1, nil
}

func (s *Store) asksByIDs(ctx context.Context, ids []string) ([]*Ask, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.k("ask", id)
	}
	out, err := mgetJSON[Ask](ctx, s.rdb, keys)
	if err != nil {
		return nil, fmt.Errorf("read %d asks: %w", len(ids), err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// OpenAsks lists every open ask (the owner's inbox), oldest first.
func (s *Store) OpenAsks(ctx context.Context) ([]*Ask, error) {
	ids, err := s.rdb.ZRange(ctx, s.k("asks", "open"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("open asks: %w", err)
	}
	return s.asksByIDs(ctx, ids)
}

// AsksBy lists the asks a conversation made since `since`.
func (s *Store) AsksBy(ctx context.Context, asker string, since time.Time) ([]*Ask, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.k("asksby", asker), &redis.ZRangeBy{Min: fmt.Sprint(ms(since)), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("asks by %s: %w", asker, err)
	}
	open, err := s.rdb.SMembers(ctx, s.k("asksopen", asker)).Result()
	if err != nil {
		return nil, fmt.Errorf("open asks by %s: %w", asker, err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	for _, id := range open {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	return s.asksByIDs(ctx, ids)
}

// AsksIn lists the open asks concerning a session.
func (s *Store) AsksIn(ctx context.Context, sid string) ([]*Ask, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("asksin", sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("asks about %s: %w", sid, err)
	}
	return s.asksByIDs(ctx, ids)
}

// OpenAskCounts returns the open asks of an asking conversation and of a concerned session.
func (s *Store) OpenAskCounts(ctx context.Context, asker, sid string) (int, int, error) {
	var a, b *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		a = p.SCard(ctx, s.k("asksopen", asker))
		b = p.SCard(ctx, s.k("asksin", sid))
		return nil
	})
	return int(a.Val()), int(b.Val()), wrap(err, "open asks of %s and into %s", asker, sid)
}
