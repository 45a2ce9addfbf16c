// Package store is all Redis access for the relay's domain records. Keys and
// Lua scripts live here and nowhere else (asynq keeps its own keys).
//
// Every key starts with the store's prefix (Options.Prefix, default "relay"),
// so several relays or tests can share one Redis database.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/redisurl"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// Store reads and writes the relay's records in Redis.
type Store struct {
	rdb redis.UniversalClient
	p   string // key prefix including the trailing ':'
}

// New returns a Store on rdb whose keys start with prefix+":".
func New(rdb redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = "relay"
	}
	return &Store{rdb: rdb, p: prefix + ":"}
}

// Redis returns the client (for pub/sub and health checks).
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix without the trailing ':'.
func (s *Store) Prefix() string { return s.p[:len(s.p)-1] }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

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
				return err
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
					return err
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
	return c.Val(), a.Val(), a.Err()
}

// SetAPIURL records where the API of this relay listens (for worker processes' providers).
func (s *Store) SetAPIURL(ctx context.Context, url string) error {
	return s.rdb.Set(ctx, s.k("apiurl"), url, 0).Err()
}

// APIURL returns the recorded API URL ("" when none).
func (s *Store) APIURL(ctx context.Context) (string, error) {
	v, err := s.rdb.Get(ctx, s.k("apiurl")).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// getJSON reads a record stored as JSON under key; ErrNotFound when there is none.
func getJSON[T any](ctx context.Context, rdb redis.UniversalClient, key string) (*T, error) {
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
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
			return nil, err
		}
		for _, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue
			}
			var rec T
			if err := json.Unmarshal([]byte(str), &rec); err != nil {
				return nil, err
			}
			out = append(out, &rec)
		}
	}
	return out, nil
}
