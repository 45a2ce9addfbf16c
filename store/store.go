// Package store is all Redis access for the relay's domain records. Keys and
// Lua scripts live here and nowhere else (asynq keeps its own keys).
//
// Every key starts with the store's prefix (default "relay") in braces,
// {PREFIX}:…, so several relays or tests can share one Redis database, and on
// a Redis Cluster the prefix is the hash tag: all of one relay's keys sit in
// one hash slot (its scripts and MULTIs may touch any of them). The relay's
// asynq queues are named so their keys hash to the same slot (jobs.QueuesFor).
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/redisurl"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// Store reads and writes the relay's records in Redis.
type Store struct {
	rdb    redis.UniversalClient
	scr    redis.Scripter // rdb for scripts: a "" key (none) becomes the slot's placeholder
	p      string         // key base: "{PREFIX}:"
	prefix string
	// curHint remembers each caller's last running turn id (LoadCall names
	// that turn's key in its script's KEYS; a wrong guess costs a read).
	curHint hints
	// headHint remembers the turn a push left at the head of a session's
	// empty queue (StartDrain names its key first).
	headHint hints
}

// hints is a small bounded map of guesses (emptied when full): a lost
// guess costs a round trip, never a wrong answer.
type hints struct {
	mu sync.Mutex
	m  map[string]string
}

const maxHints = 4096

func (h *hints) Load(k string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[k]
}

func (h *hints) LoadAndDelete(k string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.m[k]
	delete(h.m, k)
	return v
}

func (h *hints) Store(k, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = map[string]string{}
	}
	h.m[k] = v
}

func (h *hints) Delete(k string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, k)
}

// KeyBase is the start of every key of the relay with this prefix:
// "{PREFIX}:" (the prefix is the Redis Cluster hash tag).
func KeyBase(prefix string) string { return "{" + prefix + "}:" }

// ValidPrefix says whether prefix can be a key prefix: not empty, no braces
// (it is the hash tag), no whitespace.
func ValidPrefix(prefix string) bool {
	return prefix != "" && !strings.ContainsFunc(prefix, func(r rune) bool {
		return r == '{' || r == '}' || r <= ' ' || r == 0x7f
	})
}

// New returns a Store on rdb whose keys start with KeyBase(prefix).
func New(rdb redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = "relay"
	}
	s := &Store{rdb: rdb, p: KeyBase(prefix), prefix: prefix}
	s.scr = noneKeys{rdb, s.none()}
	return s
}

// none is the placeholder key a script gets for an absent optional key
// ("{PREFIX}:-", never written): every key a script is given is in the
// relay's slot. Scripts test for it with isnone (a key ending in "}:-").
//
// Every script's text starts with a header naming each of its KEYS and ARGV
// ("-- KEYS[1] = {relay}:sess:<sid>  the session hash"): {relay} is the
// store's key base (KeyBase), {relay}:- this placeholder.
func (s *Store) none() string { return s.p + "-" }

// noneLua is isnone(k): k is the placeholder (see Store.none).
const noneLua = `
local function isnone(k) return string.sub(k, -3) == '}:-' end
`

// noneKeys runs scripts on a client with every "" key replaced by none.
type noneKeys struct {
	redis.UniversalClient
	none string
}

func (c noneKeys) fix(keys []string) []string {
	for i, k := range keys {
		if k == "" {
			out := append([]string(nil), keys...)
			for j := i; j < len(out); j++ {
				if out[j] == "" {
					out[j] = c.none
				}
			}
			return out
		}
	}
	return keys
}

func (c noneKeys) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.Eval(ctx, script, c.fix(keys), args...)
}

func (c noneKeys) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalSha(ctx, sha1, c.fix(keys), args...)
}

func (c noneKeys) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalRO(ctx, script, c.fix(keys), args...)
}

func (c noneKeys) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalShaRO(ctx, sha1, c.fix(keys), args...)
}

// Redis returns the client (for pub/sub and health checks).
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix (without the braces of the key base).
func (s *Store) Prefix() string { return s.prefix }

// Ping checks that Redis answers: on a cluster, the master of the relay's
// slot (a PING there may go to any node, which answers while that master is
// down: /readyz would say ready while every call fails). The read names the
// slot's placeholder key, never written.
func (s *Store) Ping(ctx context.Context) error {
	if redisurl.IsCluster(s.rdb) {
		return s.rdb.Exists(ctx, s.none()).Err()
	}
	return s.rdb.Ping(ctx).Err()
}

func (s *Store) k(parts ...string) string {
	out := s.p
	for i, p := range parts {
		if i > 0 {
			out += ":"
		}
		out += p
	}
	return out
}

// NewID returns n random bytes as hex.
func NewID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// DeleteMatching removes keys matching a pattern (tests clean up their
// prefix and asynq queues; never FLUSHALL), on every master of a cluster.
func DeleteMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	return redisurl.ForEachMaster(ctx, rdb, func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 500).Result()
			if err != nil {
				return fmt.Errorf("delete %s: %w", pattern, err)
			}
			if len(keys) > 0 {
				// One UNLINK per key: the keys of one node may sit in
				// several slots.
				_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Unlink(ctx, k)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("delete %s: %w", pattern, err)
				}
			}
			cursor = next
			if cursor == 0 {
				return nil
			}
		}
	})
}

// Counts for gauges: pending cards and active sessions.
func (s *Store) Counts(ctx context.Context) (cards, active int64, err error) {
	c := s.rdb.ZCard(ctx, s.k("cards"))
	if err = c.Err(); err != nil {
		return
	}
	a := s.rdb.ZCard(ctx, s.k("sessions", "active"))
	return c.Val(), a.Val(), wrap(a.Err(), "count active sessions")
}

// SetAPIURL records where the API of this relay listens (for worker processes' providers).
func (s *Store) SetAPIURL(ctx context.Context, url string) error {
	return wrap(s.rdb.Set(ctx, s.k("apiurl"), url, 0).Err(), "set the API URL")
}

// APIURL returns the recorded API URL ("" when none).
func (s *Store) APIURL(ctx context.Context) (string, error) {
	v, err := s.rdb.Get(ctx, s.k("apiurl")).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, wrap(err, "API URL")
}

// wrap says what a store call was doing when it failed: nil stays nil, and
// the sentinels callers test for (redis.Nil, ErrNotFound, ErrFenced) are
// returned as they are.
func wrap(err error, format string, a ...any) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrFenced) {
		return err
	}
	return fmt.Errorf(format+": %w", append(a, err)...)
}

// getJSON reads a record stored as JSON under key; ErrNotFound when there is none.
func getJSON[T any](ctx context.Context, rdb redis.UniversalClient, key string) (*T, error) {
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	var out T
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	return &out, nil
}

// mgetJSON reads the JSON records under keys in batches of 500 (one round
// trip each); records gone meanwhile are left out.
func mgetJSON[T any](ctx context.Context, rdb redis.UniversalClient, keys []string) ([]*T, error) {
	var out []*T
	for start := 0; start < len(keys); start += 500 {
		vals, err := rdb.MGet(ctx, keys[start:min(start+500, len(keys))]...).Result()
		if err != nil {
			return nil, fmt.Errorf("read %d records: %w", len(keys), err)
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue
			}
			var rec T
			if err := json.Unmarshal([]byte(str), &rec); err != nil {
				return nil, fmt.Errorf("decode %s: %w", keys[start+i], err)
			}
			out = append(out, &rec)
		}
	}
	return out, nil
}
