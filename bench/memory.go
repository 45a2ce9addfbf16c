package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/store"
)

type memResult struct {
	n          int   // idle sessions created
	keys       int   // keys of the prefix after
	usage      int64 // MEMORY USAGE summed over the prefix's keys, after − before
	usedDelta  int64 // INFO memory used_memory, after − before
	createWall time.Duration
}

func (m memResult) usagePer() float64 { return float64(m.usage) / float64(m.n) }
func (m memResult) usedPer() float64  { return float64(m.usedDelta) / float64(m.n) }

// benchMemory starts a relay of its own (a fresh prefix, so the prefix's keys
// are only these sessions and the relay's few fixed keys), creates n idle
// sessions in-process and measures what Redis holds for them.
func benchMemory(ctx context.Context, rdb redis.UniversalClient, redisURL, prefix string, concurrency, n int, hc *http.Client) (memResult, error) {
	out := memResult{n: n}
	rp, err := startRelay(redisURL, prefix, concurrency, hc)
	if err != nil {
		return out, err
	}
	defer func() { _ = rp.stop() }()
	if err := settleLazyFree(ctx, rdb); err != nil {
		return out, err
	}
	_, usage0, err := prefixUsage(ctx, rdb, prefix)
	if err != nil {
		return out, err
	}
	used0, _, err := memInfo(ctx, rdb)
	if err != nil {
		return out, err
	}
	t := time.Now()
	if err := rp.createSessions(ctx, n, 16, "Idle session"); err != nil {
		return out, fmt.Errorf("create idle sessions: %w", err)
	}
	out.createWall = time.Since(t)
	if err := settleLazyFree(ctx, rdb); err != nil {
		return out, err
	}
	used1, _, err := memInfo(ctx, rdb)
	if err != nil {
		return out, err
	}
	keys, usage1, err := prefixUsage(ctx, rdb, prefix)
	if err != nil {
		return out, err
	}
	out.keys, out.usage, out.usedDelta = keys, usage1-usage0, used1-used0
	return out, nil
}

// prefixUsage sums MEMORY USAGE (SAMPLES 0: exact for aggregates) over the
// keys of prefix, found with SCAN.
func prefixUsage(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, int64, error) {
	var (
		cursor uint64
		keys   int
		sum    int64
	)
	for {
		ks, next, err := rdb.Scan(ctx, cursor, store.KeyBase(prefix)+"*", 1000).Result()
		if err != nil {
			return 0, 0, err
		}
		if len(ks) > 0 {
			cmds := make([]*redis.IntCmd, len(ks))
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range ks {
					cmds[i] = p.MemoryUsage(ctx, k, 0)
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return 0, 0, err
			}
			for _, c := range cmds {
				if c.Err() == nil {
					sum += c.Val()
					keys++
				}
			}
		}
		cursor = next
		if cursor == 0 {
			return keys, sum, nil
		}
	}
}

// memInfo reads used_memory and lazyfree_pending_objects from INFO memory.
func memInfo(ctx context.Context, rdb redis.UniversalClient) (used, pending int64, err error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			used, _ = strconv.ParseInt(v, 10, 64)
		case "lazyfree_pending_objects":
			pending, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return used, pending, nil
}

// settleLazyFree waits until Redis has no background frees pending (they
// would lower used_memory while we measure) and lets client buffers drain.
func settleLazyFree(ctx context.Context, rdb redis.UniversalClient) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, pending, err := memInfo(ctx, rdb)
		if err != nil {
			return err
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(300 * time.Millisecond):
		return nil
	}
}

// serverInfo returns "redis_version" of INFO server.
func serverInfo(ctx context.Context, rdb redis.UniversalClient) string {
	s, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
