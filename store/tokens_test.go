package store

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// dumpPrefix is every key of the test's prefix with its whole value as text
// (strings, hashes, lists, sets, zsets, streams): what a reader of Redis sees.
func (e *testEnv) dumpPrefix() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	{
		for _, k := range e.keysOf("*") {
			var b strings.Builder
			switch typ := e.rdb.Type(e.ctx, k).Val(); typ {
			case "string":
				b.WriteString(e.rdb.Get(e.ctx, k).Val())
			case "hash":
				m := e.rdb.HGetAll(e.ctx, k).Val()
				for _, f := range slices.Sorted(maps.Keys(m)) {
					b.WriteString(f + "=" + m[f] + "\n")
				}
			case "list":
				b.WriteString(strings.Join(e.rdb.LRange(e.ctx, k, 0, -1).Val(), "\n"))
			case "set":
				b.WriteString(strings.Join(e.rdb.SMembers(e.ctx, k).Val(), "\n"))
			case "zset":
				b.WriteString(strings.Join(e.rdb.ZRange(e.ctx, k, 0, -1).Val(), "\n"))
			case "stream":
				for _, m := range e.rdb.XRange(e.ctx, k, "-", "+").Val() {
					for f, v := range m.Values {
						b.WriteString(f + "=" + toString(v) + "\n")
					}
				}
			default:
				b.WriteString("?" + typ)
			}
			out[k] = b.String()
		}
	}
	return out
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}

// noPlain fails when any key name or value of the prefix holds one of toks.
func (e *testEnv) noPlain(toks ...string) {
	e.t.Helper()
	for k, v := range e.dumpPrefix() {
		for _, tok := range toks {
			if strings.Contains(k, tok) || strings.Contains(v, tok) {
				e.t.Errorf("a plain token is stored: key %s holds %q", k, tok)
			}
		}
	}
}

