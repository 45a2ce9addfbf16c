package embedded

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadKeys reads the state of keys at one point in time, through any Redis
// client (the embedded server or a real Redis). Their types are read first;
// then one MULTI reads each key's type again, its expiry and its contents,
// so all records come from the same moment. A key whose type changed between
// the two steps is returned in retry (read it again later). A key that no
// longer exists gives a deletion record.
func ReadKeys(ctx context.Context, c redis.Cmdable, keys []string) (recs []*Record, retry []string, err error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	types, err := readTypes(ctx, c, keys)
	if err != nil {
		return nil, nil, err
	}
	type read struct {
		typ  *redis.StatusCmd
		pttl *redis.DurationCmd
		val  redis.Cmder
	}
	reads := make([]read, len(keys))
	now := time.Now()
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			reads[i].typ = p.Type(ctx, k)
			reads[i].pttl = p.PTTL(ctx, k)
			reads[i].val = queueWhole(ctx, p, k, types[i].Val())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("read keys: %w", err)
	}
	for i, k := range keys {
		want, got := types[i].Val(), reads[i].typ.Val()
		if want != got {
			retry = append(retry, k)
			continue
		}
		r, err := wholeRecord(k, got, reads[i].pttl.Val(), reads[i].val, now)
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, r)
	}
	return recs, retry, nil
}

// readTypes reads keys' types in one pipeline (the first step of a
// consistent read: the MULTI after it reads each key by its type).
func readTypes(ctx context.Context, c redis.Cmdable, keys []string) ([]*redis.StatusCmd, error) {
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read key types: %w", err)
	}
	return types, nil
}

// queueWhole queues the read of a key's whole contents by its type (nil for
// none).
func queueWhole(ctx context.Context, p redis.Pipeliner, k, t string) redis.Cmder {
	switch t {
	case TypeString:
		return p.Get(ctx, k)
	case TypeHash:
		return p.HGetAll(ctx, k)
	case TypeList:
		return p.LRange(ctx, k, 0, -1)
	case TypeSet:
		return p.SMembers(ctx, k)
	case TypeZSet:
		return p.ZRangeWithScores(ctx, k, 0, -1)
	case TypeStream:
		return p.XRange(ctx, k, "-", "+")
	}
	return nil
}

// expireAt is a PTTL read at now as an expiry in Unix ms (0 = none).
func expireAt(pttl time.Duration, now time.Time) int64 {
	if pttl > 0 {
		return now.Add(pttl).UnixMilli()
	}
	return 0
}

// wholeRecord is the record of key k of type t from its whole read val
// (queueWhole) and its PTTL.
func wholeRecord(k, t string, pttl time.Duration, val redis.Cmder, now time.Time) (*Record, error) {
	r := &Record{Key: k, Type: t}
	if t == TypeNone {
		return r, nil
	}
	r.ExpireAt = expireAt(pttl, now)
	switch v := val.(type) {
	case *redis.StringCmd:
		r.Str = v.Val()
	case *redis.MapStringStringCmd:
		m := v.Val()
		fields := make([]string, 0, len(m))
		for f := range m {
			fields = append(fields, f)
		}
		sort.Strings(fields) // one order, so an unchanged key hashes the same
		r.Items = make([]string, 0, 2*len(m))
		for _, f := range fields {
			r.Items = append(r.Items, f, m[f])
		}
	case *redis.StringSliceCmd:
		r.Items = v.Val()
		if t == TypeSet {
			sort.Strings(r.Items)
		}
	case *redis.ZSliceCmd:
		for _, z := range v.Val() {
			m, _ := z.Member.(string)
			r.Items = append(r.Items, m)
			r.Scores = append(r.Scores, z.Score)
		}
	case *redis.XMessageSliceCmd:
		r.Entries = streamEntries(v.Val())
	default:
		return nil, fmt.Errorf("key %q: type %q is not kept", k, t)
	}
	return r, nil
}

func streamEntries(msgs []redis.XMessage) []StreamEntry {
	out := make([]StreamEntry, 0, len(msgs))
	for _, x := range msgs {
		e := StreamEntry{ID: x.ID}
		fields := make([]string, 0, len(x.Values))
		for f := range x.Values {
			fields = append(fields, f)
		}
		sort.Strings(fields) // go-redis gives an entry's fields as a map
		for _, f := range fields {
			e.Fields = append(e.Fields, f, fmt.Sprint(x.Values[f]))
		}
		out = append(out, e)
	}
	return out
}

// ScanKeys lists every key of the database (SCAN, so a real Redis is not
// blocked), calling fn with batches of at most count keys.
func ScanKeys(ctx context.Context, c redis.Cmdable, count int64, fn func([]string) error) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", count).Result()
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
