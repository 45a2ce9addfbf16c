package relaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/config"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
	"github.com/oar/relay/web"
)

// plainIn lists every key of prefix (and its asynq queues) that holds one of
// toks in its name or value, whatever its type.
func plainIn(t *testing.T, rdb redis.UniversalClient, prefix string, toks ...string) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	for _, pattern := range []string{store.KeyBase(prefix) + "*", "asynq:{" + prefix + "}*"} {
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, pattern, 500).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				v := valueText(ctx, rdb, k)
				for _, tok := range toks {
					if strings.Contains(k, tok) || strings.Contains(v, tok) {
						found = append(found, k)
					}
				}
			}
			cursor = next
			if cursor == 0 {
				break
			}
		}
	}
	return found
}

// valueText is a key's whole value as text, whatever its type (DUMP would
// compress long values).
func valueText(ctx context.Context, rdb redis.UniversalClient, k string) string {
	var b strings.Builder
	switch rdb.Type(ctx, k).Val() {
	case "string":
		b.WriteString(rdb.Get(ctx, k).Val())
	case "hash":
		for f, v := range rdb.HGetAll(ctx, k).Val() {
			b.WriteString(f + "=" + v + "\n")
		}
	case "list":
		b.WriteString(strings.Join(rdb.LRange(ctx, k, 0, -1).Val(), "\n"))
	case "set":
		b.WriteString(strings.Join(rdb.SMembers(ctx, k).Val(), "\n"))
	case "zset":
		b.WriteString(strings.Join(rdb.ZRange(ctx, k, 0, -1).Val(), "\n"))
	case "stream":
		for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
			b.WriteString(fmt.Sprint(m.Values) + "\n")
		}
	}
	return b.String()
}

