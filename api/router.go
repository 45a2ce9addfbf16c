// Package api is the relay's HTTP edge: the gin router with POST /mcp (the
// MCP server), the owner API under /api/v1, health and metrics. It turns
// requests into domain calls and domain errors into responses, in one place.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/metrics"
	"github.com/oar/relay/web"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// Options configures the router.
type Options struct {
	Relay *domain.Relay
	// Store is what the edge keeps besides the domain's data: the console's
	// sign-in records and the notification channel its live stream follows
	// (package store's Store is one). Required with Relay.
	Store      EdgeStore
	Metrics    *metrics.Metrics
	OwnerToken string
	// OwnerTokenHash is the hex SHA-256 of the owner token, used when
	// OwnerToken is "" (a relay that generated its owner token at an earlier
	// start keeps only its hash, R18.19).
	OwnerTokenHash string
	// Ready reports whether the process can serve (Redis reachable, not draining).
	Ready  func(ctx context.Context) error
	MCP    MCPOptions
	Logger *slog.Logger
	// PublicURL is --public-url: its host is accepted in Host on a loopback
	// listener (R18.24) as the loopback names are.
	PublicURL string
	// AuthWindow is the window of failed-token counting (R18.23); default a
	// minute (tests run a shorter one).
	AuthWindow time.Duration
	// MaxUnproven bounds the requests reading a body without a proven token
	// at once (R18.29; default [DefaultMaxUnproven]).
	MaxUnproven int
}

// NewRouter builds the HTTP handler of `relay serve`.
func NewRouter(o Options) http.Handler {
	if o.Relay != nil && o.Store == nil {
		panic("api.NewRouter: Options.Store is required with Options.Relay (the console's sign-in records and live stream)")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	g := gin.New()
	// R18.29: bodies are read before any other work, each within its bound (body.go).
	bodies := newBodies(o.MaxUnproven)
	g.Use(gin.Recovery(), logRequests(o.Logger, o.Metrics), closeUntilRead,
		hostGuard(o.PublicURL, o.MCP.DisableLocalhostProtection), bodies.entry)
	g.HandleMethodNotAllowed = true
	// hostGuard checks Host on every route, /mcp too, with the public URL's
	// host allowed: the SDK's own check (which would refuse that host) is off.
	mcpOpts := o.MCP
	mcpOpts.DisableLocalhostProtection = true
	mcpH := gin.WrapH(NewMCPHandler(o.Relay, mcpOpts))
	// R18.23, R18.30: wrong tokens of every kind count per address and per
	// prefix in one window; a correct token is always served.
	fails := web.NewFailures(o.AuthWindow)
	var sessions web.Sessions // nil without a store (the docs test's router)
	if o.Store != nil {
		sessions = o.Store
	}
	auth := web.NewAuth(o.OwnerToken, sessions)
	if o.OwnerToken == "" && o.OwnerTokenHash != "" {
		auth = web.NewAuthHash(o.OwnerTokenHash, sessions)
	}
	limitMCP := limitTokens(fails, func(ctx context.Context, tok string) (bool, error) {
		_, ok, err := o.Relay.SessionForToken(ctx, tok)
		return ok, err
	})
	readMCP := bodies.read(maxMCPBody, mcpTooLarge)
	g.POST("/mcp", limitMCP, readMCP, mcpH)
	g.GET("/mcp", limitMCP, readMCP, mcpH)
	g.DELETE("/mcp", limitMCP, readMCP, mcpH)
	AddHealth(g, o.Ready, o.Metrics)
	v1 := g.Group("/api/v1", limitTokens(fails, func(_ context.Context, tok string) (bool, error) { return auth.CheckToken(tok), nil }),
		ownerOrCookie(auth), provenHere, bodies.read(maxBody, tooLarge(maxBody)))
	ow := &owner{r: o.Relay}
	ow.routes(v1)
	pr := &peer{r: o.Relay}
	pr.routes(g.Group("/peer/v1", limitTokens(fails, func(ctx context.Context, tok string) (bool, error) { return o.Relay.PeerTokenValid(ctx, tok) }), pr.auth,
		provenHere, bodies.read(maxPeerBody, tooLarge(maxPeerBody))))
	sse := newStreams(o.Relay, o.Store)
	// The owner's console (R19): GET / and its pages; live updates on /api/v1/stream.
	v1.GET("/stream", sse.handle)
	web.Register(g, web.Options{Relay: o.Relay, Auth: auth, Logger: o.Logger, Failures: fails})
	g.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, gin.H{"error": "No such route: " + c.Request.Method + " " + c.Request.URL.Path, "code": domain.CodeNotFound})
	})
	g.NoMethod(func(c *gin.Context) {
		c.JSON(http.StatusMethodNotAllowed, gin.H{"error": "Method " + c.Request.Method + " is not allowed on " + c.Request.URL.Path + ". Nothing was done.",
			"code": domain.CodeInvalidInput})
	})
	return &router{Engine: g, streams: sse}
}

// AddHealth adds /healthz, /readyz and /metrics (also used by `relay worker --metrics-addr`).
func AddHealth(g *gin.Engine, ready func(context.Context) error, m *metrics.Metrics) {
	g.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	g.GET("/readyz", func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if ready != nil {
			if err := ready(ctx); err != nil {
				_ = c.Error(err) // the log line's cause: a store that does not answer is rate-limited (R25.3)
				c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": readyReason(err)})
				return
			}
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
	if m != nil {
		g.GET("/metrics", gin.WrapH(m.Handler()))
	}
}

// NewHealthRouter serves only health and metrics (relay worker --metrics-addr).
func NewHealthRouter(ready func(context.Context) error, m *metrics.Metrics) http.Handler {
	g := gin.New()
	g.Use(gin.Recovery(), hostGuard("", false)) // R18.24, as on relay serve's listener
	AddHealth(g, ready, m)
	return g
}

func logRequests(log *slog.Logger, m *metrics.Metrics) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		status := c.Writer.Status()
		kind := "api"
		switch {
		case strings.HasPrefix(route, "/mcp"):
			kind = "mcp"
		case route == "/metrics":
			kind = "metrics"
		case route == "/healthz" || route == "/readyz":
			kind = "health"
		case strings.HasPrefix(route, "/peer"):
			kind = "peer"
		}
		if m != nil {
			m.HTTPRequest(kind, status)
		}
		if status >= 500 {
			// R18.9: every 5xx at ERROR with its error chain (never the body or a token).
			args := []any{"method", c.Request.Method, "route", route, "status", status, "duration", time.Since(start)}
			if errs := c.Errors.ByType(gin.ErrorTypeAny); len(errs) > 0 {
				args = append(args, "err", requestErrors{text: errs.String(), errs: errs})
			}
			log.Error("http request failed", args...)
			return
		}
		if kind == "metrics" || kind == "health" {
			return
		}
		log.Debug("http", "method", c.Request.Method, "route", route, "status", status, "duration", time.Since(start))
	}
}

// requestErrors are a request's errors in its log line: their text as gin
// writes it, and the errors themselves underneath, so the log handler finds
// a store that does not answer among them (R25.3).
type requestErrors struct {
	text string
	errs []*gin.Error
}

func (e requestErrors) Error() string { return e.text }

func (e requestErrors) Unwrap() []error {
	out := make([]error, 0, len(e.errs))
	for _, x := range e.errs {
		out = append(out, x.Err)
	}
	return out
}

func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// readyReason says why the process is not ready without internals (addresses).
func readyReason(err error) string {
	if strings.Contains(err.Error(), "shutting down") {
		return "shutting down"
	}
	return "Redis is not reachable"
}
