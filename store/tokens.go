package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay"
	"github.com/oar/relay/redisurl"
)

// Tokens at rest (R18.19): session, turn, owner and peer tokens are kept as
// SHA-256 hashes only; every look-up hashes the presented token first. Keys:
//
//	tokh:SHA256       string: the session id a session or turn token names (a
//	                  turn token's with a TTL, renewed while its turn runs)
//	ownerh            string: the SHA-256 of the generated owner token
//	tokfmt            string: "2" once the stored tokens are hashes (the upgrade ran)
//	sess:ID tokh      the hash of the session's own token; turntok: of its running turn's
//
// The layout before: tok:TOKEN → session id, the session's "token" field and
// owner (the generated owner token), all in plain text. UpgradeTokens moves
// them once, at start.

// TokenHash is the hex SHA-256 of a token, the only form kept at rest.
func TokenHash(tok string) string { return relay.TokenHash(tok) }

func (s *Store) tokKey(hash string) string { return s.k("tokh", hash) }

// AddTurnToken stores a token for one running turn of session sid (only its
// hash, expiring after ttl unless renewed) and records it on the session, so
// archiving revokes it with the session's own token.
func (s *Store) AddTurnToken(ctx context.Context, sid, tok string, ttl time.Duration) error {
	h := TokenHash(tok)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.tokKey(h), sid, ttl)
		p.HSet(ctx, s.sessKey(sid), "turntok", h)
		return nil
	})
	if err != nil {
		return fmt.Errorf("turn token of %s: %w", sid, err)
	}
	return nil
}

// RenewTurnToken moves a turn token's expiry to ttl from now (false: it is
// gone: revoked or expired).
func (s *Store) RenewTurnToken(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.Expire(ctx, s.tokKey(TokenHash(tok)), ttl).Result()
	return ok, wrap(err, "renew a turn token")
}

// dropTurnTokenScript is DropTurnToken's step.
var dropTurnTokenScript = redis.NewScript(`
-- KEYS[1] = {relay}:tokh:<hash>  the token's look-up key
-- KEYS[2] = {relay}:sess:<sid>   the session hash (its turntok field)
-- ARGV[1] = the token's hash
redis.call('DEL', KEYS[1])
if redis.call('HGET', KEYS[2], 'turntok') == ARGV[1] then redis.call('HDEL', KEYS[2], 'turntok') end
return 1
`)

// DropTurnToken revokes a turn token when its turn ends.
func (s *Store) DropTurnToken(ctx context.Context, sid, tok string) error {
	h := TokenHash(tok)
	return wrap(dropTurnTokenScript.Run(ctx, s.scr, []string{s.tokKey(h), s.sessKey(sid)}, h).Err(), "drop the turn token of session %s", sid)
}

// OwnerToken stores the hash of a generated owner token unless one is stored;
// it returns the stored hash and whether token's was stored now (only then
// may the caller show token: it is never read back, R18.19).
func (s *Store) OwnerToken(ctx context.Context, token string) (hash string, created bool, err error) {
	ok, err := s.rdb.SetNX(ctx, s.k("ownerh"), TokenHash(token), 0).Result()
	if err != nil {
		return "", false, fmt.Errorf("store the owner token: %w", err)
	}
	if ok {
		return TokenHash(token), true, nil
	}
	v, err := s.rdb.Get(ctx, s.k("ownerh")).Result()
	return v, false, wrap(err, "read the owner token")
}

// tokFormat is the value of tokfmt once every stored token is a hash.
const tokFormat = "2"

// upgradeSessionTokenScript: the session's plain token becomes its hash;
// its old look-up key moves.
var upgradeSessionTokenScript = redis.NewScript(`
-- KEYS[1] = {relay}:sess:<sid>    the session hash
-- KEYS[2] = {relay}:tok:<plain>   the old look-up key
-- KEYS[3] = {relay}:tokh:<hash>   the new look-up key
-- ARGV[1] = the plain token
-- ARGV[2] = its hash
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'tokh', ARGV[2])
redis.call('HDEL', KEYS[1], 'token')
local sid = redis.call('GET', KEYS[2])
if sid then
  redis.call('SET', KEYS[3], sid)
  redis.call('DEL', KEYS[2])
end
return 1
`)

// upgradeTokKeyScript moves an old look-up key to its hash's.
var upgradeTokKeyScript = redis.NewScript(`
-- KEYS[1] = {relay}:tok:<plain>  the old look-up key
-- KEYS[2] = {relay}:tokh:<hash>  the new look-up key
-- (no ARGV)
local sid = redis.call('GET', KEYS[1])
if not sid then return 0 end
redis.call('SET', KEYS[2], sid)
redis.call('DEL', KEYS[1])
return 1
`)

// upgradeOwnerScript: the plain generated owner token becomes its hash (one
// already kept wins).
var upgradeOwnerScript = redis.NewScript(`
-- KEYS[1] = {relay}:owner   the old plain owner token
-- KEYS[2] = {relay}:ownerh  the owner token's hash
-- ARGV[1] = the hash of the old value
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
redis.call('SETNX', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
`)

// upgradeOwnerToken moves a plain generated owner token (the key owner) to
// its hash; nothing to do (0) when there is none.
func (s *Store) upgradeOwnerToken(ctx context.Context) (int, error) {
	v, err := s.rdb.Get(ctx, s.k("owner")).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("upgrade owner token: %w", err)
	}
	n, err := upgradeOwnerScript.Run(ctx, s.scr, []string{s.k("owner"), s.k("ownerh")}, TokenHash(v)).Int()
	if err != nil {
		return 0, fmt.Errorf("upgrade owner token: %w", err)
	}
	return n, nil
}