// R18.19: a session's token is stored as its SHA-256 only, looked up by it,
// and archiving revokes it.
func TestSessionTokenStoredHashed(t *testing.T) {
	e := newEnv(t)
	tok := "tok-" + NewID(12)
	now := time.Now()
	if err := e.s.CreateSession(e.ctx, &Session{ID: "s1" + NewID(4), Title: "a", Token: tok, CreatedAt: now, LastActivityAt: now}); err != nil {
		t.Fatal(err)
	}
	e.noPlain(tok)
	id, err := e.s.SessionByToken(e.ctx, tok)
	if err != nil || id == "" {
		t.Fatalf("look-up by token: %q %v", id, err)
	}
	if !e.exists(e.key("tokh", TokenHash(tok))) {
		t.Fatalf("no look-up key by hash")
	}
	sess, err := e.s.GetSession(e.ctx, id)
	if err != nil || sess.Token != "" || sess.TokenHash != TokenHash(tok) {
		t.Fatalf("session read back: token %q hash %q (%v)", sess.Token, sess.TokenHash, err)
	}
	// A settings save keeps the hash (and writes no token).
	sess.Title = "b"
	if err := e.s.SaveSession(e.ctx, sess); err != nil {
		t.Fatal(err)
	}
	if id2, _ := e.s.SessionByToken(e.ctx, tok); id2 != id {
		t.Fatalf("after a save the token names %q", id2)
	}
	e.noPlain(tok)
	// A turn token names the session too, until dropped or archived.
	tt := "rtt_" + NewID(12)
	if err := e.s.AddTurnToken(e.ctx, id, tt, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.noPlain(tok, tt)
	if id2, _ := e.s.SessionByToken(e.ctx, tt); id2 != id {
		t.Fatalf("turn token names %q", id2)
	}
	if ok, err := e.s.RenewTurnToken(e.ctx, tt, time.Minute); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if err := e.s.DropTurnToken(e.ctx, id, tt); err != nil {
		t.Fatal(err)
	}
	if id2, _ := e.s.SessionByToken(e.ctx, tt); id2 != "" {
		t.Fatalf("a dropped turn token still names %q", id2)
	}
	tt2 := "rtt_" + NewID(12)
	if err := e.s.AddTurnToken(e.ctx, id, tt2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.s.ArchiveSession(e.ctx, id, now); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{tok, tt2} {
		if id2, _ := e.s.SessionByToken(e.ctx, k); id2 != "" {
			t.Errorf("after archiving, token %s still names %q", k[:4], id2)
		}
	}
}

// R18.19: the generated owner token is kept as its hash only; a later start
// gets the stored hash back, never a token.
func TestOwnerTokenStoredHashed(t *testing.T) {
	e := newEnv(t)
	h, created, err := e.s.OwnerToken(e.ctx, "owner-aaaaaaaaaaaaaaaa")
	if err != nil || !created || h != TokenHash("owner-aaaaaaaaaaaaaaaa") {
		t.Fatalf("first: %q %v %v", h, created, err)
	}
	h2, created, err := e.s.OwnerToken(e.ctx, "owner-bbbbbbbbbbbbbbbb")
	if err != nil || created || h2 != h {
		t.Fatalf("second: %q %v %v", h2, created, err)
	}
	e.noPlain("owner-aaaaaaaaaaaaaaaa", "owner-bbbbbbbbbbbbbbbb")
}

// R18.19's upgrade of a dataset whose session tokens an earlier upgrade
// already hashed (tokfmt set) but whose generated owner token is still plain.
func TestUpgradeOwnerTokenAfterSessionUpgrade(t *testing.T) {
	e := newEnv(t)
	if _, err := e.s.UpgradeTokens(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.Set(e.ctx, e.key("owner"), "plain-owner-token-4567", 0)
	if n, err := e.s.UpgradeTokens(e.ctx); n != 1 || err != nil {
		t.Fatalf("upgrade: %d %v", n, err)
	}
	e.noPlain("plain-owner-token-4567")
	if h, created, _ := e.s.OwnerToken(e.ctx, "another-one-0123456"); created || h != TokenHash("plain-owner-token-4567") {
		t.Errorf("owner after upgrade: %q created=%v", h, created)
	}
	if n, err := e.s.UpgradeTokens(e.ctx); n != 0 || err != nil {
		t.Fatalf("second upgrade: %d %v", n, err)
	}
}

// R18.19's upgrade: the layout before (tok:TOKEN, the session's token field,
// owner in plain text) becomes hashes in one idempotent step; the tokens
// still name what they named.
func TestUpgradeTokens(t *testing.T) {
	e := newEnv(t)
	live, archived, orphan := "plain-live-"+NewID(8), "plain-arch-"+NewID(8), "plain-orph-"+NewID(8)
	e.rdb.HSet(e.ctx, e.key("sess", "s1"), "id", "s1", "title", "live", "token", live)
	e.rdb.Set(e.ctx, e.key("tok", live), "s1", 0)
	e.rdb.HSet(e.ctx, e.key("sess", "s2"), "id", "s2", "title", "archived", "token", archived, "archived", "1")
	e.rdb.Set(e.ctx, e.key("tok", orphan), "s3", 0)
	e.rdb.Set(e.ctx, e.key("owner"), "plain-owner-token-0123", 0)
	n, err := e.s.UpgradeTokens(e.ctx)
	if err != nil || n != 4 {
		t.Fatalf("upgrade: %d %v", n, err)
	}
	e.noPlain(live, archived, orphan, "plain-owner-token-0123")
	for tok, want := range map[string]string{live: "s1", archived: "", orphan: "s3"} {
		if id, err := e.s.SessionByToken(e.ctx, tok); id != want || err != nil {
			t.Errorf("after the upgrade %s names %q, want %q (%v)", tok, id, want, err)
		}
	}
	if s, _ := e.s.GetSession(e.ctx, "s2"); s.TokenHash != TokenHash(archived) {
		t.Errorf("archived session's hash %q", s.TokenHash)
	}
	if h, created, _ := e.s.OwnerToken(e.ctx, "another-one-0123456"); created || h != TokenHash("plain-owner-token-0123") {
		t.Errorf("owner after upgrade: %q created=%v", h, created)
	}
	// Again: nothing to do, nothing changed.
	before := e.dumpPrefix()
	if n, err := e.s.UpgradeTokens(e.ctx); n != 0 || err != nil {
		t.Fatalf("second upgrade: %d %v", n, err)
	}
	e.rdb.Del(e.ctx, e.key("tokfmt")) // even without the marker
	if n, err := e.s.UpgradeTokens(e.ctx); n != 0 || err != nil {
		t.Fatalf("third upgrade: %d %v", n, err)
	}
	after := e.dumpPrefix()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("a second upgrade changed %s", k)
		}
	}
}
