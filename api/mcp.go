package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/otelx"
)

// ToolDomain is what the MCP route needs from the relay domain.
type ToolDomain interface {
	// SessionForToken returns the id of the session a bearer token names; ok=false when none (→ 401).
	SessionForToken(ctx context.Context, token string) (sessionID string, ok bool, err error)
	// CallTool runs one relay_tool call as that session. args is the JSON object of the call's
	// arguments as sent. It returns the complete result envelope (a JSON object with "ok") and
	// whether it is a failure. d, when not nil, is settled once the result was written to the
	// client or could not be (see [domain.Delivery]).
	CallTool(ctx context.Context, sessionID string, args json.RawMessage, d *domain.Delivery) (result json.RawMessage, isError bool)
}

// MCPOptions configures [NewMCPHandler]. The zero value is usable.
type MCPOptions struct {
	// Version is the server version announced in initialize. Default "dev".
	Version string
	// ProgressFirst is when the first progress notification (or, for a client that sent no
	// progress token, the first SSE keep-alive comment) goes out while a call runs.
	// Default 2s; SPEC R7.11 wants one within 5 s.
	ProgressFirst time.Duration
	// ProgressEvery is the interval of the following ones. Default 10s; SPEC R7.11 wants at
	// most 15 s.
	ProgressEvery time.Duration
	// Logger receives the route's warnings and errors, and the MCP SDK's (at warn level and
	// above; the SDK logs every stateless request at info). Default: discard.
	Logger *slog.Logger
	// DisableLocalhostProtection turns off the SDK's DNS-rebinding guard, which answers 403
	// to a request that reached a loopback listener with a non-loopback Host header. Set it
	// behind a reverse proxy on the same host; the bearer token is the protection then.
	DisableLocalhostProtection bool
}

// Defaults of [MCPOptions].
const (
	DefaultMCPProgressFirst = 2 * time.Second
	DefaultMCPProgressEvery = 10 * time.Second
)

