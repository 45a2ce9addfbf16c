package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Paired relays (§4, §13). Keys:
//
//	relays            hash: lower-case local name → Pairing JSON
//	peertok           hash: sha256(token) → PeerToken JSON (tokens other relays present here)
//	peertokrelay      hash: sha256(token) → the relay name it was first used by
//	unlock:SID        hash: local names of paired relays unlocked in conversation SID (R4.4) → owner | agent
//	rsubs             set: ids of subscriptions this relay's conversations hold on paired relays
//	rasks             hash: ask id → RemoteAsk JSON (asks kept on a paired relay, polled, R10.5)
//	instance          this relay's random instance id (hello: a pairing that points at itself)

// Pairing is a paired relay as this relay knows it.
type Pairing struct {
	Name       string    `json:"name"`  // the local name agents use
	URL        string    `json:"url"`   // base URL, no trailing slash
	Host       string    `json:"host"`  // the URL's host without port (mentions, R13.1a)
	Token      string    `json:"token"` // the peer token this relay presents there
	Permission string    `json:"permission"`
	RemoteName string    `json:"remoteName,omitempty"` // the name it gives itself (hops, R4.7)
	Instance   string    `json:"instance,omitempty"`
	Version    string    `json:"version,omitempty"`
	Features   []string  `json:"features,omitempty"`
	PublicURL  string    `json:"publicUrl,omitempty"` // its own, as its hello reports it (R23.8)
	PairedAt   time.Time `json:"pairedAt"`
	// Whether it answers is its Link, kept apart (SetLink).
}

// SelfName is the name the paired relay gives itself, or the local one.
func (p *Pairing) SelfName() string {
	if p.RemoteName != "" {
		return p.RemoteName
	}
	return p.Name
}

// HasFeature reports whether the relay announced a feature (an unknown
// feature list, from an offline pairing, counts as having it).
func (p *Pairing) HasFeature(f string) bool {
	if p.Features == nil {
		return true
	}
	for _, x := range p.Features {
		if x == f {
			return true
		}
	}
	return false
}

// ErrExists is returned when a record with that name exists already.
var ErrExists = errors.New("exists")

// AddPairing stores a new pairing in one step (nothing half-paired): it fails
// with ErrExists when the name is taken.
func (s *Store) AddPairing(ctx context.Context, p *Pairing) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("add pairing %s: %w", p.Name, err)
	}
	ok, err := s.rdb.HSetNX(ctx, s.k("relays"), strings.ToLower(p.Name), b).Result()
	if err != nil {
		return fmt.Errorf("add pairing %s: %w", p.Name, err)
	}
	if !ok {
		return ErrExists
	}
	return nil
}

// SavePairing overwrites a pairing's record (settings, link state).
func (s *Store) SavePairing(ctx context.Context, p *Pairing) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("save pairing %s: %w", p.Name, err)
	}
	return wrap(s.rdb.HSet(ctx, s.k("relays"), strings.ToLower(p.Name), b).Err(), "save pairing %s", p.Name)
}

// GetPairing reads a pairing by its local name (case-insensitive).
func (s *Store) GetPairing(ctx context.Context, name string) (*Pairing, error) {
	v, err := s.rdb.HGet(ctx, s.k("relays"), strings.ToLower(name)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get pairing %s: %w", name, err)
	}
	var p Pairing
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return nil, fmt.Errorf("decode pairing %s: %w", name, err)
	}
	return &p, nil
}

// Pairings lists every pairing by name.
func (s *Store) Pairings(ctx context.Context) ([]*Pairing, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("relays")).Result()
	if err != nil {
		return nil, fmt.Errorf("read pairings: %w", err)
	}
	return pairingsFrom(m), nil
}

