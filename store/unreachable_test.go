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
		{errors.New("UNKNOWN: redis eval error: dial tcp 127.0.0.1:6390: connect: connection refused"), ""}, // text: the queue library's lines only
		{errors.New("LOADING Redis is loading the dataset in memory"), "the store is loading its data"},
		{errors.New("ERR script error"), ""},
		{redis.Nil, ""},
		{context.Canceled, ""},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), ""},
		{redis.ErrClosed, ""},
		{ErrFenced, ""},
	} {
		cause, ok := Unreachable(tt.err)
		if ok {
			t.Errorf("%v: unmarked, yet %q", tt.err, cause)
		}
		cause, ok = Unreachable(fmt.Errorf("step: %w", MarkUnreachable(tt.err)))
		if ok != (tt.cause != "") || cause != tt.cause {
			t.Errorf("%v marked: %q %v, want %q", tt.err, cause, ok, tt.cause)
		}
	}
}

// The queue library's lines are known by their text.
func TestUnreachableText(t *testing.T) {
	for s, want := range map[string]string{
		"Dequeue error: UNKNOWN: redis eval error: dial tcp 127.0.0.1:6390: connect: connection refused": "connection refused",
		"Failed to write server state data: read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout":              "timeout",
		"Failed to dequeue: EOF":                     "connection closed",
		"Dequeue error: NOSCRIPT No matching script": "",
	} {
		if got, ok := UnreachableText(s); got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", s, got, ok, want)
		}
	}
}

// The store's client marks its commands' errors, single and pipelined, when
// the store does not answer; an answer (redis.Nil) stays as it is.
func TestUnreachableHook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	c.AddHook(UnreachableHook())
	ctx := context.Background()
	if cause, ok := Unreachable(c.Get(ctx, "k").Err()); !ok || cause != "connection refused" {
		t.Errorf("GET: %q %v", cause, ok)
	}
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "a")
		p.Incr(ctx, "b")
		return nil
	})
	if _, ok := Unreachable(err); !ok {
		t.Errorf("pipeline: %v", err)
	}
	for _, cmd := range cmds {
		if _, ok := Unreachable(cmd.Err()); !ok {
			t.Errorf("pipelined %s: %v", cmd.Name(), cmd.Err())
		}
	}
	if MarkUnreachable(redis.Nil) != redis.Nil { //nolint:errorlint // the very value
		t.Errorf("redis.Nil marked")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
