package domain

import (
	"sync"
	"time"
)

// cached is one value a process keeps for ttl of wall time before it reads it
// again (the owner's settings, the folders rule's resolved folders): a cache
// of one, safe for concurrent use. A notification drops it at once where the
// value can change elsewhere; ttl is the safety net.
type cached[T any] struct {
	ttl time.Duration

	mu sync.Mutex
	v  T
	at time.Time // when v was kept; zero: nothing kept
}

// get is the kept value while it is fresh.
func (k *cached[T]) get() (T, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.fresh() {
		var zero T
		return zero, false
	}
	return k.v, true
}

// fresh reports whether a value is kept and younger than ttl (k.mu held).
func (k *cached[T]) fresh() bool { return !k.at.IsZero() && time.Since(k.at) < k.ttl }

// keep keeps v from now on.
func (k *cached[T]) keep(v T) {
	k.mu.Lock()
	k.v, k.at = v, time.Now()
	k.mu.Unlock()
}

// getOr is the kept value, or load's, kept, when none is fresh (load runs
// under the lock: one at a time).
func (k *cached[T]) getOr(load func() T) T {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.fresh() {
		k.v, k.at = load(), time.Now()
	}
	return k.v
}

// drop forgets the kept value: the next get reads it again.
func (k *cached[T]) drop() {
	k.mu.Lock()
	k.at = time.Time{}
	k.mu.Unlock()
}
