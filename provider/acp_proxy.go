package provider

// relay_tool for a kept process: the loopback MCP proxy.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// mcpProxy forwards an agent process's MCP requests to the relay's /mcp with
// the running turn's token: the process outlives its turns and their tokens
// (each turn has its own), so its MCP server config names this loopback
// address and a key of its own, never a token. Between turns nothing is
// forwarded.
type mcpProxy struct {
	ln  net.Listener
	srv *http.Server

	mu    sync.Mutex
	procs map[string]*proxyTarget
}

type proxyTarget struct{ url, token string }

func newMCPProxy() (*mcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	px := &mcpProxy{ln: ln, procs: map[string]*proxyTarget{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			tgt := r.In.Context().Value(proxyKey{}).(*proxyTarget)
			u, _ := url.Parse(tgt.url)
			r.Out.URL = u
			r.Out.Host = u.Host
			r.Out.Header.Set("Authorization", "Bearer "+tgt.token)
		},
		FlushInterval: -1,
	}
	px.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		px.mu.Lock()
		tgt := px.procs[key]
		var cp proxyTarget
		if tgt != nil {
			cp = *tgt
		}
		px.mu.Unlock()
		if tgt == nil {
			http.Error(w, "unknown key", http.StatusUnauthorized)
			return
		}
		if cp.url == "" {
			http.Error(w, "no turn of this session is running: relay_tool answers during a turn only", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyKey{}, &cp)))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = px.srv.Serve(ln) }()
	return px, nil
}

type proxyKey struct{}

func (px *mcpProxy) url() string { return "http://" + px.ln.Addr().String() + "/mcp" }

func (px *mcpProxy) add() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	key := "acp_" + hex.EncodeToString(b[:])
	px.mu.Lock()
	px.procs[key] = &proxyTarget{}
	px.mu.Unlock()
	return key
}

func (px *mcpProxy) set(key, mcpURL, token string) {
	px.mu.Lock()
	if t := px.procs[key]; t != nil {
		t.url, t.token = mcpURL, token
	}
	px.mu.Unlock()
}

func (px *mcpProxy) drop(key string) {
	px.mu.Lock()
	delete(px.procs, key)
	px.mu.Unlock()
}

func (px *mcpProxy) close() { _ = px.srv.Close() }
