package relaytest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// clusterURL is a Redis Cluster for the test: REDIS_URL when it is a
// redis+cluster:// URL, else one started with .ci/redis-cluster (3 masters, 3
// replicas on free loopback ports) and stopped when the test ends; the test
// is skipped without redis-server and redis-cli on PATH.
func clusterURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("REDIS_URL"); strings.HasPrefix(u, "redis+cluster://") || strings.HasPrefix(u, "rediss+cluster://") {
		return u
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no Redis Cluster: REDIS_URL is not redis+cluster:// and %s is not on PATH", bin)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", ".ci", "redis-cluster")
	dir := t.TempDir()
	out, err := exec.Command(script, "start", dir).CombinedOutput()
	if err != nil {
		_ = exec.Command(script, "stop", dir).Run()
		t.Fatalf("%s start: %v\n%s", script, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", dir).Run() })
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// Three relays (RELAY_KEY_PREFIX of their own) on one cluster: each relay's
// keys and asynq queues sit in the one hash slot of its prefix, the three
// slots on three different masters, no other key shares a relay's slot, and
// no relay sees another's sessions (R21.2, issue 23 item 4).
func TestManyRelaysOneCluster(t *testing.T) {
	url := clusterURL(t)
	u, err := redisurl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	c := u.NewClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Three prefixes on three masters.
	var rds []*Redis
	masters := map[string]bool{}
	for len(rds) < 3 {
		p := "mc" + store.NewID(4)
		m, err := c.MasterForKey(ctx, store.KeyBase(p)+"x")
		if err != nil {
			t.Fatal(err)
		}
		if masters[m.Options().Addr] {
			continue
		}
		masters[m.Options().Addr] = true
		rd := &Redis{URL: url, Prefix: p, Dir: t.TempDir()}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = store.DeleteMatching(ctx, c, store.KeyBase(p)+"*")
			_ = store.DeleteMatching(ctx, c, "asynq:{"+p+"}*")
			for _, q := range jobs.QueuesFor(p).All() {
				_ = c.SRem(ctx, "asynq:queues", q).Err()
			}
		})
		rds = append(rds, rd)
	}

	type conv struct {
		r    *Relay
		a, b Session
	}
	var convs []conv
	for _, rd := range rds {
		r := Start(t, Options{Redis: rd})
		a := r.NewSession(map[string]any{"title": "orchestrator " + rd.Prefix})
		b := r.NewSession(map[string]any{"title": "worker " + rd.Prefix})
		convs = append(convs, conv{r, a, b})
	}
	for _, cv := range convs {
		env := cv.r.Connect(cv.a.Token, nil).MustOK(map[string]any{"action": "send", "relay": "this", "session": cv.b.ID, "text": "hello " + cv.r.Redis.Prefix, "wait_seconds": 20})
		if env["status"] != "done" || env["reply"].(map[string]any)["text"] != "echo: hello "+cv.r.Redis.Prefix {
			t.Fatalf("%s: send %v", cv.r.Redis.Prefix, env)
		}
	}
	for i, cv := range convs {
		for j, other := range convs {
			if i == j {
				continue
			}
			if st := other.r.Owner("GET", "/api/v1/sessions/"+cv.b.ID, nil, nil); st != 404 {
				t.Errorf("relay %s answers %d for a session of relay %s, want 404", other.r.Redis.Prefix, st, cv.r.Redis.Prefix)
			}
		}
	}

	aq := asynq.NewClientFromRedisClient(c)
	for _, cv := range convs {
		cv.r.Stop() // no key written while they are counted
		// A task waiting in each relay's queues (a heartbeat due in an hour).
		if _, err := aq.Enqueue(asynq.NewTask(jobs.TypeHeartbeat, []byte(`{}`)), asynq.Queue(jobs.QueuesFor(cv.r.Redis.Prefix).Events),
			asynq.ProcessAt(time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if _, err := aq.Enqueue(asynq.NewTask(jobs.TypeDrain, []byte(`{"session":"x"}`)), asynq.Queue(jobs.QueuesFor(cv.r.Redis.Prefix).Turns),
			asynq.ProcessAt(time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	for _, rd := range rds {
		slot := int(c.ClusterKeySlot(ctx, store.KeyBase(rd.Prefix)).Val())
		m, _ := c.MasterForKey(ctx, store.KeyBase(rd.Prefix))
		var keys, aqKeys []string
		var inSlot int64
		for range 3 { // a key whose TTL ran out between the counts: count again
			keys = allKeys(t, c, store.KeyBase(rd.Prefix)+"*")
			aqKeys = allKeys(t, c, "asynq:{"+rd.Prefix+"}*")
			if inSlot = m.ClusterCountKeysInSlot(ctx, slot).Val(); inSlot == int64(len(keys)+len(aqKeys)) {
				break
			}
		}
		if len(keys) < 10 || len(aqKeys) == 0 {
			t.Fatalf("%s: %d keys, %d asynq keys", rd.Prefix, len(keys), len(aqKeys))
		}
		for _, k := range append(keys, aqKeys...) {
			if s := int(c.ClusterKeySlot(ctx, k).Val()); s != slot {
				t.Errorf("%s: key %s in slot %d, want %d", rd.Prefix, k, s, slot)
			}
		}
		// Nothing else in the slot: its count is the relay's keys.
		if inSlot != int64(len(keys)+len(aqKeys)) {
			t.Errorf("%s: slot %d holds %d keys, the relay's are %d", rd.Prefix, slot, inSlot, len(keys)+len(aqKeys))
		}
		t.Logf("relay %s: slot %d on %s, %d keys and %d asynq keys", rd.Prefix, slot, m.Options().Addr, len(keys), len(aqKeys))
	}
}
