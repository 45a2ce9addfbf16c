package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/web"
)

// ownerOrCookie lets a request into the owner API with the owner token
// (Authorization: Bearer, as before) or with the console's sign-in cookie
// (R19.1). With the cookie, a state-changing request must come from the
// relay's own origin (Origin names this host), so another site cannot make
// the owner's browser change anything.
func ownerOrCookie(auth *web.Auth) gin.HandlerFunc {
	return func(c *gin.Context) {
		if got := bearerToken(c.Request); got != "" {
			if !auth.CheckToken(got) {
				c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "The owner API needs Authorization: Bearer <owner token>.", "code": domain.CodeAuth})
				return
			}
			c.Next()
			return
		}
		if auth.Cookie(c.Request) {
			if !web.Safe(c.Request.Method) && !web.SameOrigin(c.Request) {
				c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "This request carries the console's cookie but does not come from this relay's own page (Origin). Nothing was done.",
					"code": domain.CodeForbidden})
				return
			}
			c.Next()
			return
		}
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "The owner API needs Authorization: Bearer <owner token>.", "code": domain.CodeAuth})
	}
}

// EdgeStore is what the HTTP edge needs from the store: the console's
// sign-in records and the notification channel (R19.6).
type EdgeStore interface {
	web.Sessions
	SubscribeNotify(ctx context.Context) *redis.PubSub
}

// streams serves GET /api/v1/stream: Server-Sent Events telling the owner's
// console what changed (R19.6). Each stream follows the relay's notification
// channel in Redis, so it sees changes made by any process of the relay.
type streams struct {
	r    *domain.Relay
	st   EdgeStore
	mu   sync.Mutex
	stop chan struct{}
	keep time.Duration
	srvs map[*http.Server]bool
}

func newStreams(r *domain.Relay, st EdgeStore) *streams {
	return &streams{r: r, st: st, stop: make(chan struct{}), keep: 15 * time.Second, srvs: map[*http.Server]bool{}}
}

// onShutdown makes the server's Shutdown end the open streams (they would
// otherwise hold it for its whole grace period); once per server.
func (s *streams) onShutdown(srv *http.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.srvs[srv] {
		s.srvs[srv] = true
		srv.RegisterOnShutdown(s.StopAll)
	}
}

// StopAll ends every open stream (the server is shutting down; browsers reconnect).
func (s *streams) StopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}

func (s *streams) stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop
}

// streamEvent maps a notification to the event the console gets ("" = none).
func streamEvent(payload string) (event, data string) {
	switch {
	case strings.HasPrefix(payload, "session:"):
		return "session", strings.TrimPrefix(payload, "session:")
	case strings.HasPrefix(payload, "turn:"):
		return "turn", strings.TrimPrefix(payload, "turn:")
	case payload == "cards" || strings.HasPrefix(payload, "card:"):
		return "cards", strings.TrimPrefix(strings.TrimPrefix(payload, "cards"), "card:")
	case payload == "sessions": // the list itself: groups, a subscription to all sessions
		return "sessions", ""
	case payload == "inbox":
		return "inbox", ""
	case payload == "settings":
		return "settings", ""
	case strings.HasPrefix(payload, "q:"):
		return "question", strings.TrimPrefix(payload, "q:")
	case strings.HasPrefix(payload, "notice:"): // an owner notification (R23.10): relay.OwnerNotice as JSON, one line
		return "notice", strings.TrimPrefix(payload, "notice:")
	}
	return "", ""
}

// handle serves one stream. `?once=1` sends the hello event and ends (a
// probe of the credentials without holding a connection).
func (s *streams) handle(c *gin.Context) {
	if srv, ok := c.Request.Context().Value(http.ServerContextKey).(*http.Server); ok {
		s.onShutdown(srv)
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	ps := s.st.SubscribeNotify(ctx)
	defer func() { _ = ps.Close() }()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := ps.Receive(rctx)
	rcancel()
	if err != nil {
		if e := domain.AsError(err); e.Code == domain.CodeUnavailable { // R25.3
			fail(c, e)
			return
		}
		c.JSON(http.StatusServiceUnavailable, gin.H{"error": "Redis is not reachable; try again.", "code": domain.CodeInternal})
		return
	}
	if !s.hello(c.Writer) || c.Query("once") != "" {
		return
	}
	s.pump(ctx, c.Writer, ps.Channel())
}

// hello starts the event stream and sends its hello event (the relay's
// name); false when the connection is gone.
func (s *streams) hello(w gin.ResponseWriter) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// retry: the browser reconnects 1 s after the stream ends (a relay restart).
	if _, err := fmt.Fprintf(w, "retry: 1000\n\nevent: hello\ndata: %s\n\n", s.r.Name()); err != nil {
		return false
	}
	w.Flush()
	return true
}

// pump sends the notifications of msgs as events, and a keep-alive comment
// every s.keep, until the request ends, the streams stop, or the connection
// is gone.
func (s *streams) pump(ctx context.Context, w gin.ResponseWriter, msgs <-chan *redis.Message) {
	keep := time.NewTicker(s.keep)
	defer keep.Stop()
	stop := s.stopped()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			ev, data := streamEvent(m.Payload)
			if ev == "" {
				continue
			}
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, data)
		case <-keep.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err != nil {
			return
		}
		w.Flush()
	}
}

// router is the handler NewRouter returns: the gin engine (its Routes list
// every route) and the console's streams.
type router struct {
	*gin.Engine
	streams *streams
}

// StopStreams ends the open /api/v1/stream responses (http.Server.Shutdown
// does it by itself through RegisterOnShutdown; this is for other servers).
func (r *router) StopStreams() { r.streams.StopAll() }