func redisClient(t *testing.T, rd *Redis) redis.UniversalClient {
	t.Helper()
	ru, err := redisurl.Parse(rd.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := ru.NewClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// R18.19's upgrade path: a dataset an older relay wrote (session tokens
// in plain text) is re-hashed at the first start:
// the old tokens still work, and no plain token remains anywhere in Redis.
func TestTokensAtRestUpgrade(t *testing.T) {
	NeedsSharedRedis(t, "writes an older relay's layout into the Redis before the relay starts")
	rd := NewRedis(t)
	if rd.URL == "" {
		t.Skip("needs a Redis URL")
	}
	old := Start(t, Options{Redis: rd})
	live := old.NewSession(map[string]any{"title": "live"})
	gone := old.NewSession(map[string]any{"title": "archived"})
	if st := old.Owner("POST", "/api/v1/sessions/"+gone.ID+"/archive", nil, nil); st != http.StatusOK {
		t.Fatalf("archive: %d", st)
	}
	old.Stop()

	// The layout before: tok:TOKEN → id, the session's token field.
	ctx := context.Background()
	rdb := redisClient(t, rd)
	p := store.KeyBase(rd.Prefix)
	const genOwner = OwnerToken
	for _, s := range []Session{live, gone} {
		rdb.HSet(ctx, p+"sess:"+s.ID, "token", s.Token)
		rdb.HDel(ctx, p+"sess:"+s.ID, "tokh")
		rdb.Del(ctx, p+"tokh:"+sha256Hex(s.Token))
	}
	rdb.Set(ctx, p+"tok:"+live.Token, live.ID, 0)
	rdb.Del(ctx, p+"tokfmt")
	if got := plainIn(t, rdb, rd.Prefix, live.Token, gone.Token); len(got) == 0 {
		t.Fatalf("the old layout was not written")
	}

	r := Start(t, Options{Redis: rd})
	if got := plainIn(t, rdb, rd.Prefix, live.Token, gone.Token); len(got) > 0 {
		t.Fatalf("plain tokens remain after the upgrade in %v", got)
	}
	var set map[string]any
	if st := r.do("GET", "/api/v1/settings", genOwner, nil, &set); st != http.StatusOK {
		t.Fatalf("the owner token after the upgrade: %d %v", st, set)
	}
	m := r.Connect(live.Token, nil)
	out := m.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": live.ID})
	if out["id"] != live.ID && !strings.Contains(jsonString(out), live.ID) {
		t.Fatalf("read_session with the old token: %v", out)
	}
	if st := r.MCPStatus(gone.Token); st != http.StatusUnauthorized {
		t.Fatalf("the archived session's token after the upgrade: %d, want 401", st)
	}
	// A session made now: its token is shown once and stored as a hash.
	fresh := r.do("POST", "/api/v1/sessions", genOwner, map[string]any{"title": "new"}, &set)
	if fresh != http.StatusCreated || set["token"] == nil {
		t.Fatalf("create: %d %v", fresh, set)
	}
	tok := set["token"].(string)
	if got := plainIn(t, rdb, rd.Prefix, tok, live.Token); len(got) > 0 {
		t.Fatalf("plain tokens stored in %v", got)
	}
	var detail map[string]any
	if st := r.do("GET", "/api/v1/sessions/"+set["id"].(string), genOwner, nil, &detail); st != http.StatusOK || strings.Contains(jsonString(detail), tok) {
		t.Fatalf("the session's token is shown again: %d", st)
	}
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// consoleSignIn signs a browser in on the console with token: the cookie, or
// nil when the sign-in is refused.
func consoleSignIn(t *testing.T, r *Relay, token string) *http.Cookie {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.URL+"/signin", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.URL)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, k := range resp.Cookies() {
		if k.Name == web.CookieName && k.Value != "" && resp.StatusCode == http.StatusSeeOther {
			return &http.Cookie{Name: k.Name, Value: k.Value}
		}
	}
	return nil
}

// consoleOpens reports whether cookie opens the console's page and the owner
// API (GET /api/v1/settings).
func consoleOpens(t *testing.T, r *Relay, cookie *http.Cookie) (page, api bool) {
	t.Helper()
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, r.URL+path, nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, body := get("/")
	st, _ := get("/api/v1/settings")
	return strings.Contains(body, "live-sessions"), st == http.StatusOK
}

// R18.19 for the generated owner token: a relay started without one stores
// only its hash (the token is shown once, in the log); a later start without
// one knows only that hash and still takes the token on /api/v1 and the
// console's sign-in, and a console session signed in before stays valid.
func TestGeneratedOwnerTokenStoredHashed(t *testing.T) {
	rd := NewRedis(t)
	noToken := func(c *config.Config) { c.OwnerToken = "" }
	first := Start(t, Options{Redis: rd, Config: noToken})
	gen := first.App.OwnerToken()
	if len(gen) < config.MinOwnerTokenLen {
		t.Fatalf("the first start generated %q", gen)
	}
	if st := first.do("GET", "/api/v1/settings", gen, nil, nil); st != http.StatusOK {
		t.Fatalf("the generated owner token at its first start: %d", st)
	}
	cookie := consoleSignIn(t, first, gen)
	if cookie == nil {
		t.Fatalf("console sign-in with the generated token refused")
	}
	if rd.URL != "" {
		if got := plainIn(t, redisClient(t, rd), rd.Prefix, gen); len(got) > 0 {
			t.Fatalf("the generated owner token is stored in plain text in %v", got)
		}
	}
	first.Stop()

	again := Start(t, Options{Redis: rd, Config: noToken})
	if tok := again.App.OwnerToken(); tok != "" {
		t.Fatalf("a later start knows an owner token (%q): only its hash is kept", tok)
	}
	if st := again.do("GET", "/api/v1/settings", gen, nil, nil); st != http.StatusOK {
		t.Fatalf("the generated owner token after a restart: %d", st)
	}
	if st := again.do("GET", "/api/v1/settings", OwnerToken, nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("another owner token after a restart: %d", st)
	}
	if page, api := consoleOpens(t, again, cookie); !page || !api {
		t.Fatalf("the console session from before the restart: page %v, owner API %v", page, api)
	}
	if c := consoleSignIn(t, again, gen); c == nil {
		t.Fatalf("console sign-in with the generated token after a restart refused")
	}
	if c := consoleSignIn(t, again, OwnerToken); c != nil {
		t.Fatalf("console sign-in with another token accepted")
	}
}

// R18.19's upgrade path for the generated owner token: a dataset an older
// relay wrote (owner → the token in plain text), with or without its session
// tokens already hashed, is re-hashed at the first start: the old token still
// works on /api/v1 and the console's sign-in, a console session signed in
// with it stays valid, and no plain owner token remains in any key.
func TestOwnerTokenAtRestUpgrade(t *testing.T) {
	NeedsSharedRedis(t, "writes an older relay's layout into the Redis before the relay starts")
	for _, tc := range []struct {
		name   string
		tokfmt bool // the session tokens were hashed by an earlier upgrade
	}{{"plain dataset", false}, {"session tokens already hashed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rd := NewRedis(t)
			if rd.URL == "" {
				t.Skip("needs a Redis URL")
			}
			const genOwner = "0123456789abcdef0123456789abcdef0123456789abcdef"
			// A browser signed in with that token before the upgrade (the
			// session's record names the token by its fingerprint only).
			old := Start(t, Options{Redis: rd, Config: func(c *config.Config) { c.OwnerToken = genOwner }})
			cookie := consoleSignIn(t, old, genOwner)
			if cookie == nil {
				t.Fatalf("sign-in before the upgrade refused")
			}
			old.Stop()

			ctx := context.Background()
			rdb := redisClient(t, rd)
			p := store.KeyBase(rd.Prefix)
			rdb.Set(ctx, p+"owner", genOwner, 0)
			rdb.Del(ctx, p+"ownerh")
			if !tc.tokfmt {
				rdb.Del(ctx, p+"tokfmt")
			}
			if got := plainIn(t, rdb, rd.Prefix, genOwner); len(got) == 0 {
				t.Fatalf("the old layout was not written")
			}

			r := Start(t, Options{Redis: rd, Config: func(c *config.Config) { c.OwnerToken = "" }})
			if got := plainIn(t, rdb, rd.Prefix, genOwner); len(got) > 0 {
				t.Fatalf("the plain owner token remains after the upgrade in %v", got)
			}
			if tok := r.App.OwnerToken(); tok != "" {
				t.Fatalf("the upgraded relay generated a new owner token %q", tok)
			}
			if st := r.do("GET", "/api/v1/settings", genOwner, nil, nil); st != http.StatusOK {
				t.Fatalf("the old owner token after the upgrade: %d", st)
			}
			if st := r.do("GET", "/api/v1/settings", OwnerToken, nil, nil); st != http.StatusUnauthorized {
				t.Fatalf("another owner token: %d", st)
			}
			if page, api := consoleOpens(t, r, cookie); !page || !api {
				t.Fatalf("the console session from before the upgrade: page %v, owner API %v", page, api)
			}
			if c := consoleSignIn(t, r, genOwner); c == nil {
				t.Fatalf("console sign-in with the old token after the upgrade refused")
			}
			r.Stop()

			// Idempotent: a second start changes nothing and the token still works.
			r2 := Start(t, Options{Redis: rd, Config: func(c *config.Config) { c.OwnerToken = "" }})
			if st := r2.do("GET", "/api/v1/settings", genOwner, nil, nil); st != http.StatusOK {
				t.Fatalf("the old owner token after a second start: %d", st)
			}
			if got := plainIn(t, rdb, rd.Prefix, genOwner); len(got) > 0 {
				t.Fatalf("the plain owner token is back in %v", got)
			}
		})
	}
}
