package api

import (
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// The HTTP server's own bounds (R18.18), so that no caller can starve
// another session's turns, /healthz or the owner API by opening connections.
const (
	// MaxHeaderBytes bounds a request's header (431 above it).
	MaxHeaderBytes = 32 << 10
	// IdleTimeout closes a keep-alive connection that sends no request.
	IdleTimeout = 2 * time.Minute
	// ReadHeaderTimeout closes a connection that does not send its request
	// header in time (slowloris).
	ReadHeaderTimeout = 10 * time.Second
	// BodyTimeout bounds the reading of a request's body, from the end of its
	// header (R18.29): a client that trickles one in holds its connection
	// (and its handler) no longer.
	BodyTimeout = 10 * time.Second
	// slowHeader is how long a connection may be reading a request without
	// its handler having started before it counts as idle for eviction.
	slowHeader = time.Second
)

// MaxConns is how many connections relay serve keeps open at once: a quarter
// of the process's file descriptors (RLIMIT_NOFILE; Go raises the soft limit
// to the hard one at start), at least 64, at most 2,048. The rest of the
// descriptors stay for Redis, agent processes and their files.
func MaxConns() int {
	var rl syscall.Rlimit
	n := 2048
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/4 < uint64(n) {
		n = int(rl.Cur / 4)
	}
	return max(n, 64)
}

// ServerOptions adjusts [NewServerWith]; the zero value is relay serve's.
type ServerOptions struct {
	// BodyTimeout bounds the reading of a request's body (default
	// [BodyTimeout]; tests run a shorter one).
	BodyTimeout time.Duration
	// MaxConns is the bound of open connections (default [MaxConns]()).
	MaxConns int
}

// NewServer returns the http.Server of relay serve for handler h: bounded
// header size, idle and header timeouts, a body read deadline, and at most
// MaxConns open connections (see [Conns]). No WriteTimeout and no
// ReadTimeout: tool calls, waits and the console's stream run long.
func NewServer(h http.Handler) *http.Server { return NewServerWith(h, ServerOptions{}) }

// NewServerWith is [NewServer] with its bounds set by o.
func NewServerWith(h http.Handler, o ServerOptions) *http.Server {
	if o.MaxConns <= 0 {
		o.MaxConns = MaxConns()
	}
	cl := NewConns(o.MaxConns)
	if o.BodyTimeout > 0 {
		cl.bodyTimeout = o.BodyTimeout
	}
	return &http.Server{
		Handler:           cl.Handler(h),
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnState:         cl.ConnState,
		ConnContext:       cl.ConnContext,
	}
}

// Conns bounds a server's open connections without refusing new ones: when a
// new connection makes more than max, the one that has been doing nothing the
// longest is closed — a new connection that sent nothing yet, a keep-alive one
// between requests, one whose handler has returned (net/http may still read
// the rest of an unread body there, since Go 1.26.9), or one still sending
// its request header after slowHeader — so a flood of idle connections only ever pushes out its own
// (and idle keep-alives, which clients re-open), while /healthz, the owner
// API and running calls get through. A connection whose handler runs is never
// closed; only when every connection runs a handler is the new one closed.
// (net/http's ReadTimeout cannot bound a body without cancelling the long
// requests after it, so [Conns.Handler] sets a read deadline for the body
// alone: a trickled body does not hold a handler forever.)
type Conns struct {
	max         int
	bodyTimeout time.Duration

	mu     sync.Mutex
	order  *list.List // of *connEntry, the least recently busy first
	byConn map[net.Conn]*list.Element
	open   int // connections not being closed by us
}

type connEntry struct {
	c        net.Conn
	state    http.ConnState
	since    time.Time // last state change or handler end
	handlers int       // handlers running on it (0 or 1 for HTTP/1)
	// served: its last handler has returned and no new request has begun.
	// net/http may still be at work on it (since Go 1.26.9 it reads what is
	// left of an unread body after the answer, until the body's deadline),
	// but it reads no request's header: it may be closed like an idle one.
	served  bool
	closing bool // closed by us; its StateClosed is still to come
}

// NewConns returns a limiter for at most max open connections.
func NewConns(max int) *Conns {
	return &Conns{max: max, bodyTimeout: BodyTimeout, order: list.New(), byConn: map[net.Conn]*list.Element{}}
}

type connKey struct{}

// ConnContext is the http.Server hook that lets a request find its connection.
func (l *Conns) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ConnState is the http.Server hook that tracks the connections.
func (l *Conns) ConnState(c net.Conn, s http.ConnState) {
	now := time.Now()
	var evict []net.Conn
	l.mu.Lock()
	switch s {
	case http.StateNew:
		l.byConn[c] = l.order.PushBack(&connEntry{c: c, state: s, since: now})
		l.open++
		evict = l.evictLocked(now)
	case http.StateActive, http.StateIdle:
		if el, ok := l.byConn[c]; ok {
			e := el.Value.(*connEntry)
			e.state, e.since, e.served = s, now, false
			l.order.MoveToBack(el)
		}
	case http.StateHijacked, http.StateClosed:
		if el, ok := l.byConn[c]; ok {
			if !el.Value.(*connEntry).closing {
				l.open--
			}
			l.order.Remove(el)
			delete(l.byConn, c)
		}
	}
	l.mu.Unlock()
	for _, c := range evict {
		_ = c.Close()
	}
}

// evictLocked picks connections to close while more than max are open: the
// least recently busy one that runs no handler first.
func (l *Conns) evictLocked(now time.Time) []net.Conn {
	var out []net.Conn
	for el := l.order.Front(); el != nil && l.open > l.max; el = el.Next() {
		e := el.Value.(*connEntry)
		if e.closing || e.handlers > 0 {
			continue
		}
		if e.state == http.StateActive && !e.served && now.Sub(e.since) < slowHeader {
			continue // reading a request's header right now
		}
		e.closing = true
		l.open--
		out = append(out, e.c)
	}
	return out
}

// Open is how many connections are open and not being closed.
func (l *Conns) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Handler marks the connection of each request busy while h runs, and gives
// the request's body BodyTimeout to arrive.
func (l *Conns) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		l.busy(c, 1)
		defer l.busy(c, -1)
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(l.bodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (l *Conns) busy(c net.Conn, d int) {
	if c == nil {
		return
	}
	l.mu.Lock()
	if el, ok := l.byConn[c]; ok {
		e := el.Value.(*connEntry)
		e.handlers += d
		e.since = time.Now()
		e.served = d < 0 && e.handlers == 0
		l.order.MoveToBack(el)
	}
	l.mu.Unlock()
}

// deadlineBody lifts the body's read deadline once the body was read to its
// end: net/http then reads the connection in the background to see a client
// go away, and a deadline there would cancel a long request.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
