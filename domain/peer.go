package domain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oar/relay/store"
)

// The peer protocol's client side (§13): hello, call and the event stream of
// a subscription on a paired relay. Every request has a timeout; a relay that
// does not answer is REMOTE_RELAY_OFFLINE, a rejected token REMOTE_RELAY_AUTH
// (R13.4), and anything that is not a relay's JSON answer (HTML from a proxy,
// garbage) is said in one sentence without the body.

// PeerFeatures are what this relay serves on /peer/v1 (R13.3).
var PeerFeatures = []string{"call", "events", "asks", "inbox", "exclude", "task_output", "update_session", "billing_switch", "groups", "check"}

const (
	helloTimeout    = 5 * time.Second // R13.1a: pairing tries hello for 5 s
	maxPeerAnswer   = 4 << 20         // a peer's answer larger than this is not a relay's answer
	peerEventsBatch = 100             // events per poll request
)

// Hello is a relay's answer to GET /peer/v1/hello.
type Hello struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Instance string   `json:"instance"`
	Features []string `json:"features"`
}

// PeerOrigin is the calling agent and its chain, sent with every call (R13.1, R4.7, R4.8).
type PeerOrigin struct {
	Relay    string   `json:"relay"`
	Session  string   `json:"session"`
	Title    string   `json:"title"`
	Model    string   `json:"model"`
	Path     []string `json:"path"`
	Unlocked []string `json:"unlocked"`
}

// PeerCallBody is the body of POST /peer/v1/call.
type PeerCallBody struct {
	Action string                     `json:"action"`
	Args   map[string]json.RawMessage `json:"args"`
	Origin PeerOrigin                 `json:"origin"`
}

// peerHTTP is the client of every peer request; timeouts come per request.
var peerHTTP = &http.Client{
	Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, TLSHandshakeTimeout: 5 * time.Second},
	// A redirect could carry the token elsewhere: a relay's peer routes never redirect.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// peerMetrics is what the metrics count of peer requests (paired-relay link
// state and poll errors, §16).
type peerMetrics interface{ PeerRequest(kind, code string) }

// peerDo sends one peer request and decodes its JSON answer into out.
func (r *Relay) peerDo(ctx context.Context, name, base, token, method, path string, body any, timeout time.Duration, out any) (e *Error) {
	if pm, ok := r.met.(peerMetrics); ok {
		defer func() {
			code := "ok"
			if e != nil {
				code = e.Code
			}
			kind := strings.TrimPrefix(path, "/peer/v1/")
			if i := strings.IndexAny(kind, "/?"); i >= 0 {
				kind = kind[:i]
			}
			pm.PeerRequest(kind, code)
		}()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return internal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return Errorf(CodeOffline, "Relay %q cannot be reached: its address %q is not usable (%v). Nothing was done.", name, base, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := peerHTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Errorf(CodeOffline, "Relay %q did not answer within %s. Nothing was done there, as far as this relay knows.", name, timeout.Round(time.Second))
		}
		return Errorf(CodeOffline, "Relay %q does not answer (%s). Nothing was done.", name, netReason(err))
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer+1))
	if err != nil {
		return Errorf(CodeOffline, "Relay %q broke off its answer (%s). Nothing is known to have been done.", name, netReason(err))
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return Errorf(CodeAuth, "Relay %q rejects this relay's peer token (HTTP %d). The owner must pair it again with a new token from that relay. Nothing was done.", name, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound && !isJSON(resp):
		return Errorf(CodeUnsupported, "Relay %q does not serve the peer protocol at %s (HTTP 404): it may run an older relay and need an update. Nothing was done.", name, path)
	}
	if !isJSON(resp) || len(raw) > maxPeerAnswer {
		return Errorf(CodeOffline, "Relay %q answered with something that is not a relay's answer (HTTP %d, %s). Check the pairing's URL. Nothing is known to have been done.",
			name, resp.StatusCode, contentKind(resp, len(raw)))
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Code != "" {
			return Errorf(e.Code, "Relay %q: %s", name, e.Error)
		}
		return Errorf(CodeOffline, "Relay %q answered HTTP %d. Nothing is known to have been done.", name, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return Errorf(CodeOffline, "Relay %q answered with JSON this relay cannot read (%v). Nothing is known to have been done.", name, err)
		}
	}
	return nil
}

