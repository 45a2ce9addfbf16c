package api

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestMCPBatchBounded (R18.18): a JSON-RPC batch of more than MaxBatch
// messages is refused with 400 and a JSON-RPC error before any of it runs; a
// batch of MaxBatch is served.
func TestMCPBatchBounded(t *testing.T) {
	t.Parallel()
	url := startMCP(t, newFakeDomain(), MCPOptions{})
	batch := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/list"}`
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	for n, want := range map[int]int{MaxBatch + 1: http.StatusBadRequest, 5000: http.StatusBadRequest, MaxBatch: http.StatusOK} {
		req := newRawRequest(t, url, "2025-03-26", batch(n))
		req.Header.Set("Authorization", "Bearer tok-a")
		resp := doRaw(t, req)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("a batch of %d: status %d, want %d: %.200s", n, resp.StatusCode, want, b)
		}
		if want == http.StatusBadRequest && (!strings.Contains(string(b), `"error":{"code":-32600`) || !strings.Contains(string(b), "at most 32")) {
			t.Errorf("a batch of %d: body %.200s, want a JSON-RPC error naming the limit", n, b)
		}
	}
	for body, want := range map[string]int{`{"a":1}`: 0, `  [1,2,3]`: 3, `[{"x":[1,2]},{}`: 2, `[1,2,3,4,5]`: 4, `[`: 0, `[}`: 0} {
		if got := batchLen([]byte(body), 4); got != want {
			t.Errorf("batchLen(%q, 4) = %d, want %d", body, got, want)
		}
	}
}

// closeConn is a net.Conn that records Close.
type closeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeConn) Close() error { c.closed.Store(true); return nil }

// TestConnsCloseTheIdleNotTheBusy (R18.18): over its bound, Conns closes the
// connection idle the longest; one whose handler runs is never closed, and
// when all run a handler the new connection is the one closed.
func TestConnsCloseTheIdleNotTheBusy(t *testing.T) {
	l := NewConns(2)
	mk := func() *closeConn { return &closeConn{} }
	a, b, c, d := mk(), mk(), mk(), mk()
	l.ConnState(a, http.StateNew)
	l.ConnState(b, http.StateNew)
	// a runs a handler.
	l.ConnState(a, http.StateActive)
	l.busy(a, 1)
	l.ConnState(c, http.StateNew) // over the bound: b (new, idle longest of the idle) goes
	if a.closed.Load() || !b.closed.Load() || c.closed.Load() {
		t.Fatalf("closed a=%v b=%v c=%v, want only b", a.closed.Load(), b.closed.Load(), c.closed.Load())
	}
	l.ConnState(b, http.StateClosed)
	l.ConnState(c, http.StateActive)
	l.busy(c, 1)
	l.ConnState(d, http.StateNew) // a and c run handlers: d is closed
	if a.closed.Load() || c.closed.Load() || !d.closed.Load() {
		t.Fatalf("closed a=%v c=%v d=%v, want only d", a.closed.Load(), c.closed.Load(), d.closed.Load())
	}
	l.ConnState(d, http.StateClosed)
	if n := l.Open(); n != 2 {
		t.Errorf("open %d, want 2", n)
	}
	// a's handler ended and a went idle: a new connection pushes it out.
	l.busy(a, -1)
	l.ConnState(a, http.StateIdle)
	e := mk()
	l.ConnState(e, http.StateNew)
	if !a.closed.Load() || e.closed.Load() {
		t.Errorf("closed a=%v e=%v, want a (idle) closed for e", a.closed.Load(), e.closed.Load())
	}
}
