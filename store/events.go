package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is something that happened in a session (R8.1). It is appended to
// the relay's event stream and fanned out to subscriptions.
type Event struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Relay      string    `json:"relay,omitempty"` // set for a paired relay's events
	Session    string    `json:"session,omitempty"`
	Title      string    `json:"title,omitempty"`
	At         time.Time `json:"at"`
	Status     string    `json:"status,omitempty"` // turn_end: done | stopped | error
	Text       string    `json:"text,omitempty"`   // reply start, error message, question, description
	TaskID     string    `json:"taskId,omitempty"`
	Exit       *int      `json:"exit,omitempty"`
	QuestionID string    `json:"questionId,omitempty"`
	Answer     string    `json:"answer,omitempty"`
	Choice     string    `json:"choice,omitempty"`
	Dismissed  bool      `json:"dismissed,omitempty"`
	Via        string    `json:"via,omitempty"`
	Minutes    int       `json:"minutes,omitempty"`
	Turn       string    `json:"turn,omitempty"`    // the turn a turn_end ends (no-echo rule)
	Sub        string    `json:"sub,omitempty"`     // only for this subscription (stalled, all_idle, heartbeat)
	Watcher    string    `json:"watcher,omitempty"` // only for this conversation (question_answered of an ask)
	Watched    int       `json:"watched,omitempty"`
	Running    int       `json:"running,omitempty"`
	Idle       int       `json:"idle,omitempty"`
	Replayed   bool      `json:"replayed,omitempty"`
}

// Quiet is a subscription's quiet_hours as given.
type Quiet struct {
	From string `json:"from"`
	To   string `json:"to"`
	TZ   string `json:"tz"`
}

// Subscription is a conversation watching sessions (R8.4).
type Subscription struct {
	ID               string    `json:"id"`
	Watcher          string    `json:"watcher"`
	All              bool      `json:"all"`
	Sessions         []string  `json:"sessions,omitempty"`
	Exclude          []string  `json:"exclude,omitempty"`
	Events           []string  `json:"events"`
	Once             bool      `json:"once"`
	Match            string    `json:"match,omitempty"`
	StalledMinutes   int       `json:"stalledMinutes"`
	HeartbeatMinutes int       `json:"heartbeatMinutes,omitempty"`
	DigestMinutes    int       `json:"digestMinutes,omitempty"`
	Quiet            *Quiet    `json:"quietHours,omitempty"`
	CreatedAt        time.Time `json:"createdAt"`
	EndedAt          time.Time `json:"endedAt,omitzero"`
	EndReason        string    `json:"endReason,omitempty"`
	LastDigestAt     time.Time `json:"lastDigestAt,omitzero"`
	// A mirror of a subscription that lives on a paired relay (R8.20): the
	// pairing's local name, the stream cursor read so far, and since when the
	// link is down (zero while it answers).
	Relay      string    `json:"relay,omitempty"`
	Cursor     string    `json:"cursor,omitempty"`
	LinkDownAt time.Time `json:"linkDownAt,omitzero"`
	// Titles are a mirror's sessions' titles as its relay named them (the
	// owner's view here shows them; this relay has no such sessions).
	Titles []string `json:"titles,omitempty"`
}

// AppendEvent adds an event to the relay's stream (kept to about the last
// 10,000) and reports, in the same round trip, whether any subscription might
// take it (one naming its session, an "all" one, or an event addressed to a
// subscription or a conversation).
func (s *Store) AppendEvent(ctx context.Context, ev *Event) (bool, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("append event %s: %w", ev.ID, err)
	}
	var named, all *redis.IntCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.k("events"), MaxLen: 10000, Approx: true, Values: []any{"e", b}})
		named = p.SCard(ctx, s.k("subidx", ev.Session))
		all = p.SCard(ctx, s.k("subidx", "all"))
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("append event %s: %w", ev.ID, err)
	}
	return ev.Sub != "" || ev.Watcher != "" || named.Val() > 0 || all.Val() > 0, nil
}

