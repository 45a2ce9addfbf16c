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
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("read key types: %w", err)
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
			t := types[i].Val()
			reads[i].typ = p.Type(ctx, k)
			reads[i].pttl = p.PTTL(ctx, k)
			switch t {
			case TypeString:
				reads[i].val = p.Get(ctx, k)
			case TypeHash:
				reads[i].val = p.HGetAll(ctx, k)
			case TypeList:
				reads[i].val = p.LRange(ctx, k, 0, -1)
			case TypeSet:
				reads[i].val = p.SMembers(ctx, k)
			case TypeZSet:
				reads[i].val = p.ZRangeWithScores(ctx, k, 0, -1)
			case TypeStream:
				reads[i].val = p.XRange(ctx, k, "-", "+")
			}
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
		r := &Record{Key: k, Type: got}
		if got == TypeNone {
			recs = append(recs, r)
			continue
		}
		if d := reads[i].pttl.Val(); d > 0 {
			r.ExpireAt = now.Add(d).UnixMilli()
		}
		switch v := reads[i].val.(type) {
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
			if got == TypeSet {
				sort.Strings(r.Items)
			}
		case *redis.ZSliceCmd:
			for _, z := range v.Val() {
				m, _ := z.Member.(string)
				r.Items = append(r.Items, m)
				r.Scores = append(r.Scores, z.Score)
			}
		case *redis.XMessageSliceCmd:
			for _, x := range v.Val() {
				e := StreamEntry{ID: x.ID}
				fields := make([]string, 0, len(x.Values))
				for f := range x.Values {
					fields = append(fields, f)
				}
				sort.Strings(fields) // go-redis gives an entry's fields as a map
				for _, f := range fields {
					e.Fields = append(e.Fields, f, fmt.Sprint(x.Values[f]))
				}
				r.Entries = append(r.Entries, e)
			}
		default:
			return nil, nil, fmt.Errorf("key %q: type %q is not kept", k, got)
		}
		recs = append(recs, r)
	}
	return recs, retry, nil
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
