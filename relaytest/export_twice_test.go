package relaytest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisShape is every key of a Redis with its type and length (elements of a
// list, set, zset, stream or hash; bytes of a string).
func redisShape(t *testing.T, port int) map[string]string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		out[k] = keyShape(t, ctx, c, k)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// R25.5: `relay export` output loads twice without duplicating anything. A
// relay's data (a conversation: its messages list, the events stream, hashes,
// sets, zsets) exported from the embedded store and piped into an empty
// redis-server twice with `redis-cli --pipe` leaves every key as one load did:
// the same keys with the same lengths, no error replies.
func TestExportLoadsTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` and redis-server processes")
	}
	t.Parallel()
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	emb := newEmbProc(t, "embedded", embConfig(t, folder), dataDir, "", OwnerToken)
	emb.start()
	a := emb.newSession("twice")
	emb.say(a.ID, "first")
	emb.say(a.ID, "second")
	emb.stop()

	rs := startRedisServer(t)
	load := fmt.Sprintf("%s export --data-dir %s | redis-cli -p %d --pipe", emb.bin, dataDir, rs.port)
	out := pipeLine(t, load)
	if !strings.Contains(out, "errors: 0") {
		t.Fatalf("first load: %s", out)
	}
	once := redisShape(t, rs.port)
	var lists int
	for k, v := range once {
		if strings.HasPrefix(v, "list/") && strings.Contains(k, ":msgs:") {
			lists++
		}
	}
	if lists == 0 {
		t.Fatalf("no conversation list loaded: %v", once)
	}
	// Not pipeLine: an error reply (an XADD of an id the stream has) makes
	// redis-cli exit 1, and the keys are compared all the same.
	cmd := exec.Command("bash", "-o", "pipefail", "-c", load)
	cmd.Env = relayEnv()
	b, err := cmd.CombinedOutput()
	if out = string(b); err != nil || !strings.Contains(out, "errors: 0") {
		t.Errorf("second load: %v, error replies: %s", err, out)
	}
	twice := redisShape(t, rs.port)
	var diff []string
	for k, v := range once {
		if twice[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %s after one load, %s after two", k, v, twice[k]))
		}
	}
	for k, v := range twice {
		if _, ok := once[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: only after two loads (%s)", k, v))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("a second load of the same export changed %d keys:\n%s", len(diff), strings.Join(diff, "\n"))
	}
}