// AppendSubEvent keeps an event in a subscription's own stream (replay for paired relays:
// the last `keep` entries, for ttl).
func (s *Store) AppendSubEvent(ctx context.Context, sub string, ev *Event, keep int64, ttl time.Duration) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("append event to subscription %s: %w", sub, err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.k("subev", sub), MaxLen: keep, Approx: false, Values: []any{"e", b}})
		p.Expire(ctx, s.k("subev", sub), ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("append event to subscription %s: %w", sub, err)
	}
	return nil
}

// SubEvents reads a subscription's stream after a cursor ("0" = from the start).
func (s *Store) SubEvents(ctx context.Context, sub, after string, max int64) ([]Event, string, error) {
	start := "(" + after // after the cursor
	if after == "" || after == "0" {
		start = "-"
	}
	res, err := s.rdb.XRangeN(ctx, s.k("subev", sub), start, "+", max).Result()
	if err != nil {
		return nil, after, fmt.Errorf("events of subscription %s: %w", sub, err)
	}
	out := make([]Event, 0, len(res))
	last := after
	for _, m := range res {
		var ev Event
		if v, ok := m.Values["e"].(string); ok && json.Unmarshal([]byte(v), &ev) == nil {
			out = append(out, ev)
		}
		last = m.ID
	}
	return out, last, nil
}

// Subscriptions.

func (s *Store) subKey(id string) string { return s.k("sub", id) }

// subIndexKeys are the index sets that name a subscription by its sessions.
func (s *Store) subIndexKeys(sub *Subscription) []string {
	if sub.All {
		return []string{s.k("subidx", "all")}
	}
	idx := make([]string, 0, len(sub.Sessions))
	for _, sid := range sub.Sessions {
		idx = append(idx, s.k("subidx", sid))
	}
	return idx
}

// SaveSubscription writes a subscription and its indexes (active or ended).
func (s *Store) SaveSubscription(ctx context.Context, sub *Subscription) error {
	b, err := json.Marshal(sub)
	if err != nil {
		return fmt.Errorf("save subscription %s: %w", sub.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.saveSubscriptionIn(ctx, p, sub, b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("save subscription %s: %w", sub.ID, err)
	}
	return nil
}

// SaveLiveSubscription is SaveSubscription for a subscription read earlier
// and still active then (a paired relay's poller saving its cursor): it
// writes only while the stored record is there and has not ended, so an end
// written meanwhile (the owner unpairing, unsubscribing) is not undone by a
// stale copy. It reports whether it wrote; false also when another write
// came between (the caller's next read sees it).
func (s *Store) SaveLiveSubscription(ctx context.Context, sub *Subscription) (bool, error) {
	b, err := json.Marshal(sub)
	if err != nil {
		return false, fmt.Errorf("save live subscription %s: %w", sub.ID, err)
	}
	key := s.subKey(sub.ID)
	saved := false
	err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := storedSub(ctx, tx, key)
		if err != nil || cur == nil || cur.EndReason != "" {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			s.saveSubscriptionIn(ctx, p, sub, b)
			return nil
		})
		saved = err == nil
		return err
	}, key)
	if errors.Is(err, redis.TxFailedErr) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("save live subscription %s: %w", sub.ID, err)
	}
	return saved, nil
}

// EndSubscription ends sub with reason at at, on the record as stored (R8.19):
// an end written meanwhile stays, with its reason (the first one), and what
// others wrote meanwhile (a digest's lastDigestAt, a poller's cursor) is
// kept. It is a WATCH transaction tried again while writes come between; a
// record gone meanwhile is written back ended. sub becomes the record as it
// is now; ended reports whether this call ended it.
func (s *Store) EndSubscription(ctx context.Context, sub *Subscription, reason string, at time.Time) (ended bool, err error) {
	key := s.subKey(sub.ID)
	end := func(tx *redis.Tx) error {
		stored, err := storedSub(ctx, tx, key)
		if err != nil {
			return err
		}
		cur := *sub
		if stored != nil {
			cur = *stored
		}
		if cur.EndReason != "" {
			*sub, ended = cur, false
			return nil
		}
		cur.EndReason, cur.EndedAt = reason, at
		b, err := json.Marshal(&cur)
		if err != nil {
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			s.saveSubscriptionIn(ctx, p, &cur, b)
			return nil
		}); err != nil {
			return err
		}
		*sub, ended = cur, true
		return nil
	}
	return ended, wrap(s.watchRetried(ctx, end, key), "end subscription %s", sub.ID)
}

