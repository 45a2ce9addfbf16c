package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// R25.3: the errors of a store that does not answer, typed or as text, and
// the relay's own errors that are not.
func TestUnreachable(t *testing.T) {
	for _, tt := range []struct {
		err   error
		cause string
	}{
		{fmt.Errorf("load: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), "connection refused"},
		{fmt.Errorf("x: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), "connection reset"},
		{fmt.Errorf("x: %w", io.EOF), "connection closed"},
		{fmt.Errorf("x: %w", redis.ErrPoolTimeout), "connection pool timeout"},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, "timeout"},
		{errors.New("UNKNOWN: redis eval error: dial tcp 127.0.0.1:6390: connect: connection refused"), "connection refused"},
		{errors.New("LOADING Redis is loading the dataset in memory"), "the store is loading its data"},
		{errors.New("ERR script error"), ""},
		{redis.Nil, ""},
		{context.Canceled, ""},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), ""},
		{redis.ErrClosed, ""},
		{ErrFenced, ""},
	} {
		cause, ok := Unreachable(tt.err)
		if ok != (tt.cause != "") || cause != tt.cause {
			t.Errorf("%v: %q %v, want %q", tt.err, cause, ok, tt.cause)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
