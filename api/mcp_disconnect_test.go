package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// disconnectDomain is a fake domain whose call registers a delivery recorder
// on its POST, says it started, and waits for its context to end (or a result
// to be released).
type disconnectDomain struct {
	*fakeDomain
	started chan struct{}
	ended   chan error // the call's ctx.Err() when it returned
	settled chan bool  // what the route settled the delivery as
	release chan struct{}
}

func newDisconnectDomain() *disconnectDomain {
	d := &disconnectDomain{fakeDomain: newFakeDomain(), started: make(chan struct{}), ended: make(chan error, 1),
		settled: make(chan bool, 1), release: make(chan struct{})}
	d.call = func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, bool) {
		post, _ := ctx.Value(postKey{}).(*mcpPost)
		if post == nil {
			d.ended <- errors.New("the call's context carries no POST")
			return json.RawMessage(`{"ok":true}`), false
		}
		post.add(func(delivered bool) { d.settled <- delivered })
		close(d.started)
		select {
		case <-ctx.Done():
		case <-d.release:
		case <-time.After(30 * time.Second):
		}
		d.ended <- ctx.Err()
		return json.RawMessage(`{"ok":true,"relay":"desk","summary":"wait → desk: done","status":"done"}`), false
	}
	return d
}

func waitRPCBody(t *testing.T, version string) string {
	meta := map[string]any{}
	if version >= "2026-07-28" {
		meta[mcp.MetaKeyProtocolVersion] = version
		meta[mcp.MetaKeyClientInfo] = map[string]any{"name": "raw", "version": "1"}
		meta[mcp.MetaKeyClientCapabilities] = map[string]any{}
	}
	params := map[string]any{"name": "relay_tool", "arguments": map[string]any{"action": "wait", "relay": "this"}}
	if len(meta) > 0 {
		params["_meta"] = meta
	}
	return mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": params})
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		var zero T
		return zero
	}
}

// R18.12 at the route: a client that goes away during a call cancels the domain
// call's context (the SDK does not, for any of these versions), and the call's
// result settles as not delivered.
func TestMCPClientGoneCancelsCall(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			d := newDisconnectDomain()
			url := startMCP(t, d, MCPOptions{ProgressFirst: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := newRawRequest(t, url, version, waitRPCBody(t, version)).WithContext(ctx)
			req.Header.Set("Authorization", "Bearer tok-a")
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}()
			within(t, d.started, "call")
			cancel()
			if err := within(t, d.ended, "end of the call"); !errors.Is(err, context.Canceled) {
				t.Fatalf("the call ended with ctx.Err() = %v, want context.Canceled", err)
			}
			if delivered := within(t, d.settled, "settle"); delivered {
				t.Fatalf("a result the client never got settled as delivered")
			}
			<-done
		})
	}
}

// A call whose response was written to a client still there settles as
// delivered, after the response went out; also when the client leaves as soon
// as it has read the result.
func TestMCPResultWrittenSettlesDelivered(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2026-07-28"} {
		for _, leave := range []bool{false, true} {
			name := version
			if leave {
				name += " client leaves at once"
			}
			t.Run(name, func(t *testing.T) { testResultDelivered(t, version, leave) })
		}
	}
}

func testResultDelivered(t *testing.T, version string, leave bool) {
	t.Parallel()
	d := newDisconnectDomain()
	url := startMCP(t, d, MCPOptions{ProgressFirst: 20 * time.Millisecond, ProgressEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := newRawRequest(t, url, version, waitRPCBody(t, version)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer tok-a")
	resp := doRaw(t, req)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var all []byte
	buf := make([]byte, 4096)
	released := false
	for !bytes.Contains(all, []byte(`"id":42`)) || !bytes.HasSuffix(all, []byte("\n\n")) {
		n, err := resp.Body.Read(buf)
		all = append(all, buf[:n]...)
		if err != nil {
			break
		}
		if !released && bytes.Count(all, []byte(": keepalive\n\n")) >= 3 {
			close(d.release) // the result goes out after a few keep-alives
			released = true
		}
	}
	if !released {
		t.Fatalf("the stream ended before 3 keep-alives:\n%s", all)
	}
	if leave {
		cancel() // closes the connection
	} else if rest, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	} else {
		all = append(all, rest...)
	}
	findResponse(t, parseSSE(t, string(all)), 42)
	if err := within(t, d.ended, "end of the call"); err != nil {
		t.Fatalf("the call's context ended: %v", err)
	}
	if delivered := within(t, d.settled, "settle"); !delivered {
		t.Fatalf("a result written to the client settled as not delivered")
	}
}