// storedSub reads the subscription at key inside a WATCH transaction (nil
// when there is none), for the writes that must see it as stored.
func storedSub(ctx context.Context, tx *redis.Tx, key string) (*Subscription, error) {
	raw, err := tx.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cur Subscription
	if err := json.Unmarshal(raw, &cur); err != nil {
		return nil, err
	}
	return &cur, nil
}

// saveSubscriptionIn queues SaveSubscription's writes (b is sub's JSON) on p.
func (s *Store) saveSubscriptionIn(ctx context.Context, p redis.Pipeliner, sub *Subscription, b []byte) {
	p.Set(ctx, s.subKey(sub.ID), b, 0)
	if sub.Relay != "" { // a mirror: polled, never fanned out to
		if sub.EndReason == "" {
			p.SAdd(ctx, s.k("rsubs"), sub.ID)
		} else {
			p.SRem(ctx, s.k("rsubs"), sub.ID)
			p.Expire(ctx, s.subKey(sub.ID), 8*24*time.Hour)
			// The owner's view of the watcher lists it as ended for an hour (R8.23).
			p.ZAdd(ctx, s.k("rsubsended", sub.Watcher), redis.Z{Score: float64(ms(sub.EndedAt)), Member: sub.ID})
			p.Expire(ctx, s.k("rsubsended", sub.Watcher), 8*24*time.Hour)
		}
		return
	}
	idx := s.subIndexKeys(sub)
	if sub.EndReason == "" {
		p.SAdd(ctx, s.k("subs", sub.Watcher), sub.ID)
		p.SAdd(ctx, s.k("subsall"), sub.ID)
		for _, k := range idx {
			p.SAdd(ctx, k, sub.ID)
		}
	} else {
		p.SRem(ctx, s.k("subs", sub.Watcher), sub.ID)
		p.SRem(ctx, s.k("subsall"), sub.ID)
		for _, k := range idx {
			p.SRem(ctx, k, sub.ID)
		}
		p.ZAdd(ctx, s.k("subsended", sub.Watcher), redis.Z{Score: float64(ms(sub.EndedAt)), Member: sub.ID})
		p.Expire(ctx, s.subKey(sub.ID), 8*24*time.Hour)
	}
}

// GetSubscription reads one subscription.
func (s *Store) GetSubscription(ctx context.Context, id string) (*Subscription, error) {
	return getJSON[Subscription](ctx, s.rdb, s.subKey(id))
}

func (s *Store) getSubs(ctx context.Context, ids []string) ([]*Subscription, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.subKey(id)
	}
	out, err := mgetJSON[Subscription](ctx, s.rdb, keys)
	if err != nil {
		return nil, fmt.Errorf("read %d subscriptions: %w", len(ids), err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// WatcherSubscriptions lists a conversation's active subscriptions, oldest first.
func (s *Store) WatcherSubscriptions(ctx context.Context, watcher string) ([]*Subscription, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("subs", watcher)).Result()
	if err != nil {
		return nil, fmt.Errorf("subscriptions of %s: %w", watcher, err)
	}
	return s.getSubs(ctx, ids)
}

// EndedSubscriptions lists a conversation's subscriptions ended since `since`.
func (s *Store) EndedSubscriptions(ctx context.Context, watcher string, since time.Time) ([]*Subscription, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.k("subsended", watcher), &redis.ZRangeBy{Min: fmt.Sprint(ms(since)), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("ended subscriptions of %s: %w", watcher, err)
	}
	return s.getSubs(ctx, ids)
}

// SubscriptionsOf lists the active subscriptions that watch a session: those
// naming it and the "all" ones (fan-out reads only the matching ones).
func (s *Store) SubscriptionsOf(ctx context.Context, sid string) ([]*Subscription, error) {
	ids, err := s.rdb.SUnion(ctx, s.k("subidx", sid), s.k("subidx", "all")).Result()
	if err != nil {
		return nil, fmt.Errorf("subscriptions watching %s: %w", sid, err)
	}
	return s.getSubs(ctx, ids)
}

// AllScopeSubscriptions lists the active subscriptions on sessions ["all"].
func (s *Store) AllScopeSubscriptions(ctx context.Context) ([]*Subscription, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("subidx", "all")).Result()
	if err != nil {
		return nil, fmt.Errorf("subscriptions to all sessions: %w", err)
	}
	return s.getSubs(ctx, ids)
}

