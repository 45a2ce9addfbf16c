package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oar/relay"
)

// CookieName is the console's sign-in cookie.
const CookieName = "relay_owner"

// cookieLife is how long a sign-in lasts.
const cookieLife = 30 * 24 * time.Hour

// Sessions keeps the console's sign-in sessions (the store's console
// sessions, R18.22).
type Sessions interface {
	AddConsoleSession(ctx context.Context, id, owner string, ttl time.Duration) error
	ConsoleSession(ctx context.Context, id string) (owner string, ok bool, err error)
	EndConsoleSession(ctx context.Context, id string) error
}

// Auth checks the owner token and keeps the console's sign-in: a server-side
// session (R18.22). The cookie holds only a random id; the session's record
// (in Redis, through Sessions) names the owner token it was signed in with by
// a fingerprint, so signing out ends it at once in every process, and a
// rotated owner token ends every session signed in with the old one. The
// cookie never contains the token.
//
// Auth keeps only the owner token's hex SHA-256 (R18.19: a relay started
// again without --owner-token has only the stored hash of the token it
// generated); a presented token is hashed and compared with it.
type Auth struct {
	hash     string // hex SHA-256 of the owner token ("": none, nothing passes)
	owner    string // fingerprint of the token, kept with each session
	sessions Sessions
	now      func() time.Time
}

// NewAuth returns the owner-token check and console sign-in for an owner
// token, its sessions kept in sessions.
func NewAuth(ownerToken string, sessions Sessions) *Auth {
	if ownerToken == "" {
		return NewAuthHash("", sessions)
	}
	return NewAuthHash(tokenHash(ownerToken), sessions)
}

// NewAuthHash is NewAuth from the owner token's hex SHA-256 only (the form
// the store keeps of a generated owner token). A console session signed in
// with the token has the same fingerprint either way.
func NewAuthHash(ownerTokenHash string, sessions Sessions) *Auth {
	ownerTokenHash = strings.ToLower(ownerTokenHash)
	return &Auth{hash: ownerTokenHash, owner: ownerFingerprint(ownerTokenHash), sessions: sessions, now: time.Now}
}

func tokenHash(tok string) string { return relay.TokenHash(tok) } // the form the store keeps

// ownerFingerprint is what a console session keeps of the owner token: made
// from the token's hex SHA-256 (the form the store keeps of a generated owner
// token), never the token, and not that hash itself either.
func ownerFingerprint(tokenHash string) string {
	k := sha256.Sum256([]byte("relay console session v2\x00" + tokenHash))
	return hex.EncodeToString(k[:])
}

// CheckToken reports whether s is the owner token (constant time).
// It compares the token's hash with the kept one.
func (a *Auth) CheckToken(s string) bool {
	return a.hash != "" && s != "" && subtle.ConstantTimeCompare([]byte(tokenHash(s)), []byte(a.hash)) == 1
}

// cookiePrefix marks a v2 cookie: a session id, nothing signed.
const cookiePrefix = "v2."

// sessionID returns the session id of the request's cookie ("" without one).
func sessionID(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	id, ok := strings.CutPrefix(c.Value, cookiePrefix)
	if !ok || len(id) != 43 { // 32 random bytes, base64url
		return ""
	}
	return id
}

// Cookie reports whether the request carries the cookie of a live console
// session signed in with the owner token in force. A store that does not
// answer counts as signed out (the page shows the sign-in).
func (a *Auth) Cookie(r *http.Request) bool {
	id := sessionID(r)
	if a.hash == "" || id == "" || a.sessions == nil {
		return false
	}
	owner, ok, err := a.sessions.ConsoleSession(r.Context(), id)
	return err == nil && ok && subtle.ConstantTimeCompare([]byte(owner), []byte(a.owner)) == 1
}

// SetCookie signs the browser in: a new session, its id in the cookie.
func (a *Auth) SetCookie(w http.ResponseWriter, r *http.Request) error {
	if a.sessions == nil {
		return errors.New("no session store")
	}
	var n [32]byte
	_, _ = rand.Read(n[:])
	id := base64.RawURLEncoding.EncodeToString(n[:])
	if err := a.sessions.AddConsoleSession(r.Context(), id, a.owner, cookieLife); err != nil {
		return err
	}
	exp := a.now().Add(cookieLife)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookiePrefix + id, Path: "/", Expires: exp,
		MaxAge: int(cookieLife / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return nil
}

// SignOut ends the request's console session (its cookie stops working at
// once, wherever it was copied) and clears the cookie.
func (a *Auth) SignOut(w http.ResponseWriter, r *http.Request) error {
	var err error
	if id := sessionID(r); id != "" && a.sessions != nil {
		err = a.sessions.EndConsoleSession(r.Context(), id)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Expires: time.Unix(1, 0),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return err
}

// secure: the cookie is Secure when the browser reached the relay over TLS
// (directly or through a TLS-terminating proxy that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// SameOrigin reports whether a state-changing request comes from the relay's
// own pages: its Origin header (or, when a browser sent none, its Referer)
// names the host the request was sent to. A request with neither, or with
// Origin "null", is refused.
func SameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "null" {
		return false
	}
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// Safe reports whether a method changes nothing (no Origin check needed).
func Safe(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}
