package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/internal/testredis"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/redisurl"
)

// testEnv is one test's Redis: REDIS_URL when set (it must answer), else an
// in-process miniredis. Each test has a key prefix of its own; its keys are
// deleted when the test ends (never FLUSHALL: the Redis may be shared).
type testEnv struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	mini   *miniredis.Miniredis // nil on a real Redis
	prefix string
	s      *Store
}

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	e := &testEnv{t: t, ctx: context.Background(), prefix: "st" + NewID(6)}
	switch kind, url := testredis.Pick(t, "store tests"); kind {
	case testredis.Embedded:
		// The embedded store (the relay's default) in a data directory of its own.
		e.rdb = testredis.OpenEmbedded(t)
	case testredis.Local:
		e.mini = miniredis.RunT(t)
		e.rdb = redis.NewClient(&redis.Options{Addr: e.mini.Addr()})
		t.Cleanup(func() { _ = e.rdb.Close() })
	default:
		e.rdb = testredis.Dial(t, url, func(ctx context.Context, rdb redis.UniversalClient) {
			if err := DeleteMatching(ctx, rdb, "{"+e.prefix+"*"); err != nil { // its own, and the stores whose prefix starts with it
				t.Errorf("clean up %s:*: %v", e.prefix, err)
			}
		})
	}
	e.s = New(e.rdb, e.prefix)
	return e
}

// key is the full name of a key of this test's prefix, spelled out as
// docs/ARCHITECTURE.md "Redis keys" names it (P:part:part).
func (e *testEnv) key(parts ...string) string {
	return KeyBase(e.prefix) + strings.Join(parts, ":")
}

// expire lets a key with a TTL under d expire: miniredis's clock moves d
// (it only moves when told); on a real server it waits until gone says the key
// went, d and a second more at most (the embedded store counts TTLs down in
// steps of 250 ms). It reports whether gone held.
func (e *testEnv) expire(d time.Duration, gone func() bool) bool {
	if e.mini != nil {
		e.mini.FastForward(d)
		return gone()
	}
	return testwait.Poll(d+time.Second, 20*time.Millisecond, gone)
}

func (e *testEnv) exists(k string) bool {
	e.t.Helper()
	n, err := e.rdb.Exists(e.ctx, k).Result()
	if err != nil {
		e.t.Fatalf("EXISTS %s: %v", k, err)
	}
	return n == 1
}

func (e *testEnv) get(k string) string {
	e.t.Helper()
	v, err := e.rdb.Get(e.ctx, k).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		e.t.Fatalf("GET %s: %v", k, err)
	}
	return v
}

func (e *testEnv) list(k string) []string {
	e.t.Helper()
	v, err := e.rdb.LRange(e.ctx, k, 0, -1).Result()
	if err != nil {
		e.t.Fatalf("LRANGE %s: %v", k, err)
	}
	return v
}

func (e *testEnv) isMember(k, member string) bool {
	e.t.Helper()
	ok, err := e.rdb.SIsMember(e.ctx, k, member).Result()
	if err != nil {
		e.t.Fatalf("SISMEMBER %s: %v", k, err)
	}
	return ok
}

func (e *testEnv) scard(k string) int {
	e.t.Helper()
	n, err := e.rdb.SCard(e.ctx, k).Result()
	if err != nil {
		e.t.Fatalf("SCARD %s: %v", k, err)
	}
	return int(n)
}

// zscore returns a member's score and whether it is in the zset.
func (e *testEnv) zscore(k, member string) (float64, bool) {
	e.t.Helper()
	v, err := e.rdb.ZScore(e.ctx, k, member).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		e.t.Fatalf("ZSCORE %s: %v", k, err)
	}
	return v, true
}

func (e *testEnv) hget(k, field string) string {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, k, field).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		e.t.Fatalf("HGET %s %s: %v", k, field, err)
	}
	return v
}

func (e *testEnv) pttl(k string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, k).Result()
	if err != nil {
		e.t.Fatalf("PTTL %s: %v", k, err)
	}
	return d
}

// keysOf lists the keys of this test's prefix that match pattern (after the prefix).
func (e *testEnv) keysOf(pattern string) []string {
	e.t.Helper()
	return e.scanAll(KeyBase(e.prefix) + pattern)
}

// scanAll lists the keys matching pattern on every master.
func (e *testEnv) scanAll(pattern string) []string {
	e.t.Helper()
	var out []string
	var mu sync.Mutex
	err := redisurl.ForEachMaster(e.ctx, e.rdb, func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 500).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, keys...)
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	if err != nil {
		e.t.Fatalf("SCAN: %v", err)
	}
	return out
}
