package relaytest

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/embedded"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// A dataset of the key format before one hash slot per relay (PREFIX:…
// keys, the queues PREFIX:turns and PREFIX:events) is moved once at start:
// the conversations are all there, the old keys are gone, a waiting task of
// an old queue is in the new one, and the keys of another relay whose prefix
// starts with this one's stay as they are (R21.2, issue 23 item 3). On the
// Redis of REDIS_URL (one or a cluster) and on the embedded store (a data
// directory written by the older version).
func TestUpgradeUntaggedKeys(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		if EmbeddedMode() {
			t.Skip("the embedded store's run is the other subtest")
		}
		upgradeCase(t, NewRedis(t))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		upgradeCase(t, NewEmbedded(t))
	})
}

// oldClient opens rd's Redis directly (the embedded store's data directory
// when there is no URL); done closes it (writing the embedded store back).
func oldClient(t *testing.T, rd *Redis) (c redis.UniversalClient, done func()) {
	t.Helper()
	if rd.URL != "" {
		u, err := redisurl.Parse(rd.URL)
		if err != nil {
			t.Fatal(err)
		}
		c := u.NewClient()
		return c, func() { _ = c.Close() }
	}
	s, err := embedded.Open(embedded.Options{Dir: rd.DataDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c = redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
	return c, func() {
		_ = c.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// allKeys lists the keys matching pattern on every master.
func allKeys(t *testing.T, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	err := redisurl.ForEachMaster(context.Background(), c, func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// moveKey renames from to to, across slots on a cluster (DUMP, RESTORE, DEL).
func moveKey(t *testing.T, c redis.UniversalClient, from, to string) {
	t.Helper()
	ctx := context.Background()
	if !redisurl.IsCluster(c) {
		if err := c.Rename(ctx, from, to).Err(); err != nil {
			t.Fatalf("rename %s: %v", from, err)
		}
		return
	}
	d, err := c.Dump(ctx, from).Result()
	if err != nil {
		t.Fatalf("dump %s: %v", from, err)
	}
	ttl := c.PTTL(ctx, from).Val()
	if ttl < 0 {
		ttl = 0
	}
	if err := c.Restore(ctx, to, ttl, d).Err(); err != nil {
		t.Fatalf("restore %s: %v", to, err)
	}
	if err := c.Del(ctx, from).Err(); err != nil {
		t.Fatal(err)
	}
}

func upgradeCase(t *testing.T, rd *Redis) {
	ctx := context.Background()
	p := rd.Prefix
	r := Start(t, Options{Redis: rd})
	a := r.NewSession(map[string]any{"title": "orchestrator"})
	b := r.NewSession(map[string]any{"title": "worker"})
	env := r.Connect(a.Token, nil).MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "before the upgrade", "wait_seconds": 10})
	if env["status"] != "done" {
		t.Fatalf("send before: %v", env)
	}
	before := len(r.Messages(b.ID, ""))
	r.Stop()

	// Write the dataset back as the older version kept it.
	c, done := oldClient(t, rd)
	base := store.KeyBase(p)
	keys := allKeys(t, c, base+"*")
	if len(keys) < 10 {
		t.Fatalf("only %d keys under %s*", len(keys), base)
	}
	for _, k := range keys {
		if k == base+"keyfmt" || strings.HasPrefix(k, base+"qev:") || strings.HasPrefix(k, base+"lock:") {
			_ = c.Del(ctx, k)
			continue
		}
		moveKey(t, c, k, p+":"+k[len(base):])
	}
	other := p + ":other:sess:" + b.ID // another relay's (prefix P:other), old format
	if err := c.HSet(ctx, other, "id", b.ID).Err(); err != nil {
		t.Fatal(err)
	}
	// A waiting task of an old queue (a heartbeat due in an hour).
	oldQ := jobs.OldQueuesFor(p).Events
	aq := asynq.NewClientFromRedisClient(c)
	if _, err := aq.Enqueue(asynq.NewTask(jobs.TypeHeartbeat, []byte(`{}`)), asynq.Queue(oldQ), asynq.TaskID("old-heartbeat"),
		asynq.ProcessAt(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, done := oldClient(t, rd)
		defer done()
		_ = c.Del(context.Background(), other)
		for _, q := range jobs.OldQueuesFor(p).All() {
			_ = c.SRem(context.Background(), "asynq:queues", q)
		}
	})
	if left := allKeys(t, c, base+"*"); len(left) != 0 {
		t.Fatalf("keys of the new format left: %v", left)
	}
	done()

	r2 := Start(t, Options{Redis: rd})
	if got := len(r2.Messages(b.ID, "")); got != before {
		t.Fatalf("after the upgrade %d messages, want %d", got, before)
	}
	env = r2.Connect(a.Token, nil).MustOK(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "after the upgrade", "wait_seconds": 10})
	if env["status"] != "done" {
		t.Fatalf("send after: %v", env)
	}
	c2 := r2.App.Redis()
	var stale []string
	for _, k := range allKeys(t, c2, p+":*") {
		if k != other {
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		t.Errorf("old keys left after the upgrade: %v", stale)
	}
	if c2.Exists(ctx, other).Val() != 1 {
		t.Errorf("%s (another relay's key) was moved", other)
	}
	if v := c2.Get(ctx, base+"keyfmt").Val(); v == "" {
		t.Errorf("no marker %skeyfmt", base)
	}
	insp := asynq.NewInspectorFromRedisClient(c2)
	info, err := insp.GetTaskInfo(jobs.QueuesFor(p).Events, "old-heartbeat")
	if err != nil || info.State != asynq.TaskStateScheduled {
		t.Errorf("the old queue's task in %s: %v, %v", jobs.QueuesFor(p).Events, info, err)
	}
	if qs, _ := insp.Queues(); slices.Contains(qs, oldQ) {
		t.Errorf("old queue %s still listed", oldQ)
	}
	_ = insp.DeleteTask(jobs.QueuesFor(p).Events, "old-heartbeat")
}