// WithDefaults returns o with every zero field set to its default.
func (o MCPOptions) WithDefaults() MCPOptions {
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.ProgressFirst <= 0 {
		o.ProgressFirst = DefaultMCPProgressFirst
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultMCPProgressEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Bounded work per caller (R18.18).
const (
	// MaxBatch is how many JSON-RPC messages one POST /mcp may hold (a batch
	// of more is refused with 400, nothing run).
	MaxBatch = 32
	// MaxCallsPerToken is how many tool calls one session token may have
	// running at once in a process (more: REMOTE_RELAY_BUSY, nothing done).
	MaxCallsPerToken = 16
	// maxMCPBody is the SDK's own limit on a POST's body
	// (mcp.DefaultMaxRequestBodyBytes), applied before the batch is counted.
	maxMCPBody = mcp.DefaultMaxRequestBodyBytes
)

// Envelopes the route answers itself, without the domain.
var (
	envelopeBusy = json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_BUSY","error":"This session token already has ` +
		strconv.Itoa(MaxCallsPerToken) + ` tool calls running on this relay, the most one token may have at once; call again when one of them has returned. Nothing was done."}`)
	envelopeArgsNotObject = json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INVALID_INPUT","error":"arguments must be a JSON object. Nothing was done."}`)
	envelopeInternal      = json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"The relay hit an unexpected error; its log has the detail. It is not known whether the action took effect."}`)
)

// errTokenCheck is what a client sees (500) when the token could not be checked; the log
// has the cause.
var errTokenCheck = errors.New("the session token could not be checked now; try again")

// NewMCPHandler returns the handler of POST /mcp (SPEC §2): the MCP server "relay" over the
// Streamable HTTP transport in stateless mode, behind bearer-token auth (401 before the MCP
// layer without a token that names a session). It serves one listed tool, relay_tool, and
// executes the unlisted legacy name remote_relay the same way (R3.8).
//
// While a tool call runs, the response is kept alive (R7.11): by progress notifications when
// the call carries a progress token, else by SSE comment lines. The http.Server that serves
// this handler must have no WriteTimeout.
//
// A client that goes away during a call (the POST's context ends) cancels the domain call's
// context, so its wait ends at once, and what the domain records only once the caller has
// the result (a reply seen, R18.12) is settled after the response was written: as delivered
// only when the SDK wrote the result, after the calls returned, to a client still there
// and without a write error (domain.Delivery).
func NewMCPHandler(d ToolDomain, o MCPOptions) http.Handler {
	o = o.WithDefaults()
	r := &mcpRoute{domain: d, opts: o, log: o.Logger, running: map[string]int{}}

	r.calls = map[callKey]context.CancelFunc{}
	sopts := &mcp.ServerOptions{
		Logger: slog.New(minLevelHandler{Handler: o.Logger.Handler(), min: slog.LevelWarn}),
	}
	td, _ := d.(TaskDomain)
	if td != nil {
		// R24.1: server/discover declares MCP Tasks (the SDK's default
		// capabilities, logging, kept).
		sopts.Capabilities = &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, //nolint:staticcheck // SA1019: what clients of older revisions were told, kept
			Extensions: map[string]any{tasksExtension: map[string]any{}}}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "relay", Version: o.Version}, sopts)
	// The tools are registered with the smallest valid input schema, and tools/list answers
	// with the full one (listTools). The SDK reads nothing else from a raw tool's schema but,
	// on every tools/call of a client whose protocol has the standard headers, the
	// x-mcp-header bindings, which relay_tool has none of: it marshals and parses the whole
	// schema each time to find that out, 0.2 ms of CPU per call for relay_tool's.
	listed := &mcp.Tool{
		Name:        relayToolName,
		Description: relayToolDescription,
		InputSchema: relayToolInputSchema(),
	}
	for _, name := range []string{relayToolName, legacyToolName} {
		t := *listed
		t.Name = name
		t.InputSchema = json.RawMessage(`{"type":"object"}`)
		server.AddTool(&t, r.callTool)
	}
	server.AddReceivingMiddleware(listTools(map[string]*mcp.Tool{relayToolName: listed}, legacyToolName))
	if td != nil {
		if err := addTaskMethods(server, td); err != nil {
			panic(err) // the names are fixed: only a changed SDK can refuse them
		}
		server.AddReceivingMiddleware(taskMiddleware)
	}

	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:                  true,
		DisableLocalhostProtection: o.DisableLocalhostProtection,
		Logger:                     slog.New(minLevelHandler{Handler: o.Logger.Handler(), min: slog.LevelWarn}),
	})
	requireToken := auth.RequireBearerToken(r.verifyToken, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return requireToken(batchLimit{next: keepAliveHandler{next: streamable}, route: r})
}

type mcpRoute struct {
	domain ToolDomain
	opts   MCPOptions
	log    *slog.Logger

	mu      sync.Mutex
	running map[string]int                 // session id → its tool calls running in this process
	calls   map[callKey]context.CancelFunc // running tool calls by caller and JSON-RPC id (R24.2)
}

// take counts a tool call of a session as running, unless MaxCallsPerToken
// of its calls already run; release undoes it.
func (r *mcpRoute) take(session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[session] >= MaxCallsPerToken {
		return false
	}
	r.running[session]++
	return true
}

func (r *mcpRoute) release(session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[session]--; r.running[session] <= 0 {
		delete(r.running, session)
	}
}

// batchLimit refuses a JSON-RPC batch of more than MaxBatch messages before
// the SDK decodes it (it would run every call of it at once): 400 with a
// JSON-RPC error, nothing run (R18.18).
type batchLimit struct {
	next  http.Handler
	route *mcpRoute // notifications and tools/call ids (R24.2)
}

func (b batchLimit) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.Body == nil {
		b.next.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxMCPBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			mcpBodyTooLarge(w)
			return
		}
		http.Error(w, "failed to read body", http.StatusBadRequest)
		return
	}
	if n := batchLen(body, MaxBatch+1); n > MaxBatch {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"A JSON-RPC batch on /mcp may hold at most %d requests; this one holds more. Nothing was run: send them in smaller batches."}}`, MaxBatch)
		return
	}
	if m, ok := peekMessage(body); ok && b.route != nil {
		if len(m.ID) == 0 && m.Method != "" {
			b.route.notification(req, m)
		}
		req = withRPCID(req, m)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	b.next.ServeHTTP(w, req)
}

// batchLen counts the messages of a JSON array body, stopping at stop (a body
// that is not an array: 0; a malformed one: what was counted, for the SDK to
// refuse).
func batchLen(body []byte, stop int) int {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return 0
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return 0
	}
	n := 0
	for n < stop && dec.More() {
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			break
		}
		n++
	}
	return n
}