// AllSubscriptions lists every active subscription (stall scan, heartbeats).
func (s *Store) AllSubscriptions(ctx context.Context) ([]*Subscription, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("subsall")).Result()
	if err != nil {
		return nil, fmt.Errorf("all subscriptions: %w", err)
	}
	return s.getSubs(ctx, ids)
}

// SetLastDigest records when sub's last digest went out (R8.8), on the
// record as it is stored now: sub is the caller's copy, read before the
// digest was delivered, and an end written meanwhile (the owner
// unsubscribing, archiving the watcher) must stay. Only lastDigestAt is
// written, in a WATCH transaction tried again while other writes come
// between; a record gone meanwhile is left gone.
func (s *Store) SetLastDigest(ctx context.Context, sub *Subscription, at time.Time) error {
	sub.LastDigestAt = at
	key := s.subKey(sub.ID)
	write := func(tx *redis.Tx) error {
		cur, err := storedSub(ctx, tx, key)
		if err != nil || cur == nil {
			return err
		}
		cur.LastDigestAt = at
		b, err := json.Marshal(cur)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, b, redis.KeepTTL)
			return nil
		})
		return err
	}
	return wrap(s.watchRetried(ctx, write, key), "last digest of subscription %s", sub.ID)
}

// watchRetried runs fn in a WATCH transaction on key, again while other
// writes to key come between its read and its write (at most watchTries).
func (s *Store) watchRetried(ctx context.Context, fn func(*redis.Tx) error, key string) error {
	var err error
	for range watchTries {
		if err = s.rdb.Watch(ctx, fn, key); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	return err
}

const watchTries = 10

// Held events of a subscription (digest, quiet hours).

// HoldEvent keeps an event for a subscription until its due time; it returns
// the due time in force (the earlier one when one was already set) and
// whether a release job must be scheduled for it.
func (s *Store) HoldEvent(ctx context.Context, sub string, ev *Event, due time.Time) (time.Time, bool, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return due, false, fmt.Errorf("hold event %s for %s: %w", ev.ID, sub, err)
	}
	var set *redis.BoolCmd
	var cur *redis.StringCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.k("held", sub), b)
		set = p.SetNX(ctx, s.k("due", sub), ms(due), 0)
		cur = p.Get(ctx, s.k("due", sub))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return due, false, fmt.Errorf("hold event %s for %s: %w", ev.ID, sub, err)
	}
	return fromMS(atoi64(cur.Val())), set.Val(), nil
}

// moveHeldScript is MoveHeld's step.
var moveHeldScript = redis.NewScript(`
-- KEYS[1] = {relay}:held:<from>  the first subscription's held events
-- KEYS[2] = {relay}:due:<from>   their due time
-- KEYS[3] = {relay}:held:<to>    the second subscription's held events
-- KEYS[4] = {relay}:due:<to>     their due time
-- (no ARGV)
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('RENAME', KEYS[1], KEYS[3]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[4]) end
return redis.call('GET', KEYS[4])
`)

