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

// Unreachable says whether err means the store does not answer (R25.3): a
// connection refused, reset or closed, a timeout on the network, no free
// connection in the pool, a Redis still loading its data. cause is a short
// name of it for a sentence ("connection refused"), never an address. An
// error of the relay's own (a script's answer, a context the caller ended)
// is not one.
func Unreachable(err error) (cause string, ok bool) {
	if err == nil {
		return "", false
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset", true
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the store", true
	case errors.Is(err, redis.ErrPoolTimeout):
		return "connection pool timeout", true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed", true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "", false // the caller's own deadline or cancel, not the store's silence
	}
	var op *net.OpError // a socket's own timeout (go-redis's read and write timeouts)
	if errors.As(err, &op) && op.Timeout() {
		return "timeout", true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "host not found", true
	}
	return UnreachableText(err.Error())
}

// unreachableTexts are the words of a store that does not answer in an
// error's text, for errors that reach a log line as text only (the queue
// library's own messages): the phrase, then its short cause.
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

// UnreachableText is Unreachable for an error known only by its text.
func UnreachableText(s string) (cause string, ok bool) {
	for _, u := range unreachableTexts {
		if strings.Contains(s, u.phrase) {
			return u.cause, true
		}
	}
	if s == "EOF" || strings.HasSuffix(s, ": EOF") || strings.HasSuffix(s, ": unexpected EOF") {
		return "connection closed", true
	}
	return "", false
}
