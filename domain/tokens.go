package domain

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// tokens are the bearer tokens this process checks, each kind with its
// process cache: session and turn tokens, the ones agents call /mcp with
// (R18.2, R18.19), and the peer tokens paired relays call with (R18.20,
// R18.21). An archive or a revocation empties every process's caches at once
// through the "tokens" notification (drop); a cached token's own TTL is the
// safety net, timed on the clock of the durations of work (Options.Timers:
// the wall clock in a relay, a Sim the domain's tests step). It reaches
// nothing else of the relay.
type tokens struct {
	st   tokensStore
	now  func() time.Time
	log  *slog.Logger
	opts *Options // the relay's: its name and base URL; Timers times the caches

	mu       sync.RWMutex
	sessions map[string]tokenEntry // bearer token -> session id
	// ended are the turn tokens this process revoked (their turn ended here),
	// each kept for turnTokenTTL: a lookup that read the store before the
	// revocation caches nothing after it.
	ended map[string]time.Time

	peerMu sync.Mutex
	peers  map[string]peerTok // peer tokens found valid (PeerTokenValid)
}

// tokensStore is the store as the tokens see it.
type tokensStore interface {
	recordStore
	tokenStore
}

func newTokens(st tokensStore, now func() time.Time, log *slog.Logger, opts *Options) *tokens {
	return &tokens{st: st, now: now, log: log, opts: opts, sessions: map[string]tokenEntry{}, ended: map[string]time.Time{},
		peers: map[string]peerTok{}}
}

// SessionForToken returns the session a bearer token names.
// Known tokens are cached in the process for tokenTTL; archiving a session
// deletes its token and drops every process's cache at once through the
// "tokens" notification (R18.2). While Redis does not answer, a cached token
// still names its session, so the call gets a clear error envelope.
func (tk *tokens) SessionForToken(ctx context.Context, token string) (string, bool, error) {
	if token == "" {
		return "", false, nil
	}
	tk.mu.RLock()
	ent, ok := tk.sessions[token]
	tk.mu.RUnlock()
	now := tk.opts.Timers.Now()
	if !ok {
		return tk.askSession(ctx, token, nil, now)
	}
	if now.Sub(ent.at) < tokenCacheTTL(token) {
		return ent.id, true, nil
	}
	return tk.askSession(ctx, token, &ent, now)
}

// askSession asks Redis which session token names and keeps the answer
// found at now; cached, the process's stale entry (nil for none), still
// answers while Redis does not, and goes when the token is gone (R18.2).
func (tk *tokens) askSession(ctx context.Context, token string, cached *tokenEntry, now time.Time) (string, bool, error) {
	id, err := tk.st.SessionByToken(ctx, token)
	if err != nil {
		if cached != nil {
			return cached.id, true, nil
		}
		return "", false, err
	}
	if id == "" {
		if cached != nil {
			tk.mu.Lock()
			delete(tk.sessions, token)
			tk.mu.Unlock()
		}
		return "", false, nil
	}
	if !tk.keepSession(token, id, now) {
		return "", false, nil
	}
	return id, true, nil
}

// keepSession caches that token names session id, found at now, unless the
// token's turn ended while Redis was asked (R18.19): then it reports false.
// A cache grown to 100,000 tokens starts again empty.
func (tk *tokens) keepSession(token, id string, now time.Time) bool {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if _, ended := tk.ended[token]; ended {
		return false
	}
	if len(tk.sessions) >= 100000 {
		tk.sessions = map[string]tokenEntry{}
	}
	tk.sessions[token] = tokenEntry{id: id, at: now}
	return true
}

// tokenTTL bounds how long a process trusts its cached copy of a token
// without asking Redis (a safety net for a missed "tokens" notification).
const tokenTTL = 30 * time.Second

type tokenEntry struct {
	id string
	at time.Time // when it was found in the store (Options.Timers)
}

// dropTokens empties this process's token caches (session and turn tokens,
// peer tokens: an archive or a peer token's revocation, R18.2, R18.20).
func (tk *tokens) dropTokens() {
	tk.mu.Lock()
	tk.sessions = map[string]tokenEntry{}
	tk.mu.Unlock()
	tk.peerMu.Lock()
	clear(tk.peers)
	tk.peerMu.Unlock()
}