// upgradeSessionToken moves the plain token of the session record at key
// to its hash (an empty one is dropped; a key of another type is not a
// session record) and returns how many keys moved.
func (s *Store) upgradeSessionToken(ctx context.Context, key string) (int, error) {
	tok, err := s.rdb.HGet(ctx, key, "token").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err == nil && tok == "":
		return 0, s.rdb.HDel(ctx, key, "token").Err()
	case err != nil && strings.Contains(err.Error(), "WRONGTYPE"):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read the token of %s: %w", key, err)
	}
	h := TokenHash(tok)
	moved, err := upgradeSessionTokenScript.Run(ctx, s.scr, []string{key, s.k("tok", tok), s.tokKey(h)}, tok, h).Int()
	if err != nil {
		return moved, fmt.Errorf("upgrade the token of %s: %w", key, err)
	}
	return moved, nil
}

// UpgradeTokens re-hashes the tokens a relay before R18.19 stored in plain
// text (the generated owner token, session tokens and their look-up keys): one
// step at start, idempotent (every move is one script that does nothing when
// already done), safe with several processes starting at once. It returns
// how many tokens it moved.
func (s *Store) UpgradeTokens(ctx context.Context) (int, error) {
	// The owner token first and always: a dataset whose session tokens an
	// earlier upgrade already moved (tokfmt set) may still keep it in plain
	// text; one GET when there is nothing to do.
	n, err := s.upgradeOwnerToken(ctx)
	if err != nil {
		return n, err
	}
	done, err := s.rdb.Get(ctx, s.k("tokfmt")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return n, fmt.Errorf("upgrade tokens: %w", err)
	}
	if done == tokFormat {
		return n, nil
	}
	sessPrefix := s.k("sess", "")
	if err := s.scan(ctx, sessPrefix+"*", func(key string) error {
		if strings.Contains(key[len(sessPrefix):], ":") {
			return nil
		}
		moved, err := s.upgradeSessionToken(ctx, key)
		n += moved
		return err
	}); err != nil {
		return n, fmt.Errorf("upgrade session tokens: %w", err)
	}
	// Look-up keys left without a session record naming them.
	tokPrefix := s.k("tok", "")
	if err := s.scan(ctx, tokPrefix+"*", func(key string) error {
		tok := key[len(tokPrefix):]
		moved, err := upgradeTokKeyScript.Run(ctx, s.scr, []string{key, s.tokKey(TokenHash(tok))}).Int()
		n += moved
		if err != nil {
			return fmt.Errorf("move a token look-up key: %w", err)
		}
		return nil
	}); err != nil {
		return n, fmt.Errorf("upgrade token keys: %w", err)
	}
	return n, wrap(s.rdb.Set(ctx, s.k("tokfmt"), tokFormat, 0).Err(), "set the token format marker")
}

// scan calls fn for every key matching pattern, on every master of a
// cluster (the relay's keys all sit on the one holding its slot), one key at
// a time.
func (s *Store) scan(ctx context.Context, pattern string, fn func(key string) error) error {
	var mu sync.Mutex
	return redisurl.ForEachMaster(ctx, s.rdb, func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return fmt.Errorf("scan %s: %w", pattern, err)
			}
			for _, k := range keys {
				mu.Lock()
				err := fn(k)
				mu.Unlock()
				if err != nil {
					return err
				}
			}
			cursor = next
			if cursor == 0 {
				return nil
			}
		}
	})
}

// rotateSessionTokenScript is RotateSessionToken's step: the session's token
// hash is replaced and the old look-up key deleted, in one step, only while
// the hash read before is still the session's and it is not archived.
var rotateSessionTokenScript = redis.NewScript(`
-- KEYS[1] = {relay}:sess:<sid>      the session hash (its tokh field)
-- KEYS[2] = {relay}:tokh:<old hash>  the old token's look-up key
-- KEYS[3] = {relay}:tokh:<new hash>  the new token's look-up key
-- ARGV[1] = the old token's hash ("" when the session has none)
-- ARGV[2] = the new token's hash
-- ARGV[3] = the session id
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'archived') == '1' then return -1 end
local cur = redis.call('HGET', KEYS[1], 'tokh') or ''
if cur ~= ARGV[1] then return 0 end
if cur ~= '' then redis.call('DEL', KEYS[2]) end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[1], 'tokh', ARGV[2])
return 1
`)

// RotateSessionToken gives session sid the token tok (R23.5): its old token's
// look-up key is deleted in the same step, so the old token names nothing
// from then on. false: no such session, or it is archived.
func (s *Store) RotateSessionToken(ctx context.Context, sid, tok string) (bool, error) {
	h := TokenHash(tok)
	for range 5 { // another rotation in between: read again
		old, err := s.rdb.HGet(ctx, s.sessKey(sid), "tokh").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("new token of session %s: %w", sid, err)
		}
		oldKey := s.tokKey(old)
		if old == "" {
			oldKey = s.tokKey(h) // no old key: a key the script may name
		}
		n, err := rotateSessionTokenScript.Run(ctx, s.scr, []string{s.sessKey(sid), oldKey, s.tokKey(h)}, old, h, sid).Int()
		if err != nil {
			return false, fmt.Errorf("new token of session %s: %w", sid, err)
		}
		if n != 0 {
			return n == 1, nil
		}
	}
	return false, fmt.Errorf("new token of session %s: its token kept changing", sid)
}
