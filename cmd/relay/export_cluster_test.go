package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// relay export --redis redis+cluster://… writes the keys of every master,
// keys of several slots on one master included (R21.1, issue 23 item 1).
// Runs when REDIS_URL is a cluster.
func TestExportCluster(t *testing.T) {
	url := os.Getenv("REDIS_URL")
	u, err := redisurl.Parse(url)
	if url == "" || err != nil || u.Kind != redisurl.Cluster {
		t.Skip("REDIS_URL is not a redis+cluster:// URL")
	}
	c := u.NewClient()
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	var keys []string
	for i := range 12 { // prefixes on several slots and masters
		k := store.KeyBase("ex"+store.NewID(4)) + "k" + string(rune('a'+i))
		if err := c.RPush(ctx, k, "v", "w").Err(); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	defer func() {
		for _, k := range keys {
			c.Del(ctx, k)
		}
	}()
	cleanEnv(t)
	code, out, errOut := runCLI(t, "export", "--redis", url)
	if code != 0 {
		t.Fatalf("export: exit %d, %s", code, errOut)
	}
	for _, k := range keys {
		if !strings.Contains(out, k) {
			t.Errorf("key %s not in the export", k)
		}
	}
}