// rotateSessionToken gives session sid a new token and revokes its old one
// in every process at once (R23.5): "" when the session is gone or archived.
func (tk *tokens) rotateSessionToken(ctx context.Context, sid string) (string, error) {
	tok := store.NewID(24)
	ok, err := tk.st.RotateSessionToken(ctx, sid, tok)
	if err != nil || !ok {
		return "", err
	}
	tk.dropTokens() // this process at once, before any other request is answered
	if err := tk.st.Notify(ctx, "tokens"); err != nil {
		return "", fmt.Errorf("new token of session %s: tell the other processes: %w", id8(sid), err)
	}
	return tok, nil
}

// mintTurnToken makes the turn's token when its provider runs an agent
// process; drop revokes it (safe to call more than once). No token ("") for
// in-process providers.
func (tk *tokens) mintTurnToken(ctx context.Context, p provider.Provider, sid string) (string, func(), error) {
	if inProcess[p.Info().Type] {
		return "", func() {}, nil
	}
	tok := TurnTokenPrefix + store.NewID(24)
	if err := tk.st.AddTurnToken(ctx, sid, tok, turnTokenTTL); err != nil {
		return "", nil, err
	}
	drop := sync.OnceFunc(func() {
		tk.mu.Lock()
		delete(tk.sessions, tok)
		now := tk.opts.Timers.Now()
		for t, at := range tk.ended {
			if now.Sub(at) > turnTokenTTL {
				delete(tk.ended, t)
			}
		}
		tk.ended[tok] = now
		tk.mu.Unlock()
		if err := tk.st.DropTurnToken(context.WithoutCancel(ctx), sid, tok); err != nil {
			tk.log.Warn("turn token not revoked (it expires within a minute)", "session", id8(sid), "err", err)
		}
	})
	return tok, drop, nil
}

// NewPeerToken issues a token another relay pairs with (POST /api/v1/peer-tokens);
// scope is "" or "all" (every session, as the rules allow) or "started"
// (only the sessions its relay's agents started or prompted, R18.35).
func (tk *tokens) NewPeerToken(ctx context.Context, label, scope string) (*relay.PeerTokenIssued, error) {
	if len(label) > 200 {
		return nil, Errorf(CodeInvalidInput, "label may have at most 200 characters. No token was made.")
	}
	stored := ""
	switch scope {
	case "", store.PeerScopeAll:
		scope = store.PeerScopeAll
	case store.PeerScopeStarted:
		stored = store.PeerScopeStarted
	default:
		return nil, Errorf(CodeInvalidInput, "scope must be %q (every session, as the rules allow; the default) or %q (only the sessions that relay's agents started or prompted) (got %q). No token was made.",
			store.PeerScopeAll, store.PeerScopeStarted, scope)
	}
	tok := "rpt_" + store.NewID(24)
	now := tk.now()
	if err := tk.st.AddPeerToken(ctx, tok, store.PeerToken{CreatedAt: now, Label: label, Scope: stored}); err != nil {
		return nil, fmt.Errorf("issue a peer token: %w", err)
	}
	tk.log.Info("peer token issued", "label", label, "scope", scope)
	return &relay.PeerTokenIssued{Token: tok, ID: store.PeerTokenID(tok), Relay: tk.opts.Name, URL: tk.opts.BaseURL, CreatedAt: tsString(now), Scope: scope,
		Note: "Give this token to the other relay's owner: they pair with POST /api/v1/relays {url, token}. It is shown only once."}, nil
}

// peerTokenTTL is how long a process trusts that a peer token it checked is
// still one of this relay's (a revocation empties every process's cache at
// once through the "tokens" notification; this is the safety net).
const peerTokenTTL = 30 * time.Second

// peerTok is what a process knows of a peer token: valid until, and the
// relay it is tied to ("" before its first call; a tie never changes).
type peerTok struct {
	until   time.Time // (Options.Timers)
	bound   string
	scope   string    // "" until read (a scope never changes)
	touched time.Time // lastUsedAt last written by this process (wall clock)
}

// PeerTokenValid reports whether a bearer token is a peer token of this
// relay; a valid one is remembered for peerTokenTTL (one round trip less on
// every peer request).
func (tk *tokens) PeerTokenValid(ctx context.Context, tok string) (bool, error) {
	tk.peerMu.Lock()
	e, ok := tk.peers[tok]
	tk.peerMu.Unlock()
	now := tk.opts.Timers.Now()
	if ok && now.Before(e.until) {
		tk.touchPeerToken(ctx, tok)
		return true, nil
	}
	valid, err := tk.st.PeerTokenValid(ctx, tok)
	if err != nil || !valid {
		return valid, err
	}
	tk.peerMu.Lock()
	e = tk.peers[tok]
	e.until = now.Add(peerTokenTTL)
	tk.peers[tok] = e
	tk.peerMu.Unlock()
	tk.touchPeerToken(ctx, tok)
	return true, nil
}