// verifyToken is the auth.TokenVerifier: the token's session id becomes TokenInfo.UserID,
// which the SDK hands to the tool handler as req.Extra.TokenInfo.
func (r *mcpRoute) verifyToken(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	sessionID, ok, err := r.domain.SessionForToken(ctx, token)
	if err != nil {
		r.log.ErrorContext(ctx, "mcp: check session token", "err", err)
		return nil, errTokenCheck
	}
	if !ok || sessionID == "" {
		return nil, auth.ErrInvalidToken
	}
	// No Expiration: session tokens live as long as their session
	// (RequireBearerTokenOptions.AllowMissingExpiration).
	return &auth.TokenInfo{UserID: sessionID}, nil
}

// callTool serves relay_tool and remote_relay. A failure is always a tool result with
// isError (R3.3), never a JSON-RPC error.
func (r *mcpRoute) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var caller string
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		caller = req.Extra.TokenInfo.UserID
	}
	if caller == "" {
		// Cannot happen behind RequireBearerToken; refuse rather than act as nobody.
		r.log.ErrorContext(ctx, "mcp: tool call without a caller")
		return toolResult(envelopeInternal, true), nil
	}

	args := req.Params.Arguments
	switch trimmed := bytes.TrimSpace(args); {
	case len(trimmed) == 0 || string(trimmed) == "null":
		args = json.RawMessage(`{}`) // no arguments: the domain says what is missing
	case trimmed[0] != '{':
		return toolResult(envelopeArgsNotObject, true), nil
	}

	// R25.1: a span per MCP request, inside the HTTP server span; its
	// attributes name the action and the calling session, never the
	// arguments (a prompt), the token or mcp.session.id.
	ctx, span := otelx.Tracer().Start(ctx, "tools/call relay_tool", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyMCPMethod.String("tools/call"), otelx.KeySession.String(caller),
			otelx.KeyAction.String(spanAction(actionOf(args))))
	}

	var d *domain.Delivery
	if post, _ := ctx.Value(postKey{}).(*mcpPost); post != nil {
		post.begin()
		defer post.end() // before the SDK writes the result
		// The SDK hands the handler a context that a client disconnect does not cancel
		// (protocol versions before 2026-07-28 and most calls after); the POST's own does.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		unwatch := context.AfterFunc(post.ctx, cancel)
		defer func() {
			unwatch()
			cancel()
		}()
		d = domain.NewDelivery()
		post.add(d.Settle)
	}

	if !r.take(caller) {
		return toolResult(envelopeBusy, true), nil
	}
	handedOver := false // a task keeps the place until its call ends (callAsTask)
	defer func() {
		if !handedOver {
			r.release(caller)
		}
	}()
	ctx, untrack := r.track(ctx, caller)
	defer untrack()
	stop := r.keepCallAlive(ctx, req, args)
	result, isError, isTask := r.dispatch(ctx, req, caller, args, d)
	stop()
	if isTask {
		handedOver = true
		return toolResult(json.RawMessage(`{}`), false), nil // the middleware answers the task
	}

	if !isJSONObject(result) {
		r.log.ErrorContext(ctx, "mcp: domain returned a result that is not a JSON object",
			"session", caller, "result", truncate(string(result), 200))
		return toolResult(envelopeInternal, true), nil
	}
	return toolResult(result, isError), nil
}

// dispatch runs the call: through the domain's task door for a client that
// declared MCP Tasks (R24.1; isTask: the call became a task), else blocking.
func (r *mcpRoute) dispatch(ctx context.Context, req *mcp.CallToolRequest, caller string, args json.RawMessage, d *domain.Delivery) (result json.RawMessage, isError, isTask bool) {
	if td, ok := r.domain.(TaskDomain); ok && taskActions[actionOf(args)] && declaresTasks(req.ClientCapabilities()) {
		return r.callAsTask(ctx, td, caller, args, d)
	}
	result, isError = r.runDomain(ctx, caller, args, d)
	return result, isError, false
}

// runDomain calls the domain and turns a panic into REMOTE_RELAY_INTERNAL: the SDK runs
// handlers on its own goroutines and does not recover, so a panic would end the process.
func (r *mcpRoute) runDomain(ctx context.Context, caller string, args json.RawMessage, d *domain.Delivery) (result json.RawMessage, isError bool) {
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "mcp: panic in tool call", "session", caller, "panic", p, "stack", string(debug.Stack()))
			result, isError = envelopeInternal, true
		}
	}()
	return r.domain.CallTool(ctx, caller, args, d)
}

