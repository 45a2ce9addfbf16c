package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/web"
)

// limitTokens slows failed authentication on a route (R18.23): while the
// caller's address is refused (more than web.MaxFailures failed tokens within
// the window) any request of it that presents a bearer token is answered 429
// with Retry-After; otherwise the token is checked with valid, a wrong one is
// counted, and the request goes on to the route's own check (401 as before)
// unless this failure was one too many (429). A request without a token is
// not counted, and neither is the console's cookie: its id cannot be guessed,
// and a browser with a stale one must not lock its owner out.
func limitTokens(f *web.Failures, valid func(ctx context.Context, token string) (bool, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		tok := bearerToken(c.Request)
		if tok == "" {
			c.Next()
			return
		}
		if d := f.Blocked(c.Request); d > 0 {
			tooMany(c, d)
			return
		}
		ok, err := valid(c.Request.Context(), tok)
		if err == nil && !ok {
			if d := f.Fail(c.Request); d > 0 {
				tooMany(c, d)
				return
			}
		}
		c.Next()
	}
}

func tooMany(c *gin.Context, d time.Duration) {
	web.RetryAfter(c.Writer, d)
	c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": web.TooManyMessage(d), "code": domain.CodeAuth})
}