// pairingsFrom decodes the pairings hash, sorted by name.
func pairingsFrom(m map[string]string) []*Pairing {
	out := make([]*Pairing, 0, len(m))
	for _, v := range m {
		var p Pairing
		if json.Unmarshal([]byte(v), &p) == nil {
			out = append(out, &p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PairingCount is how many relays are paired.
func (s *Store) PairingCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, s.k("relays")).Result()
	return n, wrap(err, "count pairings")
}

// DeletePairing removes a pairing; false when there was none.
func (s *Store) DeletePairing(ctx context.Context, name string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.k("relays"), strings.ToLower(name)).Result()
	return n > 0, wrap(err, "delete pairing %s", name)
}

// PeerToken is a token this relay issued for another relay to pair with it.
type PeerToken struct {
	CreatedAt time.Time `json:"createdAt"`
	Label     string    `json:"label,omitempty"`
	// Scope is what it reaches (R18.35): "" (older tokens too) every session
	// as the rules allow, PeerScopeStarted only the sessions its relay's
	// agents started or prompted.
	Scope string `json:"scope,omitempty"`
}

// Peer token scopes (R18.35).
const (
	PeerScopeAll     = "all"     // the default: every session, as R4 and the accept setting allow
	PeerScopeStarted = "started" // only the sessions its relay's agents started or prompted
)

// PeerTokenScope is the scope of a peer token: PeerScopeAll or
// PeerScopeStarted ("" when there is no such token).
func (s *Store) PeerTokenScope(ctx context.Context, tok string) (string, error) {
	raw, err := s.rdb.HGet(ctx, s.k("peertok"), TokenHash(tok)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("scope of a peer token: %w", err)
	}
	var t PeerToken
	if err := json.Unmarshal([]byte(raw), &t); err != nil {
		return "", fmt.Errorf("scope of a peer token: %w", err)
	}
	if t.Scope == PeerScopeStarted {
		return PeerScopeStarted, nil
	}
	return PeerScopeAll, nil
}

// AddPeerPrompted records that an agent of relay prompted session sid here
// (R18.35: a "started" peer token reaches it).
func (s *Store) AddPeerPrompted(ctx context.Context, relay, sid string) error {
	return wrap(s.rdb.SAdd(ctx, s.k("peerprompted", strings.ToLower(relay)), sid).Err(), "record a session %s prompted", relay)
}

// PeerPrompted lists the sessions agents of relay prompted here.
func (s *Store) PeerPrompted(ctx context.Context, relay string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("peerprompted", strings.ToLower(relay))).Result()
	return ids, wrap(err, "sessions %s prompted", relay)
}

// AddPeerToken stores a peer token (only its hash is kept).
func (s *Store) AddPeerToken(ctx context.Context, tok string, t PeerToken) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("add peer token: %w", err)
	}
	return wrap(s.rdb.HSet(ctx, s.k("peertok"), TokenHash(tok), b).Err(), "add a peer token")
}

// PeerTokenValid reports whether tok is a peer token this relay issued.
func (s *Store) PeerTokenValid(ctx context.Context, tok string) (bool, error) {
	if tok == "" {
		return false, nil
	}
	ok, err := s.rdb.HExists(ctx, s.k("peertok"), TokenHash(tok)).Result()
	return ok, wrap(err, "check a peer token")
}

// Instance returns this relay's instance id, made on first use.
func (s *Store) Instance(ctx context.Context) (string, error) {
	id := NewID(12)
	if _, err := s.rdb.SetNX(ctx, s.k("instance"), id, 0).Result(); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	v, err := s.rdb.Get(ctx, s.k("instance")).Result()
	return v, wrap(err, "instance id")
}

// Unlock records paired relays as unlocked in a conversation (R4.4: it
// stays so). byOwner says the owner mentioned them; otherwise an agent on
// that relay wrote here. Only the owner's mentions count for a chain's
// unlocked relays (R4.7), so a mention overrides, and an agent's write never
// downgrades one.
func (s *Store) Unlock(ctx context.Context, sid string, byOwner bool, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range names {
			if byOwner {
				p.HSet(ctx, s.k("unlock", sid), strings.ToLower(n), "owner")
			} else {
				p.HSetNX(ctx, s.k("unlock", sid), strings.ToLower(n), "agent")
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unlock %v in %s: %w", names, sid, err)
	}
	return nil
}

// Unlocked maps the (lower-case local) names of the relays unlocked in a
// conversation to whether the owner mentioned them.
func (s *Store) Unlocked(ctx context.Context, sid string) (map[string]bool, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("unlock", sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("unlocked relays of %s: %w", sid, err)
	}
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v == "owner"
	}
	return out, nil
}

