package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// UnreachableError is an error of the store's client that means the store
// does not answer (R25.3): a connection refused, reset or closed, a socket
// timeout, no free connection in the pool, a Redis still loading its data.
// The client's hook (UnreachableHook) marks its commands' errors so; an
// error of anything else (a paired relay, a model endpoint) is never one.
type UnreachableError struct {
	Cause string // a short name of it for a sentence ("connection refused"), never an address
	Err   error
}

func (e *UnreachableError) Error() string { return e.Err.Error() }

func (e *UnreachableError) Unwrap() error { return e.Err }

// Unreachable says whether err is (or wraps) an error the store's client
// marked as the store not answering, and its short cause.
func Unreachable(err error) (cause string, ok bool) {
	var u *UnreachableError
	if errors.As(err, &u) {
		return u.Cause, true
	}
	return "", false
}

// MarkUnreachable returns err marked as an UnreachableError when it is a
// client's error that means the store does not answer, else err itself.
func MarkUnreachable(err error) error {
	if m, ok := mark(err); ok {
		return m
	}
	return err
}

// mark is err marked, when it is newly marked.
func mark(err error) (*UnreachableError, bool) {
	if err == nil {
		return nil, false
	}
	var u *UnreachableError
	if errors.As(err, &u) {
		return nil, false
	}
	if cause, ok := classify(err); ok {
		return &UnreachableError{Cause: cause, Err: err}, true
	}
	return nil, false
}

// UnreachableHook is the go-redis hook of the store's client (app adds it):
// it marks every command's error that means the store does not answer
// (MarkUnreachable), so the domain answers REMOTE_RELAY_UNAVAILABLE and the
// log handler knows the failure for the store's (R25.3).
func UnreachableHook() redis.Hook { return unreachableHook{} }

type unreachableHook struct{}

func (unreachableHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (unreachableHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if m, ok := mark(err); ok {
			cmd.SetErr(m)
			return m
		}
		return err
	}
}

func (unreachableHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if m, ok := mark(c.Err()); ok {
				c.SetErr(m)
			}
		}
		return MarkUnreachable(err)
	}
}

// classify names a client's error that means the store does not answer. An
// error of the relay's own (a script's answer, a context the caller ended)
// is not one.
func classify(err error) (cause string, ok bool) {
	for _, c := range errorCauses {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.cause, c.cause != ""
			}
		}
	}
	var op *net.OpError // a socket's own timeout (go-redis's read and write timeouts)
	if errors.As(err, &op) && op.Timeout() {
		return "timeout", true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "host not found", true
	}
	if strings.HasPrefix(err.Error(), "LOADING ") {
		return "the store is loading its data", true
	}
	return "", false
}

// errorCauses are the errors classify knows by identity, in the order it
// tries them, each with the cause it names ("": not the store's silence).
var errorCauses = []struct {
	errs  []error
	cause string
}{
	{[]error{redis.Nil, redis.ErrClosed}, ""},                 // an answer; the client closed by this process (shutdown)
	{[]error{context.DeadlineExceeded, context.Canceled}, ""}, // the caller's own deadline or cancel, not the store's silence
	{[]error{syscall.ECONNREFUSED}, "connection refused"},
	{[]error{syscall.ECONNRESET}, "connection reset"},
	{[]error{syscall.EPIPE}, "broken pipe"},
	{[]error{syscall.EHOSTUNREACH, syscall.ENETUNREACH}, "no route to the store"},
	{[]error{redis.ErrPoolTimeout}, "connection pool timeout"},
	{[]error{io.EOF, io.ErrUnexpectedEOF}, "connection closed"},
}

// unreachableTexts are the words of a store that does not answer in a log
// line of the queue library, which logs its errors as text only: the
// phrase, then its short cause.
var unreachableTexts = []struct{ phrase, cause string }{
	{"connection refused", "connection refused"},
	{"connection reset by peer", "connection reset"},
	{"broken pipe", "broken pipe"},
	{"i/o timeout", "timeout"},
	{"connection pool timeout", "connection pool timeout"},
	{"no route to host", "no route to the store"},
	{"network is unreachable", "no route to the store"},
	{"no such host", "host not found"},
	{"LOADING Redis is loading", "the store is loading its data"},
}

// UnreachableText is Unreachable for a line of the queue library, known by
// its text only (its client is the store's, so these words are the store's).
func UnreachableText(s string) (cause string, ok bool) {
	for _, u := range unreachableTexts {
		if strings.Contains(s, u.phrase) {
			return u.cause, true
		}
	}
	if strings.HasSuffix(s, ": EOF") || strings.HasSuffix(s, ": unexpected EOF") {
		return "connection closed", true
	}
	return "", false
}
