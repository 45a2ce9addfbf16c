package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CookieName is the console's sign-in cookie.
const CookieName = "relay_owner"

// cookieLife is how long a sign-in lasts.
const cookieLife = 30 * 24 * time.Hour

// Auth signs and checks the console's sign-in cookie. The cookie holds an
// expiry and a random nonce, signed with a key derived from the owner token:
// it never contains the token, it survives a restart of the relay, and it
// stops working when the owner token changes. Signing out clears it in the
// browser.
type Auth struct {
	token string
	key   []byte
	now   func() time.Time
}

// NewAuth returns the cookie signer for an owner token.
func NewAuth(ownerToken string) *Auth {
	k := sha256.Sum256([]byte("relay console cookie v1\x00" + ownerToken))
	return &Auth{token: ownerToken, key: k[:], now: time.Now}
}

// CheckToken reports whether s is the owner token (constant time).
func (a *Auth) CheckToken(s string) bool {
	return a.token != "" && s != "" && subtle.ConstantTimeCompare([]byte(s), []byte(a.token)) == 1
}

func (a *Auth) sign(payload string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(payload))
	return hex.EncodeToString(m.Sum(nil))
}

// value makes a new cookie value valid until exp.
func (a *Auth) value(exp time.Time) string {
	var n [12]byte
	_, _ = rand.Read(n[:])
	payload := "v1." + strconv.FormatInt(exp.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(n[:])
	return payload + "." + a.sign(payload)
}

// valid checks a cookie value: signature and expiry.
func (a *Auth) valid(v string) bool {
	if a.token == "" {
		return false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	payload, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(sig), []byte(a.sign(payload))) {
		return false
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	return err == nil && a.now().Unix() < exp
}

// Cookie reports whether the request carries a valid sign-in cookie.
func (a *Auth) Cookie(r *http.Request) bool {
	c, err := r.Cookie(CookieName)
	return err == nil && a.valid(c.Value)
}

// SetCookie signs the browser in.
func (a *Auth) SetCookie(w http.ResponseWriter, r *http.Request) {
	exp := a.now().Add(cookieLife)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: a.value(exp), Path: "/", Expires: exp,
		MaxAge: int(cookieLife / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// ClearCookie signs the browser out.
func ClearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Expires: time.Unix(1, 0),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
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
