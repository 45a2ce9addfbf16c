package api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/api"
	"github.com/oar/relay/relaytest"
)

// slowRequest sends a request's header with a Content-Length far above what
// it then sends, and trickles the body a byte at a time until the server
// answers or closes the connection (or stop closes). It returns how long the
// server held the request and the status it answered (0: closed without an
// answer).
func slowRequest(addr, head string, stop <-chan struct{}) (held time.Duration, status int, err error) {
	return slowRequestFrom("", addr, head, stop)
}

// slowRequestFrom is slowRequest from the local IP address local ("": any).
func slowRequestFrom(local, addr, head string, stop <-chan struct{}) (held time.Duration, status int, err error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = c.Close() }() // the probe's own connection
	start := time.Now()
	if _, err := io.WriteString(c, head); err != nil {
		return time.Since(start), 0, nil // closed at once: refused
	}
	done := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st := <-done:
			return time.Since(start), st, nil
		case <-stop:
			return time.Since(start), -1, nil
		case <-tick.C:
			_, _ = c.Write([]byte("a"))
		}
	}
}

// TestSlowBodiesSilenceNoOne reproduces issue 33's slow-body attack on a real
// loopback server (R18.29): many connections send a request's header and then
// trickle its body, to the console's sign-in and /healthz (no token) and to
// /mcp (with the attacking session's own token), kept up for the whole test
// (a connection that is cut is opened again). The server here has the relay's
// router, a bound of 100 connections, 16 requests without a proven token and
// a 2 s body deadline (relay serve: 2,048, 256 and 10 s); the attack keeps 240
// slow requests going, 120 with the token and 120 without, each more than the
// connections. Meanwhile /healthz, the owner API (a read and a change with a
// body) and another session's MCP call answer, every time, within 5 s; every
// slow request is cut at the deadline. The relay's own server (default
// settings) cuts a trickled /mcp body at 10 s. (Checked: on the code before
// R18.29 every probe fails; with either bound of body.go — per token, or the
// unproven one — taken out, some do.)
func TestSlowBodiesSilenceNoOne(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	attacker := r.NewSession(map[string]any{"title": "attacker"})
	bystander := r.NewSession(map[string]any{"title": "bystander"})

	const maxConns, bodyTimeout, workers = 100, 2 * time.Second, 240
	// The unproven bound in the same proportion to the connections as relay
	// serve's (an eighth, at least 16).
	h := api.NewRouter(api.Options{Relay: r.App.Relay(), Store: r.App.Store(), OwnerToken: relaytest.OwnerToken, MaxUnproven: 16,
		Logger: slog.New(slog.DiscardHandler)})
	srv := api.NewServerWith(h, api.ServerOptions{MaxConns: maxConns, BodyTimeout: bodyTimeout})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	base := "http://" + addr

	mcpHead := "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + attacker.Token + "\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: 4096\r\n\r\n{"
	heads := []string{ // a quarter each to the sign-in and to /healthz (a route that takes no body), half to /mcp
		"POST /signin HTTP/1.1\r\nHost: " + addr + "\r\nOrigin: " + base + "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\ntoken=",
		mcpHead,
		"GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 4096\r\n\r\n{",
		mcpHead,
	}

	// The relay's own server, as relay serve runs it: a trickled body is cut at 10 s.
	type cut struct {
		held   time.Duration
		status int
		err    error
	}
	defaultCut := make(chan cut, 1)
	stopDefault := make(chan struct{})
	go func() {
		host := strings.TrimPrefix(r.URL, "http://")
		head := strings.ReplaceAll(mcpHead, addr, host)
		head = strings.Replace(head, attacker.Token, bystander.Token, 1)
		held, st, err := slowRequest(host, head, stopDefault)
		defaultCut <- cut{held, st, err}
	}()
	go func() { time.Sleep(30 * time.Second); close(stopDefault) }()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	var mu sync.Mutex
	var longest time.Duration
	var werr error
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				opened.Add(1)
				held, _, err := slowRequest(addr, heads[i%len(heads)], stop)
				mu.Lock()
				longest = max(longest, held)
				if err != nil && werr == nil {
					werr = err
				}
				mu.Unlock()
				// Again after a moment (refused at once: a little later), not all
				// at once: the attack is slow bodies, not a burst of connections.
				pause := time.Duration(rand.Int64N(int64(300 * time.Millisecond)))
				if held < 200*time.Millisecond {
					pause += 500 * time.Millisecond
				}
				time.Sleep(pause)
			}
		}()
	}
	stopAttack := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopAttack()
	relaytest.Eventually(t, 30*time.Second, func() bool { return opened.Load() >= 2*workers }, "the attack did not get going")

	probe := func(method, path, token, body string) error {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		resp, err := c.Do(req)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !os.IsTimeout(err) {
			// Closed before any answer: the connection bound (R18.18) closes
			// a new connection only when every other one is busy, which a
			// loaded machine can meet for a moment; a client opens it again.
			// Once: before R18.29 every probe failed, again and again.
			time.Sleep(200 * time.Millisecond)
			if req.GetBody != nil {
				req.Body, _ = req.GetBody()
			}
			resp, err = c.Do(req)
		}
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status + ": " + string(b))
		}
		if path == "/mcp" && !strings.Contains(string(b), `"ok":true`) {
			return errors.New("not ok: " + string(b))
		}
		return nil
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_tool","arguments":{"action":"relay_info","relay":"this"}}}`
	for round := range 3 {
		for _, p := range []struct{ method, path, token, body string }{
			{"GET", "/healthz", "", ""},
			{"GET", "/api/v1/sessions", relaytest.OwnerToken, ""},
			{"PATCH", "/api/v1/settings", relaytest.OwnerToken, `{}`},
			{"POST", "/mcp", bystander.Token, call},
		} {
			if err := probe(p.method, p.path, p.token, p.body); err != nil {
				t.Errorf("round %d: %s %s during the slow-body attack: %v", round+1, p.method, p.path, err)
			}
		}
		time.Sleep(700 * time.Millisecond)
	}
	stopAttack()
	if werr != nil {
		t.Fatalf("the attack: %v", werr)
	}
	t.Logf("%d slow requests sent; the longest held %v", opened.Load(), longest)
	if longest > bodyTimeout+8*time.Second {
		t.Errorf("a slow request was held %v: not cut at the body deadline (%v)", longest, bodyTimeout)
	}
	d := <-defaultCut
	if d.err != nil || d.status < 0 || d.held > 18*time.Second {
		t.Errorf("relay serve held a trickled /mcp body %v (status %d, err %v): want it cut at 10 s", d.held, d.status, d.err)
	} else {
		t.Logf("relay serve cut a trickled body after %v with status %d", d.held, d.status)
	}
}
