package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/redisurl"
)

// The key format. Before it, a relay's keys were PREFIX:… (no hash tag);
// since, they are {PREFIX}:… (KeyBase), and the marker {PREFIX}:keyfmt says
// so. UpgradeKeyTags moves a dataset of the old format once.
const keyFormat = "tagged"

// keyNames are the first parts of the store's key names (P:NAME:…): only
// keys named so are moved, so the keys of another relay whose prefix starts
// with this one's and ":" (P:other:…) stay as they are.
var keyNames = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`apiurl ask asks asksby asksin asksopen buf busy busypeer card cards console
		cur cwds dlv drain drains due echo events flags gm group grouporder groups held instance killack lease lock loop mcptask msgs notify
		once owner ownerh peertok peertokrelay peertokused procs q qev qids question rasks relaylink relays rsubs
		rsubsended sch schby schended schinto schs sess sessions settings sids sq sub subev subidx subs subsall
		subsended tasks tids tok tokfmt tokh tout turn unlock usage waiting wakes win wl wlnext`) {
		keyNames[n] = true
	}
}

// KeyFormatDone says whether the marker of the key format is set.
func (s *Store) KeyFormatDone(ctx context.Context) (bool, error) {
	v, err := s.rdb.Get(ctx, s.k("keyfmt")).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == keyFormat, wrap(err, "key format marker of %s", s.prefix)
}

// renameKey moves key k to the name to in one RENAME; a key there already
// (moved before) wins, and k is dropped.
func (s *Store) renameKey(ctx context.Context, k, to string) (moved bool, err error) {
	ok, err := s.rdb.RenameNX(ctx, k, to).Result()
	if err != nil {
		return false, fmt.Errorf("rename %s: %w", k, err)
	}
	if !ok {
		return false, wrap(s.rdb.Del(ctx, k).Err(), "drop %s", k)
	}
	return true, nil
}

// copyKey moves key k to the name to on a Redis Cluster, where the two may
// be in different slots: DUMP and PTTL, RESTORE there (a key there already
// wins), then DEL of k.
func (s *Store) copyKey(ctx context.Context, k, to string) (moved bool, err error) {
	var dump *redis.StringCmd
	var pttl *redis.DurationCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		dump = p.Dump(ctx, k)
		pttl = p.PTTL(ctx, k)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("dump %s: %w", k, err)
	}
	if errors.Is(dump.Err(), redis.Nil) {
		return false, nil // gone meanwhile
	}
	ttl := pttl.Val()
	if ttl < 0 {
		ttl = 0 // no expiry
	}
	if err := s.rdb.Restore(ctx, to, ttl, dump.Val()).Err(); err != nil && !strings.Contains(err.Error(), "BUSYKEY") {
		return false, fmt.Errorf("restore %s: %w", to, err)
	} else if err == nil {
		moved = true
	}
	return moved, wrap(s.rdb.Del(ctx, k).Err(), "drop %s", k)
}

// UpgradeKeyTags moves the keys of the old format (PREFIX:NAME:…) to
// {PREFIX}:NAME:… once, then sets the marker {PREFIX}:keyfmt; with the
// marker set it does nothing. A key already present in the new format is
// kept and the old one dropped. On one Redis each key moves with RENAMENX;
// on a cluster (old and new names hash to different slots) with DUMP,
// RESTORE (its TTL kept) and DEL. It returns how many keys moved. No other
// process of the relay may run meanwhile (the caller holds the start lock).
func (s *Store) UpgradeKeyTags(ctx context.Context) (int, error) {
	if done, err := s.KeyFormatDone(ctx); err != nil || done {
		return 0, err
	}
	old := s.prefix + ":"
	// A relay of the old format always left its settings (and the marker of
	// its token format): without them there is nothing to move, and no
	// scan of the whole keyspace.
	var found []*redis.IntCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range []string{"settings", "tokfmt", "sids", "instance"} {
			found = append(found, p.Exists(ctx, old+k))
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("upgrade key tags of %s: %w", s.prefix, err)
	}
	if !slices.ContainsFunc(found, func(c *redis.IntCmd) bool { return c.Val() > 0 }) {
		return 0, wrap(s.rdb.Set(ctx, s.k("keyfmt"), keyFormat, 0).Err(), "set the key format marker of %s", s.prefix)
	}
	cluster := redisurl.IsCluster(s.rdb)
	n := 0
	err := s.scan(ctx, globEscape(old)+"*", func(k string) error {
		rest := k[len(old):]
		name, _, _ := strings.Cut(rest, ":")
		if !keyNames[name] {
			return nil
		}
		move := s.renameKey
		if cluster {
			move = s.copyKey
		}
		moved, err := move(ctx, k, s.p+rest)
		if moved {
			n++
		}
		return err
	})
	if err != nil {
		return n, fmt.Errorf("upgrade key names to {%s}:…: %w", s.prefix, err)
	}
	// The queued event turns (qev:SID) are new with this format: fill them
	// from the queues moved (the push script reads them).
	if n > 0 {
		if err := s.indexQueuedEvents(ctx); err != nil {
			return n, err
		}
	}
	return n, wrap(s.rdb.Set(ctx, s.k("keyfmt"), keyFormat, 0).Err(), "set the key format marker of %s", s.prefix)
}

// indexQueuedEvents adds every queued turn of role event to its session's qev set.
func (s *Store) indexQueuedEvents(ctx context.Context) error {
	qp := s.k("q", "")
	var queues []string
	if err := s.scan(ctx, globEscape(qp)+"*", func(k string) error {
		queues = append(queues, k)
		return nil
	}); err != nil {
		return fmt.Errorf("index queued events: %w", err)
	}
	for _, q := range queues {
		sid := q[len(qp):]
		ids, err := s.rdb.LRange(ctx, q, 0, -1).Result()
		if err != nil {
			return fmt.Errorf("index queued events of %s: %w", sid, err)
		}
		for _, id := range ids {
			if role, _ := s.rdb.HGet(ctx, s.turnKey(id), "role").Result(); role == "event" {
				if err := s.rdb.SAdd(ctx, s.k("qev", sid), id).Err(); err != nil {
					return fmt.Errorf("index queued event %s of %s: %w", id, sid, err)
				}
			}
		}
	}
	return nil
}

// WaitKeyFormat waits until another process has set the marker (it holds
// the start lock and is upgrading), up to d.
func (s *Store) WaitKeyFormat(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		done, err := s.KeyFormatDone(ctx)
		if err != nil {
			return fmt.Errorf("wait for the key format of %s: %w", s.prefix, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the keys of prefix %s are being moved to {%s}:… by another process: not done after %v", s.prefix, s.prefix, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// globEscape escapes the SCAN pattern characters of s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