// toolResult is the MCP form of an envelope (R3.1): one text item holding the JSON and the
// same object as structuredContent.
func toolResult(envelope json.RawMessage, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(envelope)}},
		StructuredContent: envelope,
		IsError:           isError,
	}
}

// keepCallAlive keeps the client from giving up on a long call (R7.11): after ProgressFirst
// and then every ProgressEvery until stop is called, it sends a progress notification when
// the request carries a progress token, and otherwise an SSE comment line on the POST's
// response. stop returns once nothing more will be written. A progress message names the
// call's action (args).
func (r *mcpRoute) keepCallAlive(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) (stop func()) {
	token := req.Params.GetProgressToken()
	kw, _ := ctx.Value(keepAliveKey{}).(*keepAliveWriter)
	if token == nil && kw == nil {
		return func() {}
	}
	// A timer, not a goroutine: most calls end before the first keep-alive is due.
	// A tick holds mu while it runs, so stop returns only once none is running:
	// nothing is sent for the call after its result.
	var (
		mu      sync.Mutex
		stopped bool
		n       int
		timer   *time.Timer
	)
	start := time.Now()
	mu.Lock()
	timer = time.AfterFunc(r.opts.ProgressFirst, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		n++
		if token != nil {
			prefix := ""
			if action := actionOf(args); action != "" {
				prefix = action + ": "
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(n),
				Message:       fmt.Sprintf("%swaiting… %s", prefix, time.Since(start).Round(time.Second)),
			})
			if err != nil {
				r.log.DebugContext(ctx, "mcp: progress notification", "err", err)
			}
		} else if !kw.keepAlive() {
			return // the response is finished or is not an event stream
		}
		timer.Reset(r.opts.ProgressEvery)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		timer.Stop()
	}
}

// actionOf returns the "action" argument when it is a string, for progress messages.
func actionOf(args json.RawMessage) string {
	var a struct {
		Action any `json:"action"`
	}
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	s, _ := a.Action.(string)
	return truncate(s, 40)
}

// spanAction is an action's name as a span attribute: a name of lower-case
// letters and underscores as it is, anything else (free text an agent put
// there) "other".
func spanAction(a string) string {
	if a == "" {
		return ""
	}
	for _, c := range a {
		if (c < 'a' || c > 'z') && c != '_' {
			return "other"
		}
	}
	return a
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// listTools shapes tools/list results: a tool in listed is answered as listed there (the
// registered one is a stand-in with a minimal schema), a tool in hidden is dropped; hidden
// tools stay callable.
func listTools(listed map[string]*mcp.Tool, hidden ...string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if err != nil || method != "tools/list" {
				return res, err
			}
			if list, ok := res.(*mcp.ListToolsResult); ok {
				// The SDK builds a fresh slice per request, so changing it in place is safe
				// (the tools it points to are the registered ones: replaced, never changed).
				list.Tools = slices.DeleteFunc(list.Tools, func(t *mcp.Tool) bool {
					return slices.Contains(hidden, t.Name)
				})
				for i, t := range list.Tools {
					if full, ok := listed[t.Name]; ok {
						list.Tools[i] = full
					}
				}
			}
			return res, nil
		}
	}
}

// minLevelHandler passes on records at min and above only.
type minLevelHandler struct {
	slog.Handler
	min slog.Level
}

func (h minLevelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevelHandler{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h minLevelHandler) WithGroup(name string) slog.Handler {
	return minLevelHandler{Handler: h.Handler.WithGroup(name), min: h.min}
}

// ---- SSE keep-alive for clients without a progress token ----

// keepAliveKey is the context key under which keepAliveHandler hands its writer to the tool
// handler. In stateless mode the SDK derives each request's handler context from that POST's
// request context (its values, not its cancellation), so the value reaches exactly the call
// it belongs to.
type keepAliveKey struct{}

// postKey is the context key of the POST's [mcpPost], set the same way.
type postKey struct{}

// mcpPost is what the tool calls of one POST share with keepAliveHandler: the POST's own
// context (done when the client went away) and the delivery hooks of the calls
// (domain.Delivery), settled once the SDK finished writing the response.
type mcpPost struct {
	ctx context.Context

	mu      sync.Mutex
	calls   int // tool calls started
	running int // tool calls that have not returned
	settled bool
	settles []func(delivered bool)
}

func (p *mcpPost) begin() {
	p.mu.Lock()
	p.calls++
	p.running++
	p.mu.Unlock()
}

func (p *mcpPost) end() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
}

