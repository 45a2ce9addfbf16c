package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// TestConsoleSessions (R18.22): a console session is kept under its id's
// hash with its TTL, read back with its owner fingerprint, and gone at once
// when ended or expired.
func TestConsoleSessions(t *testing.T) {
	e := newEnv(t)
	const id = "c0ffee-session-id"
	if _, ok, err := e.s.ConsoleSession(e.ctx, id); err != nil || ok {
		t.Fatalf("an unknown session: ok=%v err=%v", ok, err)
	}
	if err := e.s.AddConsoleSession(e.ctx, id, "fp-1", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(id))
	k := e.key("console", hex.EncodeToString(h[:]))
	if e.get(k) != "fp-1" {
		t.Fatalf("%s = %q, want the fingerprint", k, e.get(k))
	}
	if ttl := e.rdb.PTTL(e.ctx, k).Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("TTL %v, want the session's life", ttl)
	}
	keys := e.keysOf("console:*")
	for _, key := range keys {
		if strings.Contains(key, id) {
			t.Errorf("key %s holds the session id itself", key)
		}
	}
	if owner, ok, err := e.s.ConsoleSession(e.ctx, id); err != nil || !ok || owner != "fp-1" {
		t.Fatalf("the session: %q %v %v", owner, ok, err)
	}
	if err := e.s.EndConsoleSession(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.s.ConsoleSession(e.ctx, id); ok || e.exists(k) {
		t.Errorf("an ended session is still there")
	}
	_ = e.s.AddConsoleSession(e.ctx, "short", "fp-1", time.Second)
	if !e.expire(1500*time.Millisecond, func() bool { _, ok, _ := e.s.ConsoleSession(e.ctx, "short"); return !ok }) {
		t.Errorf("an expired session is still there")
	}
}
