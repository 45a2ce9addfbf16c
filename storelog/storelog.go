// Package storelog keeps a store that does not answer from flooding the log
// (R25.3): a slog.Handler in front of the process's own that lets each
// distinct failure through at ERROR once, then at most once a minute with a
// count while the outage lasts, and says "store reachable again" when a
// probe (Watch) finds the store answering. Every log line of the process
// goes through it, the queue library's (asynq) and go-redis's included. A
// failure is the store's when its error was marked by the store's client
// (store.UnreachableHook); a paired relay or a model endpoint that does not
// answer is not the store.
package storelog

import (
	"context"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/oar/relay/store"
)

// keyText is what a failure's key leaves out of its message: numbers and
// ids (ports, task ids), so the same failure stays one.
var keyText = regexp.MustCompile(`[0-9a-fA-F-]{8,}|[0-9]+`)

// Every is how often a failure already logged is logged again, with the
// count of its lines left out meanwhile, while the store does not answer.
const Every = time.Minute

// Handler is the rate-limiting slog.Handler.
type Handler struct {
	next slog.Handler
	s    *state // shared by the handlers WithAttrs and WithGroup derive
}

type state struct {
	now   func() time.Time
	mu    sync.Mutex
	down  time.Time     // when the outage started; zero while the store answers
	began chan struct{} // a token when an outage starts (Watch waits for it)
	seen  map[string]*failure
	quiet int // lines left out during this outage
	// root is the handler "store reachable again" is written through
	// (without the attrs or group a derived handler added).
	root slog.Handler
}

// failure is one distinct failure of this outage: a log message and the
// short cause of the store's silence.
type failure struct {
	logged time.Time // when a line of it was last let through
	left   int       // its lines left out since
}

// New wraps next.
func New(next slog.Handler) *Handler {
	return &Handler{next: next, s: &state{now: time.Now, seen: map[string]*failure{}, root: next, began: make(chan struct{}, 1)}}
}

// Enabled is next's.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// WithAttrs shares the outage state.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), s: h.s}
}

// WithGroup shares the outage state.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), s: h.s}
}

// Handle passes a record on unless it is a WARN or ERROR line about a store
// that does not answer which this outage already logged within Every. Such a
// line goes out at ERROR (with "repeated", the lines left out since the last
// one, after the first).
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	cause, ok := storeFailure(r)
	if !ok {
		return h.next.Handle(ctx, r)
	}
	key := keyText.ReplaceAllString(r.Message, "#") + "\x00" + cause
	now := h.s.now()
	h.s.mu.Lock()
	if h.s.down.IsZero() {
		h.s.down = now
		select {
		case h.s.began <- struct{}{}:
		default:
		}
	}
	f := h.s.seen[key]
	var repeated int
	switch {
	case f == nil:
		h.s.seen[key] = &failure{logged: now}
	case now.Sub(f.logged) >= Every:
		repeated = f.left
		f.logged, f.left = now, 0
	default:
		f.left++
		h.s.quiet++
		h.s.mu.Unlock()
		return nil
	}
	h.s.mu.Unlock()
	out := slog.NewRecord(r.Time, slog.LevelError, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	out.AddAttrs(slog.String("store", "does not answer ("+cause+")"))
	if repeated > 0 {
		out.AddAttrs(slog.Int("repeated", repeated), slog.String("over", Every.String()))
	}
	return h.next.Handle(ctx, out)
}

// Down says whether a store failure was logged and no probe found the store
// answering since.
func (h *Handler) Down() bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return !h.s.down.IsZero()
}

// Reachable ends the outage, if any: one INFO line "store reachable again"
// with how long it lasted and how many lines were left out.
func (h *Handler) Reachable(ctx context.Context) {
	h.s.mu.Lock()
	if h.s.down.IsZero() {
		h.s.mu.Unlock()
		return
	}
	took := h.s.now().Sub(h.s.down).Round(time.Millisecond)
	quiet := h.s.quiet
	h.s.down, h.s.quiet, h.s.seen = time.Time{}, 0, map[string]*failure{}
	h.s.mu.Unlock()
	r := slog.NewRecord(h.s.now(), slog.LevelInfo, "store reachable again", 0)
	r.AddAttrs(slog.Duration("after", took), slog.Int("lines_left_out", quiet))
	if h.s.root.Enabled(ctx, slog.LevelInfo) {
		_ = h.s.root.Handle(ctx, r)
	}
}

// Watch probes the store with ping every `every` while an outage is on, and
// ends it (Reachable) when ping succeeds, until ctx ends. Between outages it
// waits for the next one to start, with no timer (R25.4: an idle process's
// wake-ups).
func (h *Handler) Watch(ctx context.Context, every time.Duration, ping func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if !h.Down() {
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-h.s.began:
			}
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !h.Down() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := ping(pctx)
		cancel()
		if err == nil && ctx.Err() == nil {
			h.Reachable(ctx)
		}
	}
}

// storeFailure finds in a record the sign of a store that does not answer:
// an error among its attributes that the store's client marked so
// (store.Unreachable), or, in a line of the queue library (component=asynq,
// whose client is the store's and which logs text only), the words of one.
// It answers the short cause.
func storeFailure(r slog.Record) (string, bool) {
	var (
		cause string
		ok    bool
		queue bool
	)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "component" && a.Value.Kind() == slog.KindString && a.Value.String() == "asynq" {
			queue = true
		}
		if !ok {
			cause, ok = attrFailure(a)
		}
		return true
	})
	if !ok && queue {
		cause, ok = store.UnreachableText(r.Message)
	}
	return cause, ok
}

func attrFailure(a slog.Attr) (string, bool) {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		for _, g := range v.Group() {
			if c, ok := attrFailure(g); ok {
				return c, true
			}
		}
	case slog.KindAny:
		if err, isErr := v.Any().(error); isErr {
			return store.Unreachable(err)
		}
	}
	return "", false
}
