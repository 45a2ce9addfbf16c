package embedded

import (
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/alicebob/miniredis/v2"
)

// ttlClock moves miniredis's TTLs on (it counts them down only when told
// the time moved on). miniredis's FastForward lists and sorts every key of
// every database each time, under the server's lock: 4 times a second at
// 10,000 keys that is about 1 % of a core, at 50,000 about a quarter, with
// nothing happening (R25.4). tick does what FastForward does to the keys
// that have a TTL only, in place, and calls FastForward (0) only when one
// of them is due, to delete it as FastForward does.
//
// It reaches miniredis's unexported fields (Miniredis.dbs, RedisDB.ttl,
// RedisDB.hashTTLs) by reflection, under miniredis's own lock, as its
// commands do; if their layout changes, or a hash has field TTLs (HEXPIRE,
// which the relay does not use), it falls back to FastForward
// (TestTTLClockCheap fails on such an upgrade).
type ttlClock struct {
	m *miniredis.Miniredis
}

// lazy returns what the pre-hook runs before each client command: the TTLs
// are counted down by the time gone since the last count, when that is at
// least every. Before, a ticker did it 4 times a second whether or not a
// command came; a TTL is only seen by a command (or a checkpoint's PTTL, also
// a command), so counting it then is the same to every reader, and an idle
// store has no timer (R25.4).
func (c *ttlClock) lazy(every time.Duration) func() {
	var mu sync.Mutex
	last := time.Now()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= every {
			c.tick(now.Sub(last))
			last = now
		}
	}
}

// tick moves the TTLs on by d. cheap says whether the fast path ran.
func (c ttlClock) tick(d time.Duration) (cheap bool) {
	c.m.Lock()
	ttls, ok := c.ttlMaps()
	if !ok {
		c.m.Unlock()
		c.m.FastForward(d)
		return false
	}
	due := false
	for _, t := range ttls {
		for k, v := range *t {
			v -= d
			(*t)[k] = v
			due = due || v <= 0
		}
	}
	c.m.Unlock()
	if due {
		c.m.FastForward(0) // deletes the keys whose TTL ran out
	}
	return true
}

// ttlMaps are the TTL maps of every database; false when miniredis's
// layout is not the one known here, or a hash has field TTLs. The caller
// holds the lock.
func (c ttlClock) ttlMaps() ([]*map[string]time.Duration, bool) {
	dbs := reflect.ValueOf(c.m).Elem().FieldByName("dbs")
	if !dbs.IsValid() || dbs.Kind() != reflect.Map {
		return nil, false
	}
	var out []*map[string]time.Duration
	it := dbs.MapRange()
	for it.Next() {
		ttl, ok := dbTTLs(it.Value())
		if !ok {
			return nil, false
		}
		out = append(out, ttl)
	}
	return out, true
}

// dbTTLs is the TTL map of one of miniredis's databases (a *RedisDB); false
// when its layout is not the one known here, or a hash has field TTLs.
func dbTTLs(db reflect.Value) (*map[string]time.Duration, bool) {
	if db.Kind() != reflect.Pointer || db.IsNil() || db.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	ttl := db.Elem().FieldByName("ttl")
	hashTTLs := db.Elem().FieldByName("hashTTLs")
	if !ttl.IsValid() || ttl.Type() != reflect.TypeFor[map[string]time.Duration]() ||
		!hashTTLs.IsValid() || hashTTLs.Kind() != reflect.Map || hashTTLs.Len() > 0 {
		return nil, false
	}
	return (*map[string]time.Duration)(unsafe.Pointer(ttl.UnsafeAddr())), true
}