// UnlockState reads, in one round trip, the relays unlocked in a conversation
// (lower-case local name → "owner" for a mention, "agent" for a relay whose
// agent wrote there) and the pairings.
func (s *Store) UnlockState(ctx context.Context, sid string) (map[string]string, []*Pairing, error) {
	var un, ps *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		un = p.HGetAll(ctx, s.k("unlock", sid))
		ps = p.HGetAll(ctx, s.k("relays"))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("unlock state of %s: %w", sid, err)
	}
	return un.Val(), pairingsFrom(ps.Val()), nil
}

// Subscriptions this relay's conversations hold on paired relays (R8.20):
// a mirror record under the same sub:ID key (Relay and Cursor set), indexed
// in rsubs instead of the session indexes, so fan-out never sees it.

// RemoteSubscriptions lists the active mirrors.
func (s *Store) RemoteSubscriptions(ctx context.Context) ([]*Subscription, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("rsubs")).Result()
	if err != nil {
		return nil, fmt.Errorf("remote subscriptions: %w", err)
	}
	return s.getSubs(ctx, ids)
}

// WatcherMirrors lists the active mirrors one conversation here holds,
// oldest first (the owner's view of its subscriptions, R8.23).
func (s *Store) WatcherMirrors(ctx context.Context, watcher string) ([]*Subscription, error) {
	all, err := s.RemoteSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirrors of %s: %w", watcher, err)
	}
	var out []*Subscription
	for _, sub := range all {
		if sub.Watcher == watcher {
			out = append(out, sub)
		}
	}
	return out, nil
}

// EndedMirrors lists a conversation's mirrors ended since `since`.
func (s *Store) EndedMirrors(ctx context.Context, watcher string, since time.Time) ([]*Subscription, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.k("rsubsended", watcher), &redis.ZRangeBy{Min: fmt.Sprint(ms(since)), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("ended mirrors of %s: %w", watcher, err)
	}
	return s.getSubs(ctx, ids)
}

// TryLock takes a short named lock (one poller per mirror across processes).
func (s *Store) TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.k("lock", name), "1", ttl).Result()
	return ok, wrap(err, "take lock %s", name)
}

// ReleaseLock releases a named lock.
func (s *Store) ReleaseLock(ctx context.Context, name string) error {
	return wrap(s.rdb.Del(ctx, s.k("lock", name)).Err(), "release lock %s", name)
}

// RemoteAsk is an ask this relay's conversation made about a session on a
// paired relay; the ask is kept there and polled from here (R10.5).
type RemoteAsk struct {
	ID         string    `json:"id"`
	Relay      string    `json:"relay"` // local pairing name
	Asker      string    `json:"asker"`
	Session    string    `json:"session"`
	Question   string    `json:"question"`
	CreatedAt  time.Time `json:"createdAt"`
	NextPollAt time.Time `json:"nextPollAt"`
}

// remoteAskField is a remote ask's field in rasks: the id the paired relay
// gave it, namespaced by that relay's local name, so that one relay's id
// never names another's ask (R18.34). Older records are under the bare id.
func remoteAskField(relay, id string) string { return strings.ToLower(relay) + "|" + id }

// SaveRemoteAsk writes (or rewrites) a polled remote ask.
func (s *Store) SaveRemoteAsk(ctx context.Context, a *RemoteAsk) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("save remote ask %s: %w", a.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.k("rasks"), remoteAskField(a.Relay, a.ID), b)
		p.HDel(ctx, s.k("rasks"), a.ID) // an older record of it, under the bare id
		return nil
	})
	return wrap(err, "save remote ask %s", a.ID)
}

