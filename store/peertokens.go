package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Peer tokens this relay issued (R18.20). Keys, each field the token's SHA-256:
//
//	peertok        hash: → PeerToken JSON (when made, label, scope; no scope: "all")
//	peertokrelay   hash: → the relay name bound at its first call
//	peertokused    hash: → when it was last used (ms; written at most once a minute per process)
//
// A token's id is the first 16 hex digits of its hash: it names the token in
// the owner API without being it.

// peerTokenIDLen is the length of a peer token's id.
const peerTokenIDLen = 16

// ErrRelayNameTaken is BindPeerToken's answer when another peer token is
// bound to the relay name already.
var ErrRelayNameTaken = errors.New("relay name bound to another peer token")

// PeerTokenID is the id of a peer token (what the owner API names it by).
func PeerTokenID(tok string) string { return TokenHash(tok)[:peerTokenIDLen] }

// PeerTokenInfo is a peer token as the owner API lists it (never the token).
type PeerTokenInfo struct {
	ID         string    `json:"id"`
	Relay      string    `json:"relay"` // bound at its first call ("" before)
	Label      string    `json:"label,omitempty"`
	Scope      string    `json:"scope"` // all | started (R18.35)
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
}

// PeerTokens lists the peer tokens this relay issued, oldest first.
func (s *Store) PeerTokens(ctx context.Context) ([]PeerTokenInfo, error) {
	var toks, bound, used *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		toks = p.HGetAll(ctx, s.k("peertok"))
		bound = p.HGetAll(ctx, s.k("peertokrelay"))
		used = p.HGetAll(ctx, s.k("peertokused"))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read peer tokens: %w", err)
	}
	out := []PeerTokenInfo{}
	for h, raw := range toks.Val() {
		var t PeerToken
		_ = json.Unmarshal([]byte(raw), &t)
		info := PeerTokenInfo{ID: h[:min(peerTokenIDLen, len(h))], Relay: bound.Val()[h], Label: t.Label, Scope: PeerScopeAll, CreatedAt: t.CreatedAt}
		if t.Scope == PeerScopeStarted {
			info.Scope = PeerScopeStarted
		}
		if v, err := strconv.ParseInt(used.Val()[h], 10, 64); err == nil {
			info.LastUsedAt = fromMS(v)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// revokePeerTokenScript is RevokePeerToken's step.
var revokePeerTokenScript = redis.NewScript(`
-- KEYS[1] = {relay}:peertok       peer tokens by hash
-- KEYS[2] = {relay}:peertokrelay  the relay each is bound to, by hash
-- KEYS[3] = {relay}:peertokused   when each was last used, by hash
-- ARGV[1] = the token id (a hash prefix)
local n = 0
for _, h in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(h, 1, string.len(ARGV[1])) == ARGV[1] then
    redis.call('HDEL', KEYS[1], h)
    redis.call('HDEL', KEYS[2], h)
    redis.call('HDEL', KEYS[3], h)
    n = n + 1
  end
end
return n
`)

// RevokePeerToken deletes the peer token with this id (and its binding:
// the relay name is free again); false when there is none.
func (s *Store) RevokePeerToken(ctx context.Context, id string) (bool, error) {
	id = strings.ToLower(id)
	if len(id) != peerTokenIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return false, nil
	}
	n, err := revokePeerTokenScript.Run(ctx, s.scr, []string{s.k("peertok"), s.k("peertokrelay"), s.k("peertokused")}, id).Int()
	return n > 0, wrap(err, "revoke peer token %s", id)
}

// TouchPeerToken records that a peer token was used now.
func (s *Store) TouchPeerToken(ctx context.Context, tok string, now time.Time) error {
	return wrap(s.rdb.HSet(ctx, s.k("peertokused"), TokenHash(tok), ms(now)).Err(), "touch a peer token")
}

// bindPeerTokenScript is BindPeerToken's step: it returns the name the
// token is bound to, or '!taken' when another token that still exists is
// bound to the name.
var bindPeerTokenScript = redis.NewScript(`
-- KEYS[1] = {relay}:peertokrelay  the relay each token is bound to, by hash
-- KEYS[2] = {relay}:peertok       peer tokens by hash
-- ARGV[1] = the token's hash
-- ARGV[2] = the relay name (lower case)
local b = redis.call('HGET', KEYS[1], ARGV[1])
if b then return b end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i + 1] == ARGV[2] and all[i] ~= ARGV[1] and redis.call('HEXISTS', KEYS[2], all[i]) == 1 then
    return '!taken'
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return ARGV[2]
`)

// BindPeerToken ties a peer token to the relay that first speaks with it
// (peertokrelay) and returns the name it is tied to: a token one relay was
// given cannot later speak for another, and a name bound to one token cannot
// be claimed by another (ErrRelayNameTaken).
func (s *Store) BindPeerToken(ctx context.Context, tok, relay string) (string, error) {
	v, err := bindPeerTokenScript.Run(ctx, s.scr, []string{s.k("peertokrelay"), s.k("peertok")}, TokenHash(tok), strings.ToLower(relay)).Text()
	if err != nil {
		return "", fmt.Errorf("bind peer token to %s: %w", relay, err)
	}
	if v == "!taken" {
		return "", ErrRelayNameTaken
	}
	return v, nil
}
