package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/web"
)

// limitTokens slows failed authentication on a route (R18.23) without ever
// refusing a correct token (R18.30): a presented bearer token is checked with
// valid first; a correct one is served at once (the request has proved its
// token, see [proven]), whatever came from its address before; a wrong one is
// counted by its address and its prefix, and answered 429 with Retry-After
// while either count is over web.MaxFailures in its window, else it goes on to
// the route's own check (401 as before). A request without a token is not
// counted, and neither is the console's cookie: its id cannot be guessed, and
// a browser with a stale one must not lock its owner out.
func limitTokens(f *web.Failures, valid func(ctx context.Context, token string) (bool, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		tok := bearerToken(c.Request)
		if tok == "" {
			c.Next()
			return
		}
		ok, err := valid(c.Request.Context(), tok)
		if err == nil && ok {
			proven(c)
			c.Next()
			return
		}
		if err == nil {
			if d := f.Fail(c.Request, tok); d > 0 {
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