// returned reports whether the POST's tool calls ran and all returned: what the SDK writes
// from then on are their results.
func (p *mcpPost) returned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls > 0 && p.running == 0
}

// add registers a call's settle func; after the POST was settled it runs at once, as
// undelivered.
func (p *mcpPost) add(settle func(delivered bool)) {
	p.mu.Lock()
	if p.settled {
		p.mu.Unlock()
		settle(false)
		return
	}
	p.settles = append(p.settles, settle)
	p.mu.Unlock()
}

// settle tells every call of the POST whether its result reached the client.
func (p *mcpPost) settle(delivered bool) {
	p.mu.Lock()
	fns := p.settles
	p.settles, p.settled = nil, true
	p.mu.Unlock()
	for _, fn := range fns {
		fn(delivered)
	}
}

// keepAliveHandler gives each POST a keepAliveWriter, so that a running tool call can open
// the SSE response early and write comment lines before the SDK has written anything (the
// SDK sends no byte until its first event, and clients abort calls that stay silent).
type keepAliveHandler struct {
	next http.Handler
}

func (h keepAliveHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		h.next.ServeHTTP(w, req)
		return
	}
	post := &mcpPost{ctx: req.Context()}
	kw := newKeepAliveWriter(w)
	kw.post = post
	delivered := false
	defer func() { post.settle(delivered) }() // also on panic, as undelivered
	defer kw.close()                          // also on panic: nothing may write after ServeHTTP returns
	ctx := context.WithValue(req.Context(), keepAliveKey{}, kw)
	ctx = context.WithValue(ctx, postKey{}, post)
	// In stateless mode ServeHTTP returns only once the tool handlers returned and their
	// results were written (or dropped, for a client gone).
	h.next.ServeHTTP(kw, req.WithContext(ctx))
	delivered = kw.finish()
}

// errResponseFinished is returned by writes after the handler returned.
var errResponseFinished = errors.New("mcp: response already finished")

// keepAliveWriter is the http.ResponseWriter the SDK writes to. Until the response is
// committed the SDK works on its own header map; the first WriteHeader, Write or Flush of the
// SDK, or a due keep-alive, commits it. All writes to the real writer hold mu, so a comment
// never lands inside an event.
type keepAliveWriter struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	header    http.Header // the SDK's header map
	committed bool        // WriteHeader was called on w
	sse       bool        // committed as 200 text/event-stream
	keptAlive bool        // a keep-alive committed the response
	closed    bool        // the handler returned: no more writes
	post      *mcpPost    // the POST: its context, its calls (nil: none known)
	result    bool        // the SDK wrote after the tool calls returned: their results
	failed    bool        // a write or flush failed or came after the client went away
	// The results of a response nothing was sent of yet are held and sent at finish
	// with their length, headers and body in one write, instead of an event stream
	// written in chunks and flushed per event (one write more, and the chunks' end).
	held     bytes.Buffer
	heldCode int // the status the SDK set for the held results (0: 200)
}

// holdingLocked reports whether what the SDK writes now is held for finish: the
// response is not committed and the POST's tool calls all returned (results only).
func (k *keepAliveWriter) holdingLocked() bool {
	return !k.committed && k.post != nil && k.post.returned()
}

// commitHeldLocked commits the response, with the status the SDK set for what is held,
// and writes what is held: a call of the same POST (a batch) began after the others
// returned, and the response goes out before finish.
func (k *keepAliveWriter) commitHeldLocked() {
	k.commitLocked(cmp.Or(k.heldCode, http.StatusOK))
	if k.held.Len() > 0 {
		if _, err := k.w.Write(k.held.Bytes()); err != nil {
			k.failed = true
		}
		k.held.Reset()
	}
}

func newKeepAliveWriter(w http.ResponseWriter) *keepAliveWriter {
	return &keepAliveWriter{w: w, header: w.Header().Clone()}
}