// MoveHeld gives a subscription's held events and their due time to another
// (transfer_subscriptions); it returns the due time, zero when nothing is held.
func (s *Store) MoveHeld(ctx context.Context, from, to string) (time.Time, error) {
	v, err := moveHeldScript.Run(ctx, s.scr, []string{s.k("held", from), s.k("due", from), s.k("held", to), s.k("due", to)}).Text()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("move held events of %s to %s: %w", from, to, err)
	}
	return fromMS(atoi64(v)), nil
}

// HeldInfo returns how many events a subscription holds and when they are due.
func (s *Store) HeldInfo(ctx context.Context, sub string) (int, time.Time, error) {
	var n *redis.IntCmd
	var due *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.LLen(ctx, s.k("held", sub))
		due = p.Get(ctx, s.k("due", sub))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, time.Time{}, fmt.Errorf("held events of %s: %w", sub, err)
	}
	if n.Val() == 0 {
		return 0, time.Time{}, nil
	}
	return int(n.Val()), fromMS(atoi64(due.Val())), nil
}

// takeHeldScript is TakeHeld's step.
var takeHeldScript = redis.NewScript(`
-- KEYS[1] = {relay}:held:<sub>  the subscription's held events
-- KEYS[2] = {relay}:due:<sub>   their due time (ms)
-- ARGV[1] = now (ms)
local due = redis.call('GET', KEYS[2])
if not due then return {} end
if tonumber(due) > tonumber(ARGV[1]) then return {due} end
local items = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2])
table.insert(items, 1, 'ok')
return items
`)

// TakeHeld takes a subscription's held events when they are due at now. It
// returns (nil, due) when the due time lies ahead (a release job ran early).
func (s *Store) TakeHeld(ctx context.Context, sub string, now time.Time) ([]Event, time.Time, error) {
	res, err := takeHeldScript.Run(ctx, s.scr, []string{s.k("held", sub), s.k("due", sub)}, ms(now)).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, time.Time{}, fmt.Errorf("take held events of %s: %w", sub, err)
	}
	if len(res) == 0 {
		return nil, time.Time{}, nil
	}
	if res[0] != "ok" {
		return nil, fromMS(atoi64(res[0])), nil
	}
	out := make([]Event, 0, len(res)-1)
	for _, r := range res[1:] {
		var ev Event
		if json.Unmarshal([]byte(r), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out, time.Time{}, nil
}

// HeldTotal counts held events over all subscriptions (a gauge; one pipeline).
func (s *Store) HeldTotal(ctx context.Context) (int64, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("subsall")).Result()
	if err != nil || len(ids) == 0 {
		return 0, wrap(err, "count held events")
	}
	cmds := make([]*redis.IntCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.LLen(ctx, s.k("held", id))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count held events: %w", err)
	}
	var total int64
	for _, c := range cmds {
		total += c.Val()
	}
	return total, nil
}

// Watcher delivery: a buffer per watching conversation (coalescing window),
// delivered-event ids (each event once per watcher), wakes and the wake-limit buffer.

// Batch is a run of events delivered together under one heading.
type Batch struct {
	Kind   string  `json:"kind"` // plain | digest | quiet | summary
	Sub    string  `json:"sub,omitempty"`
	Every  int     `json:"every,omitempty"` // digest minutes
	Window string  `json:"window,omitempty"`
	Events []Event `json:"events"`
	Urgent bool    `json:"urgent,omitempty"`
}

// MarkDelivered records that an event reached a watcher; false when it already had.
func (s *Store) MarkDelivered(ctx context.Context, watcher, eventID string) (bool, error) {
	var n *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.SAdd(ctx, s.k("dlv", watcher), eventID)
		p.Expire(ctx, s.k("dlv", watcher), 8*24*time.Hour)
		return nil
	})
	return n.Val() == 1, wrap(err, "mark event %s delivered to %s", eventID, watcher)
}