func isJSON(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

func contentKind(resp *http.Response, n int) string {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	if n > maxPeerAnswer {
		return ct + ", more than 4 MiB"
	}
	return fmt.Sprintf("%s, %d bytes", ct, n)
}

// netReason says why a request failed without the URL (it may carry secrets in a query).
func netReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) {
		if strings.Contains(op.Error(), "refused") {
			return "connection refused"
		}
		return op.Op + " failed"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "the host name does not resolve"
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// hello asks a relay who it is.
func (r *Relay) hello(ctx context.Context, name, base, token string, timeout time.Duration) (*Hello, *Error) {
	var h Hello
	if e := r.peerDo(ctx, name, base, token, http.MethodGet, "/peer/v1/hello", nil, timeout, &h); e != nil {
		return nil, e
	}
	if h.Name == "" {
		return nil, Errorf(CodeOffline, "Relay %q answered hello without a name: it is not a relay. Nothing was done.", name)
	}
	return &h, nil
}

// linkRefresh is how often a process records again that a paired relay it
// keeps reaching answered (its "seen" time): not on every call.
const linkRefresh = time.Second

// link records whether a paired relay answered (list_relays shows it).
func (r *Relay) link(ctx context.Context, p *store.Pairing, e *Error) {
	online, reason := e == nil, ""
	if e != nil {
		if e.Code != CodeOffline && e.Code != CodeAuth {
			return // it answered: a refusal under its rules says nothing about the link
		}
		reason = e.Msg
	}
	key := strings.ToLower(p.Name)
	r.linkMu.Lock()
	if at, ok := r.linkOnline[key]; online && ok && time.Since(at) < linkRefresh {
		r.linkMu.Unlock()
		return // recorded online by this process a moment ago
	}
	delete(r.linkOnline, key) // set again once this write is done
	r.linkMu.Unlock()
	changed, err := r.st.SetLink(context.WithoutCancel(ctx), p.Name, online, r.now(), reason)
	if err != nil {
		r.log.Warn("record link state", "relay", p.Name, "err", err)
		return
	}
	if online {
		r.linkMu.Lock()
		r.linkOnline[key] = time.Now()
		r.linkMu.Unlock()
	}
	if changed && online {
		r.log.Info("paired relay online", "relay", p.Name)
	} else if changed {
		r.log.Warn("paired relay offline", "relay", p.Name, "reason", reason)
	}
}

// peerCall performs an action on a paired relay and returns its envelope.
func (r *Relay) peerCall(ctx context.Context, p *store.Pairing, body PeerCallBody, timeout time.Duration) (map[string]any, *Error) {
	var env map[string]any
	e := r.peerDo(ctx, p.Name, p.URL, p.Token, http.MethodPost, "/peer/v1/call", body, timeout, &env)
	r.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	if _, ok := env["ok"].(bool); !ok {
		return nil, Errorf(CodeOffline, "Relay %q answered without a result envelope. Nothing is known to have been done.", p.Name)
	}
	return env, nil
}

// PeerEvents is the answer of GET /peer/v1/events.
type PeerEvents struct {
	Events []store.Event `json:"events"`
	Cursor string        `json:"cursor"`
	Ended  string        `json:"ended,omitempty"` // the subscription's endReason once it ended there
}

func (r *Relay) peerEvents(ctx context.Context, p *store.Pairing, sub, after string, wait time.Duration) (*PeerEvents, *Error) {
	q := url.Values{"subscription": {sub}, "after": {after}, "wait": {fmt.Sprint(int(wait / time.Second))}}
	var out PeerEvents
	e := r.peerDo(ctx, p.Name, p.URL, p.Token, http.MethodGet, "/peer/v1/events?"+q.Encode(), nil, wait+r.opts.Timing.PeerTimeout, &out)
	r.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	return &out, nil
}
