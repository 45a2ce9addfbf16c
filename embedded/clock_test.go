package embedded

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// R25.4: the TTL clock's tick costs the keys with a TTL, not the whole
// dataset (miniredis's FastForward lists and sorts every key, 4 times a
// second); it counts TTLs down as FastForward does and deletes a key whose
// TTL ran out. It fails if a miniredis upgrade changes the fields the fast
// path reads (the clock would fall back to FastForward).
func TestTTLClockCheap(t *testing.T) {
	m := miniredis.NewMiniRedis()
	c := ttlClock{m: m}
	for i := range 20000 {
		m.HSet(fmt.Sprintf("{relay}:sess:%08d", i), "title", "idle")
	}
	if err := m.Set("soon", "x"); err != nil {
		t.Fatal(err)
	}
	m.SetTTL("soon", 300*time.Millisecond)
	if err := m.Set("later", "y"); err != nil {
		t.Fatal(err)
	}
	m.SetTTL("later", time.Hour)

	// The first tick warms what a tick may allocate; then none may grow with the dataset.
	if !c.tick(100 * time.Millisecond) {
		t.Fatal("the TTL clock fell back to FastForward: miniredis's layout (Miniredis.dbs, RedisDB.ttl, RedisDB.hashTTLs) changed")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		c.tick(10 * time.Millisecond)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("10 ticks with 20,002 keys (2 with a TTL) allocated %d bytes: the tick lists the whole dataset", got)
	}
	if got := m.TTL("soon"); got != 100*time.Millisecond {
		t.Fatalf("TTL of soon after 200 ms: %s, want 100ms", got)
	}
	if !m.Exists("soon") {
		t.Fatal("soon is gone before its TTL ran out")
	}
	c.tick(100 * time.Millisecond)
	if m.Exists("soon") {
		t.Fatal("soon is still there after its TTL ran out")
	}
	if got := m.TTL("later"); got != time.Hour-300*time.Millisecond {
		t.Fatalf("TTL of later: %s, want 59m59.7s", got)
	}
	if !m.Exists("later") || !m.Exists("{relay}:sess:00000000") {
		t.Fatal("a key with time left, or one without a TTL, is gone")
	}
}