// BufferGroup adds a group to a watcher's buffer; when no window is open it
// opens one ending at windowEnd and returns true (the caller schedules the flush).
func (s *Store) BufferGroup(ctx context.Context, watcher string, g Batch, windowEnd time.Time) (bool, time.Time, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("buffer a group for %s: %w", watcher, err)
	}
	var set *redis.BoolCmd
	var cur *redis.StringCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.k("buf", watcher), b)
		set = p.SetNX(ctx, s.k("win", watcher), ms(windowEnd), 0)
		cur = p.Get(ctx, s.k("win", watcher))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, time.Time{}, fmt.Errorf("buffer a group for %s: %w", watcher, err)
	}
	return set.Val(), fromMS(atoi64(cur.Val())), nil
}

// takeBufScript is TakeBuffer's step, and TakeSummary's.
var takeBufScript = redis.NewScript(`
-- KEYS[1] = {relay}:buf:<watcher>  the watcher's buffered groups (TakeSummary: {relay}:wl:<watcher>)
-- KEYS[2] = {relay}:win:<watcher>  the open window's end (TakeSummary: {relay}:wlnext:<watcher>)
-- ARGV[1] = the window's end (ms; '' = take now)
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return {} end
local items = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2])
return items
`)

// TakeBuffer takes a watcher's buffered groups; window "" takes them now
// (urgent), else only if that window is still the open one.
func (s *Store) TakeBuffer(ctx context.Context, watcher string, window time.Time) ([]Batch, error) {
	w := ""
	if !window.IsZero() {
		w = fmt.Sprint(ms(window))
	}
	res, err := takeBufScript.Run(ctx, s.scr, []string{s.k("buf", watcher), s.k("win", watcher)}, w).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("take the buffer of %s: %w", watcher, err)
	}
	return decodeGroups(res), nil
}

func decodeGroups(res []string) []Batch {
	out := make([]Batch, 0, len(res))
	for _, r := range res {
		var g Batch
		if json.Unmarshal([]byte(r), &g) == nil {
			out = append(out, g)
		}
	}
	return out
}

// Wake records one wake of a watcher and returns the wakes in the last hour (before this one).
func (s *Store) Wakes(ctx context.Context, watcher string, now time.Time) (int, error) {
	k := s.k("wakes", watcher)
	var n *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, k, "-inf", fmt.Sprint(ms(now.Add(-time.Hour))))
		n = p.ZCard(ctx, k)
		return nil
	})
	return int(n.Val()), wrap(err, "wakes of %s", watcher)
}

// AddWake records a wake at now.
func (s *Store) AddWake(ctx context.Context, watcher string, now time.Time) error {
	k := s.k("wakes", watcher)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(ms(now)), Member: NewID(6)})
		p.Expire(ctx, k, 2*time.Hour)
		return nil
	})
	if err != nil {
		return fmt.Errorf("add a wake of %s: %w", watcher, err)
	}
	return nil
}

// HoldForSummary keeps groups for the next wake-limit summary; it returns
// true when no summary was due yet (the caller schedules one at `at`).
func (s *Store) HoldForSummary(ctx context.Context, watcher string, gs []Batch, at time.Time) (bool, time.Time, error) {
	var set *redis.BoolCmd
	var cur *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range gs {
			b, _ := json.Marshal(g)
			p.RPush(ctx, s.k("wl", watcher), b)
		}
		set = p.SetNX(ctx, s.k("wlnext", watcher), ms(at), 0)
		cur = p.Get(ctx, s.k("wlnext", watcher))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, time.Time{}, fmt.Errorf("hold for the summary of %s: %w", watcher, err)
	}
	return set.Val(), fromMS(atoi64(cur.Val())), nil
}

// TakeSummary takes the groups held by the wake limit (and clears the due time).
func (s *Store) TakeSummary(ctx context.Context, watcher string) ([]Batch, error) {
	res, err := takeBufScript.Run(ctx, s.scr, []string{s.k("wl", watcher), s.k("wlnext", watcher)}, "").StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("take the summary of %s: %w", watcher, err)
	}
	return decodeGroups(res), nil
}

// SummaryDue returns when the next wake-limit summary is due (zero when none).
func (s *Store) SummaryDue(ctx context.Context, watcher string) (time.Time, error) {
	v, err := s.rdb.Get(ctx, s.k("wlnext", watcher)).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	return fromMS(atoi64(v)), wrap(err, "summary due of %s", watcher)
}

