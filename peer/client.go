package peer

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
)

// The client side (§13): hello, call, check, the event stream of a
// subscription and the inbox on a paired relay. Every request has a timeout;
// a relay that does not answer is REMOTE_RELAY_OFFLINE, a rejected token
// REMOTE_RELAY_AUTH (R13.4), and anything that is not a relay's JSON answer
// (HTML from a proxy, garbage) is said in one sentence without the body.

// The codes of the errors this client makes (those of the relay's closed set,
// §15); an error answer of the other relay keeps its own code.
const (
	CodeOffline     = "REMOTE_RELAY_OFFLINE"
	CodeAuth        = "REMOTE_RELAY_AUTH"
	CodeUnsupported = "REMOTE_RELAY_UNSUPPORTED"
)

// Error is a peer request that failed: the relay's error code and the
// sentence for the agent (it names the paired relay, never the token or the
// answer's body).
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

func errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Target is the paired relay a request goes to.
type Target struct {
	Name  string // the pairing's name, as every error sentence says it
	URL   string // its base URL (no trailing slash)
	Token string // the peer token it issued
}

// Client sends peer requests over HTTP. Its zero value is not usable: make
// one with NewClient. It is safe for concurrent use.
type Client struct {
	http *http.Client
}

// NewClient is the client of every peer request of a process: connections
// are kept (16 idle per relay, 90 s), a dial and a TLS handshake take at
// most 5 s each, redirects are not followed; the rest of a request's time
// is the timeout each call gives.
func NewClient() *Client {
	return &Client{http: &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, TLSHandshakeTimeout: 5 * time.Second},
		// A redirect could carry the token elsewhere: a relay's peer routes never redirect.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Hello asks a relay who it is (GET /peer/v1/hello).
func (c *Client) Hello(ctx context.Context, to Target, timeout time.Duration) (*Hello, error) {
	var h Hello
	if err := c.do(ctx, to, request{method: http.MethodGet, path: "/peer/v1/hello", timeout: timeout}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Call performs an action there (POST /peer/v1/call) and returns its answer,
// the result envelope as JSON decodes it.
func (c *Client) Call(ctx context.Context, to Target, body CallBody, timeout time.Duration) (map[string]any, error) {
	var env map[string]any
	if err := c.do(ctx, to, request{method: http.MethodPost, path: "/peer/v1/call", body: body, timeout: timeout}, &env); err != nil {
		return nil, err
	}
	return env, nil
}

// CallRaw is Call with the envelope's fields undecoded, as that relay wrote them.
func (c *Client) CallRaw(ctx context.Context, to Target, body CallBody, timeout time.Duration) (map[string]json.RawMessage, error) {
	var env map[string]json.RawMessage
	if err := c.do(ctx, to, request{method: http.MethodPost, path: "/peer/v1/call", body: body, timeout: timeout}, &env); err != nil {
		return nil, err
	}
	return env, nil
}

// Check asks that relay to check a call without its effect (POST
// /peer/v1/check) and returns its answer's fields undecoded.
func (c *Client) Check(ctx context.Context, to Target, body CallBody, timeout time.Duration) (map[string]json.RawMessage, error) {
	var env map[string]json.RawMessage
	if err := c.do(ctx, to, request{method: http.MethodPost, path: "/peer/v1/check", body: body, timeout: timeout}, &env); err != nil {
		return nil, err
	}
	return env, nil
}

// Events reads a subscription's events after a cursor (GET
// /peer/v1/events), waiting there up to wait (whole seconds) for one.
func (c *Client) Events(ctx context.Context, to Target, sub, after string, wait, timeout time.Duration) (*Events, error) {
	q := url.Values{"subscription": {sub}, "after": {after}, "wait": {fmt.Sprint(int(wait / time.Second))}}
	var out Events
	if err := c.do(ctx, to, request{method: http.MethodGet, path: "/peer/v1/events?" + q.Encode(), timeout: timeout}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Inbox lists the open asks this relay's conversations made there (GET /peer/v1/inbox).
// Each ask's fields are as that relay wrote them (a null in its list is nil).
func (c *Client) Inbox(ctx context.Context, to Target, timeout time.Duration) ([]map[string]json.RawMessage, error) {
	var out struct {
		Asks []map[string]json.RawMessage `json:"asks"`
	}
	if err := c.do(ctx, to, request{method: http.MethodGet, path: "/peer/v1/inbox", timeout: timeout}, &out); err != nil {
		return nil, err
	}
	return out.Asks, nil
}

// AnswerInbox answers an ask kept there (POST /peer/v1/inbox/{id}) and
// returns that relay's answer, each field as it wrote it (nil for JSON null).
func (c *Client) AnswerInbox(ctx context.Context, to Target, id string, in InboxAnswer, timeout time.Duration) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	if err := c.do(ctx, to, request{method: http.MethodPost, path: "/peer/v1/inbox/" + url.PathEscape(id), body: in, timeout: timeout}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// request is one peer request: its method and path, the body to send as
// JSON (nil: none) and how long the answer may take.
type request struct {
	method, path string
	body         any
	timeout      time.Duration
}

// do sends one peer request and decodes its JSON answer into out. Its error
// is an *Error, or a body that cannot be encoded (a bug of the caller).
func (c *Client) do(ctx context.Context, to Target, rq request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, rq.timeout)
	defer cancel()
	req, err := newRequest(ctx, to, rq)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errorf(CodeOffline, "Relay %q did not answer within %s. Nothing was done there, as far as this relay knows.", to.Name, rq.timeout.Round(time.Second))
		}
		return errorf(CodeOffline, "Relay %q does not answer (%s). Nothing was done.", to.Name, netReason(err))
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return errorf(CodeOffline, "Relay %q broke off its answer (%s). Nothing is known to have been done.", to.Name, netReason(err))
	}
	if err := answerError(to.Name, rq.path, resp, raw); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return errorf(CodeOffline, "Relay %q answered with JSON this relay cannot read (%v). Nothing is known to have been done.", to.Name, err)
		}
	}
	return nil
}

// newRequest builds rq's HTTP request to the relay to, with its peer token.
func newRequest(ctx context.Context, to Target, rq request) (*http.Request, error) {
	var rd io.Reader
	if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return nil, fmt.Errorf("encode the body of %s %s: %w", rq.method, rq.path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, to.URL+rq.path, rd)
	if err != nil {
		return nil, errorf(CodeOffline, "Relay %q cannot be reached: its address %q is not usable (%v). Nothing was done.", to.Name, to.URL, err)
	}
	req.Header.Set("Authorization", "Bearer "+to.Token)
	req.Header.Set("Accept", "application/json")
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// answerError is the error an answer of relay name to path says, raw its
// body (nil: a relay's answer of success).
func answerError(name, path string, resp *http.Response, raw []byte) error {
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return errorf(CodeAuth, "Relay %q rejects this relay's peer token (HTTP %d). The owner must pair it again with a new token from that relay. Nothing was done.", name, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound && !isJSON(resp):
		return errorf(CodeUnsupported, "Relay %q does not serve the peer protocol at %s (HTTP 404): it may run an older relay and need an update. Nothing was done.", name, path)
	case !isJSON(resp) || len(raw) > MaxAnswer:
		return errorf(CodeOffline, "Relay %q answered with something that is not a relay's answer (HTTP %d, %s). Check the pairing's URL. Nothing is known to have been done.",
			name, resp.StatusCode, contentKind(resp, len(raw)))
	case resp.StatusCode < 300:
		return nil
	}
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Code != "" {
		return errorf(e.Code, "Relay %q: %s", name, e.Error)
	}
	return errorf(CodeOffline, "Relay %q answered HTTP %d. Nothing is known to have been done.", name, resp.StatusCode)
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
	if n > MaxAnswer {
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

// WrapTransport replaces the client's HTTP transport by wrap's answer for it
// (app gives otelx.Transport when traces are on: each call carries the
// traceparent header, R25.1). Call it before the client is used.
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	c.http.Transport = wrap(c.http.Transport)
}