// checkGoneLocked marks the response failed when the client went away: what is written
// from now on does not reach it. Writes check it, not flushes: a client may leave as soon as
// it read what a write sent out.
func (k *keepAliveWriter) checkGoneLocked() {
	if k.post != nil && k.post.ctx.Err() != nil {
		k.failed = true
	}
}

func (k *keepAliveWriter) Header() http.Header { return k.header }

func (k *keepAliveWriter) WriteHeader(code int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.committed || k.heldCode != 0 || k.held.Len() > 0 {
		return // as net/http: a later WriteHeader is superfluous
	}
	if k.holdingLocked() {
		k.heldCode = code
		return
	}
	k.commitLocked(code)
}

func (k *keepAliveWriter) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return 0, errResponseFinished
	}
	k.checkGoneLocked()
	if len(p) > 0 && k.post != nil && k.post.returned() {
		k.result = true
	}
	if k.holdingLocked() {
		return k.held.Write(p)
	}
	if !k.committed {
		k.commitHeldLocked()
	} else if k.keptAlive && mediaType(k.header) == "application/json" {
		// The response went out as an event stream before the SDK decided to answer with a
		// plain JSON body (a protocol-level error of 2026-07-28): deliver it as an event.
		var b bytes.Buffer
		b.WriteString("event: message\ndata: ")
		b.Write(bytes.TrimRight(p, "\r\n"))
		b.WriteString("\n\n")
		if _, err := k.w.Write(b.Bytes()); err != nil {
			k.failed = true
			return 0, err
		}
		return len(p), nil
	}
	n, err := k.w.Write(p)
	if err != nil {
		k.failed = true
	}
	return n, err
}

// Flush implements http.Flusher.
func (k *keepAliveWriter) Flush() { _ = k.FlushError() }

// FlushError is what http.ResponseController uses.
func (k *keepAliveWriter) FlushError() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errResponseFinished
	}
	if k.holdingLocked() {
		return nil // sent at finish
	}
	if !k.committed {
		k.commitHeldLocked()
	}
	err := http.NewResponseController(k.w).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		k.failed = true
	}
	return err
}

// keepAlive writes one SSE comment, committing the response as an event stream first if the
// SDK has not written yet. It reports false when no comment can be written any more: the
// response is finished or is not an event stream.
func (k *keepAliveWriter) keepAlive() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	if !k.committed {
		// The SDK set its headers before it handed the call to the tool handler.
		if mediaType(k.header) != "text/event-stream" {
			return false
		}
		k.commitHeldLocked()
		k.keptAlive = true
	}
	if !k.sse {
		return false
	}
	k.checkGoneLocked()
	if _, err := io.WriteString(k.w, ": keepalive\n\n"); err != nil {
		k.failed = true
		return false
	}
	_ = http.NewResponseController(k.w).Flush()
	return true
}

// finish commits a response the SDK left untouched (as net/http would on return) or held
// (its results, sent now with their length: one write), flushes what the SDK wrote and
// closes. It reports whether the response reached the client as far
// as the server can tell: the SDK wrote the calls' results, every write came while the
// client was there, and no write or flush failed (a client that leaves once it has the
// result does not undo that).
func (k *keepAliveWriter) finish() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	if !k.committed {
		code := cmp.Or(k.heldCode, http.StatusOK)
		if k.held.Len() > 0 {
			k.header.Set("Content-Length", strconv.Itoa(k.held.Len()))
		}
		k.commitLocked(code)
		if k.held.Len() > 0 {
			k.checkGoneLocked()
			if _, err := k.w.Write(k.held.Bytes()); err != nil {
				k.failed = true
			}
		}
	}
	if err := http.NewResponseController(k.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		k.failed = true
	}
	k.closed = true
	return k.result && !k.failed
}

func (k *keepAliveWriter) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
}

// commitLocked makes the real header map equal to the SDK's and writes the status line.
func (k *keepAliveWriter) commitLocked(code int) {
	dst := k.w.Header()
	for key := range dst {
		if _, ok := k.header[key]; !ok {
			delete(dst, key)
		}
	}
	for key, values := range k.header {
		dst[key] = slices.Clone(values)
	}
	k.w.WriteHeader(code)
	k.committed = true
	k.sse = code == http.StatusOK && mediaType(k.header) == "text/event-stream"
}

func mediaType(h http.Header) string {
	t, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return t
}