// bindPeerToken is store.BindPeerToken, remembered once tied.
func (tk *tokens) bindPeerToken(ctx context.Context, tok, relayName string) (string, error) {
	return tk.peerField(ctx, tok, func(e *peerTok) *string { return &e.bound },
		func(ctx context.Context) (string, error) { return tk.st.BindPeerToken(ctx, tok, relayName) })
}

// peerField is a field of a peer token's cached entry (field picks it):
// its value once set, else what load reads, kept when not empty and only
// for tokens found valid (an entry in peers).
func (tk *tokens) peerField(ctx context.Context, tok string, field func(*peerTok) *string, load func(context.Context) (string, error)) (string, error) {
	tk.peerMu.Lock()
	e := tk.peers[tok]
	tk.peerMu.Unlock()
	if v := *field(&e); v != "" {
		return v, nil
	}
	v, err := load(ctx)
	if err != nil || v == "" {
		return v, err
	}
	tk.peerMu.Lock()
	if cur, ok := tk.peers[tok]; ok {
		*field(&cur) = v
		tk.peers[tok] = cur
	}
	tk.peerMu.Unlock()
	return v, nil
}

// PeerTokens lists the peer tokens this relay issued (GET /api/v1/peer-tokens):
// id, the relay bound at first use, createdAt, lastUsedAt; never the token.
func (tk *tokens) PeerTokens(ctx context.Context) ([]store.PeerTokenInfo, error) {
	return tk.st.PeerTokens(ctx)
}

// RevokePeerToken revokes a peer token (DELETE /api/v1/peer-tokens/{id}): at
// once in every process (the "tokens" notification empties every process's
// token caches), and the relay name it was bound to is free again.
func (tk *tokens) RevokePeerToken(ctx context.Context, id string) (*relay.PeerTokenRevoked, error) {
	ok, err := tk.st.RevokePeerToken(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("revoke peer token %s: %w", id, err)
	}
	if !ok {
		return nil, Errorf(CodeNotFound, "No peer token %q. Nothing was revoked.", id)
	}
	tk.dropTokens()
	if err := tk.st.Notify(ctx, "tokens"); err != nil {
		tk.log.Warn("peer token revoked, but other processes were not told (they notice within 30 s)", "err", err)
	}
	tk.log.Info("peer token revoked", "id", id)
	return &relay.PeerTokenRevoked{ID: strings.ToLower(id), Revoked: true}, nil
}

// peerScope is a peer token's scope (store.PeerScopeAll or
// store.PeerScopeStarted), remembered once read.
func (tk *tokens) peerScope(ctx context.Context, tok string) (string, error) {
	return tk.peerField(ctx, tok, func(e *peerTok) *string { return &e.scope },
		func(ctx context.Context) (string, error) { return tk.st.PeerTokenScope(ctx, tok) })
}

// peerTouchEvery is how often a process records a peer token's lastUsedAt.
const peerTouchEvery = time.Minute

// touchPeerToken records that tok was used, at most once a minute per process.
func (tk *tokens) touchPeerToken(ctx context.Context, tok string) {
	now := time.Now()
	tk.peerMu.Lock()
	e, ok := tk.peers[tok]
	due := ok && now.Sub(e.touched) >= peerTouchEvery
	if due {
		e.touched = now
		tk.peers[tok] = e
	}
	tk.peerMu.Unlock()
	if due {
		if err := tk.st.TouchPeerToken(ctx, tok, tk.now()); err != nil {
			tk.log.Warn("record a peer token's last use", "err", err)
		}
	}
}

// peerBound is the relay a peer token is bound to ("" before its first call).
func (tk *tokens) peerBound(ctx context.Context, tok string) (string, error) {
	tk.peerMu.Lock()
	e := tk.peers[tok]
	tk.peerMu.Unlock()
	if e.bound != "" {
		return e.bound, nil
	}
	return tk.st.PeerTokenRelay(ctx, tok)
}