// No-echo (R8.18): a prompt's caller waiting on its reply.

// SetWaiting marks that the caller is waiting on a turn's reply (for ttl).
func (s *Store) SetWaiting(ctx context.Context, turn string, ttl time.Duration) error {
	return wrap(s.rdb.Set(ctx, s.k("waiting", turn), "1", ttl).Err(), "set waiting on turn %s", turn)
}

// Waiting reports whether the caller still waits on a turn.
func (s *Store) Waiting(ctx context.Context, turn string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.k("waiting", turn)).Result()
	return n == 1, wrap(err, "waiting on turn %s", turn)
}

// HoldEcho keeps a turn_end for its waiting caller until the wait ends.
func (s *Store) HoldEcho(ctx context.Context, turn string, g Batch, watcher string) error {
	b, _ := json.Marshal(struct {
		Watcher string `json:"watcher"`
		Batch   Batch  `json:"group"`
	}{watcher, g})
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.k("echo", turn), b)
		p.Expire(ctx, s.k("echo", turn), 2*time.Hour)
		return nil
	})
	if err != nil {
		return fmt.Errorf("hold the echo of %s: %w", turn, err)
	}
	return nil
}

// Echo outcomes of [Store.HoldEchoIfWaiting].
const (
	EchoSeen    = "seen"    // the caller received the reply: drop the turn_end
	EchoHeld    = "held"    // the caller still waits: kept until the wait ends
	EchoDeliver = "deliver" // neither: deliver it as any event
)

// holdEchoScript is HoldEchoIfWaiting's step.
var holdEchoScript = redis.NewScript(`
-- KEYS[1] = {relay}:turn:<id>     the turn hash
-- KEYS[2] = {relay}:waiting:<id>  the caller's wait on the turn
-- KEYS[3] = {relay}:echo:<id>     the echoes held while it waits
-- ARGV[1] = the held group (JSON)
if redis.call('HGET', KEYS[1], 'waited') == '1' then return 'seen' end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('PEXPIRE', KEYS[3], 7200000)
  return 'held'
end
return 'deliver'
`)

// HoldEchoIfWaiting decides a turn_end for the turn's own caller (no echo,
// R8.18) in one step, so that a wait ending at the same moment
// ([Store.SeenEndWaiting]) cannot slip between the reads: the reply already
// seen (EchoSeen), the caller still waiting (the event is held: EchoHeld),
// or neither (EchoDeliver).
func (s *Store) HoldEchoIfWaiting(ctx context.Context, turn string, g Batch, watcher string) (string, error) {
	b, _ := json.Marshal(struct {
		Watcher string `json:"watcher"`
		Batch   Batch  `json:"group"`
	}{watcher, g})
	out, err := holdEchoScript.Run(ctx, s.scr, []string{s.turnKey(turn), s.k("waiting", turn), s.k("echo", turn)}, b).Text()
	if err != nil {
		return "", fmt.Errorf("hold the echo of %s: %w", turn, err)
	}
	return out, nil
}

// decodeEchoes reads held echoes (watcher → groups).
func decodeEchoes(items []string) map[string][]Batch {
	out := map[string][]Batch{}
	for _, r := range items {
		var x struct {
			Watcher string `json:"watcher"`
			Batch   Batch  `json:"group"`
		}
		if json.Unmarshal([]byte(r), &x) == nil {
			out[x.Watcher] = append(out[x.Watcher], x.Batch)
		}
	}
	return out
}

// Flags on subscriptions: all_idle emitted, a stall already reported.

// SetOnce sets a key once (for ttl); false when it was set already.
func (s *Store) SetOnce(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.k("once", name), "1", ttl).Result()
	return ok, wrap(err, "set once %s", name)
}

// ClearOnce removes such a key.
func (s *Store) ClearOnce(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.k("once", n)
	}
	return wrap(s.rdb.Del(ctx, keys...).Err(), "clear once %v", names)
}