// RemoteAsks lists the polled remote asks.
func (s *Store) RemoteAsks(ctx context.Context) ([]*RemoteAsk, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("rasks")).Result()
	if err != nil {
		return nil, fmt.Errorf("read remote asks: %w", err)
	}
	out := make([]*RemoteAsk, 0, len(m))
	for _, v := range m {
		var a RemoteAsk
		if json.Unmarshal([]byte(v), &a) == nil {
			out = append(out, &a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// DeleteRemoteAsk stops polling relay's ask id; false when another process did first.
func (s *Store) DeleteRemoteAsk(ctx context.Context, relay, id string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.k("rasks"), remoteAskField(relay, id), id).Result()
	return n > 0, wrap(err, "delete remote ask %s", id)
}

// Link is a pairing's last known link state, kept apart from its settings so
// a poll never overwrites an owner's change: relaylink hash, fields
// NAME:online ("1"/"0"), NAME:seen (unix ms of the last answer), NAME:reason.
type Link struct {
	Online     bool
	LastSeenAt time.Time
	Reason     string // why it is offline
}

// setLinkScript records a link state and reports whether online changed.
var setLinkScript = redis.NewScript(`
-- KEYS[1] = {relay}:relaylink  every pairing's link state (NAME:online, NAME:seen, NAME:reason)
-- ARGV[1] = the pairing's name (lower case)
-- ARGV[2] = online (1|0)
-- ARGV[3] = now (unix ms; written as seen when online)
-- ARGV[4] = the reason (when offline)
local old = redis.call('HGET', KEYS[1], ARGV[1] .. ':online')
redis.call('HSET', KEYS[1], ARGV[1] .. ':online', ARGV[2])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1] .. ':seen', ARGV[3])
  redis.call('HDEL', KEYS[1], ARGV[1] .. ':reason')
else
  redis.call('HSET', KEYS[1], ARGV[1] .. ':reason', ARGV[4])
end
if old == ARGV[2] then return 0 end
return 1
`)

// SetLink records whether a pairing answered, in one round trip; it keeps
// the last time it answered while it does not, and reports whether online
// changed.
func (s *Store) SetLink(ctx context.Context, name string, online bool, at time.Time, reason string) (bool, error) {
	on := "0"
	if online {
		on = "1"
	}
	n, err := setLinkScript.Run(ctx, s.scr, []string{s.k("relaylink")}, strings.ToLower(name), on, ms(at), reason).Int()
	return n == 1, wrap(err, "set link of %s", name)
}

// Links reads every pairing's link state by lower-case name.
func (s *Store) Links(ctx context.Context) (map[string]Link, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("relaylink")).Result()
	if err != nil {
		return nil, fmt.Errorf("read link states: %w", err)
	}
	out := map[string]Link{}
	for k, v := range m {
		i := strings.LastIndexByte(k, ':')
		if i < 0 {
			continue
		}
		name, field := k[:i], k[i+1:]
		l := out[name]
		switch field {
		case "online":
			l.Online = v == "1"
		case "seen":
			l.LastSeenAt = fromMS(atoi64(v))
		case "reason":
			l.Reason = v
		}
		out[name] = l
	}
	return out, nil
}

// DropLink forgets a removed pairing's link state.
func (s *Store) DropLink(ctx context.Context, name string) error {
	n := strings.ToLower(name)
	return wrap(s.rdb.HDel(ctx, s.k("relaylink"), n+":online", n+":seen", n+":reason").Err(), "drop link of %s", name)
}

// PeerTokenRelay is the relay a peer token is tied to ("" before its first call).
func (s *Store) PeerTokenRelay(ctx context.Context, tok string) (string, error) {
	v, err := s.rdb.HGet(ctx, s.k("peertokrelay"), TokenHash(tok)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, wrap(err, "relay of a peer token")
}
