package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/web"
)

// Request bodies (R18.29). Every route has its body read whole, within the
// route's size limit and the server's body deadline ([BodyTimeout], set on the
// connection by [Conns.Handler]), before it does any other work, so no
// handler holds a lock, a tool-call slot or a store call while a client
// trickles a body in. Who waits for a body is bounded:
//
//   - A route that takes a token (/mcp, /api/v1, /peer/v1) checks it from the
//     header first and reads the body only once the token proved good; a
//     request whose token is missing or wrong is refused with its body unread
//     and its connection closed ([closeUntilRead]). One credential has at most
//     MaxBodyReadsPerToken bodies arriving at once (more: 429 at once).
//   - A request that has no token to prove before its body (the console's
//     sign-in, whose form holds the token, and every route that takes no body)
//     reads it within a bound of its own, [Options.MaxUnproven] such requests
//     at once (more: 429 at once, nothing read; not a 5xx, which R18.9 logs
//     at ERROR, so the refusals of a flood fill no log).
//
// So one client or one token holding thousands of slow bodies holds at most
// those few handlers; its other connections are closed at once or, before
// their request header is in, by [Conns], and /healthz, the owner API and
// every other session keep answering.
const (
	// MaxBodyReadsPerToken is how many requests of one token (or console
	// sign-in) may have their bodies arriving at once.
	MaxBodyReadsPerToken = 16
	// maxPlainBody bounds the body of a route that takes none (health, the
	// console's pages, the sign-out, an unknown route).
	maxPlainBody = 64 << 10
)

// DefaultMaxUnproven is how many requests may be reading a body without a
// proven token at once: an eighth of MaxConns, at least 16.
func DefaultMaxUnproven() int { return max(16, MaxConns()/8) }

// bodies bounds the requests that wait for their bodies.
type bodies struct {
	unproven chan struct{} // a slot per request reading a body without a proven token

	mu      sync.Mutex
	reading map[string]int // credential → its proven requests reading their bodies
}

func newBodies(maxUnproven int) *bodies {
	if maxUnproven <= 0 {
		maxUnproven = DefaultMaxUnproven()
	}
	return &bodies{unproven: make(chan struct{}, maxUnproven), reading: map[string]int{}}
}

const provenKey = "relay.tokenProven"

// proven marks the request as having proved its token (its body is then read
// by [bodies.read] within the token's own bound).
func proven(c *gin.Context) { c.Set(provenKey, true) }

// provenHere marks every request that reached it as proven: it follows a
// check that refuses the others.
func provenHere(c *gin.Context) {
	proven(c)
	c.Next()
}

func hasBody(r *http.Request) bool { return r.Body != nil && r.Body != http.NoBody }

// tokenRoute reports whether a route checks a token from the request's header
// before it reads a body.
func tokenRoute(path string) bool {
	return path == "/mcp" || strings.HasPrefix(path, "/api/v1/") || strings.HasPrefix(path, "/peer/v1/")
}

// closeUntilRead is the router's first word on a request with a body: until
// its body was read whole, an answer closes the connection, so a request
// refused before its body was read (a wrong Host, token or origin, a bound)
// never has the rest of its body read by the server after the handler
// either. readBody (and the sign-in's form reading) lift it.
func closeUntilRead(c *gin.Context) {
	if hasBody(c.Request) {
		c.Header("Connection", "close")
	}
	c.Next()
}

// entry sees to a request with a body once its Host was checked. A token
// route goes on: its token is checked from the header and only then is its
// body read ([bodies.read]). Any other request takes a slot of the unproven
// bound (none free: 429, nothing read) while its body is read: the sign-in's
// for as long as it runs (it checks its origin and failures, then reads its
// form itself), every other route's here, first.
func (b *bodies) entry(c *gin.Context) {
	if !hasBody(c.Request) {
		c.Next()
		return
	}
	path := c.FullPath()
	if tokenRoute(path) {
		c.Next()
		return
	}
	select {
	case b.unproven <- struct{}{}:
	default:
		c.Header("Retry-After", "1")
		c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": "The relay is reading as many requests without a token as it takes at once; try again in a moment. Nothing was done.",
			"code": domain.CodeBusy})
		return
	}
	if path == "/signin" {
		defer func() { <-b.unproven }() // it reads its form in its handler
		c.Next()
		return
	}
	ok := readBody(c, maxPlainBody, tooLarge(maxPlainBody))
	<-b.unproven
	if ok {
		c.Next()
	}
}

// read reads the body of a request that proved its token whole, within limit
// and the server's body deadline, before the route does anything; a request
// that did not prove one goes on unread (the route refuses it). At most
// MaxBodyReadsPerToken bodies of one credential are read at once: more are
// answered 429 at once, nothing read.
func (b *bodies) read(limit int64, large gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !hasBody(c.Request) || !c.GetBool(provenKey) {
			c.Next()
			return
		}
		key := credential(c.Request)
		if !b.take(key) {
			c.Header("Retry-After", "1")
			c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": "This token already has " + strconv.Itoa(MaxBodyReadsPerToken) +
				" requests whose bodies are still arriving, the most one token may have at once; send this one when one of them is in. Nothing was done.",
				"code": domain.CodeBusy})
			return
		}
		ok := readBody(c, limit, large)
		b.release(key)
		if ok {
			c.Next()
		}
	}
}

func (b *bodies) take(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reading[key] >= MaxBodyReadsPerToken {
		return false
	}
	b.reading[key]++
	return true
}

func (b *bodies) release(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reading[key]--; b.reading[key] <= 0 {
		delete(b.reading, key)
	}
}

// credential names what a proven request proved: its bearer token, else the
// console's cookie.
func credential(r *http.Request) string {
	if t := bearerToken(r); t != "" {
		return "t " + t
	}
	if ck, err := r.Cookie(web.CookieName); err == nil {
		return "c " + ck.Value
	}
	return ""
}

// readBody reads the request's body whole within limit (and the connection's
// read deadline) and puts it back as a buffer, the connection then kept; a
// refusal (large for a body over limit, 408 past the deadline, 400 else)
// closes it.
func readBody(c *gin.Context, limit int64, large gin.HandlerFunc) bool {
	switch web.ReadBody(c, limit) {
	case 0:
		return true
	case http.StatusRequestEntityTooLarge:
		large(c)
	case http.StatusRequestTimeout:
		c.JSON(http.StatusRequestTimeout, gin.H{"error": "The request's body did not arrive in time (the relay waits for a body at most " +
			strconv.Itoa(int(BodyTimeout.Seconds())) + " s). Nothing was done.", "code": domain.CodeInvalidInput})
	default:
		c.JSON(http.StatusBadRequest, gin.H{"error": "The request's body could not be read. Nothing was done.", "code": domain.CodeInvalidInput})
	}
	c.Abort()
	return false
}

// tooLarge answers a body over limit: 413 with the owner API's error body.
func tooLarge(limit int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.JSON(http.StatusRequestEntityTooLarge, gin.H{"error": fmt.Sprintf("The request body is too large (at most %d bytes). Nothing was done.", limit),
			"code": domain.CodeInvalidInput})
	}
}

// mcpTooLarge answers a /mcp body over the SDK's limit (as the SDK does).
func mcpTooLarge(c *gin.Context) { mcpBodyTooLarge(c.Writer) }

func mcpBodyTooLarge(w http.ResponseWriter) {
	http.Error(w, fmt.Sprintf("request body exceeds %d bytes", maxMCPBody), http.StatusRequestEntityTooLarge)
}
