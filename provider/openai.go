package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// OpenAIConfig configures an openai provider (R11.3, R17.6): an
// OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM,
// llama.cpp, …) whose agent loop the relay runs itself.
type OpenAIConfig struct {
	ID, Name string
	// BaseURL is the API root, e.g. http://127.0.0.1:11434/v1; the provider
	// posts to BaseURL/chat/completions and lists BaseURL/models.
	BaseURL string
	// APIKeyEnv names the environment variable that holds the key ("" = no
	// Authorization header, for local servers). The variable is read at each
	// request, never kept in the config.
	APIKeyEnv    string
	Models       []string // "" = discovered from GET BaseURL/models
	DefaultModel string
	Efforts      []string // sent as reasoning_effort when the turn has one
	SwitchTo     string
	MaxSteps     int    // model calls per turn; default 25
	SystemPrompt string // optional first message

	// ToolName, ToolDescription and ToolSchema describe relay_tool as the
	// MCP route lists it (ToolSchema is its JSON input schema). Without a
	// schema the model is offered no tool.
	ToolName        string
	ToolDescription string
	ToolSchema      json.RawMessage

	// Test and tuning hooks.
	HTTPClient    *http.Client                  // default: a client without an overall timeout
	Getenv        func(string) string           // default os.Getenv
	Logger        *slog.Logger                  // default slog.Default()
	DiscoverEvery time.Duration                 // default 10 min
	Backoff       func(retry int) time.Duration // wait before retry 1, 2, 3 (default 0.5 s, 1 s, 2 s)
	// MaxRetryAfter is the longest Retry-After the provider waits for (default 30 s);
	// a longer one ends the turn at once.
	MaxRetryAfter time.Duration
}

const (
	openAIDefaultSteps    = 25
	openAIRetries         = 3
	openAIDiscoverEvery   = 10 * time.Minute
	openAIDiscoverTimeout = 15 * time.Second
	openAIMaxRetryAfter   = 30 * time.Second
	// openAIMaxLine bounds one SSE line (a chunk); openAIMaxArgs the
	// arguments of one tool call as they accumulate.
	openAIMaxLine = 8 << 20
	openAIMaxArgs = 1 << 20
	// openAIPartialEvery is how often streamed text is reported.
	openAIPartialEvery = 100 * time.Millisecond
)

// OpenAI is the openai provider. It is safe for concurrent turns.
type OpenAI struct {
	c   OpenAIConfig
	log *slog.Logger

	mu         sync.Mutex
	discovered []string
}

var _ Provider = (*OpenAI)(nil)

// NewOpenAI returns an openai provider for c.
func NewOpenAI(c OpenAIConfig) *OpenAI {
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	c.Models = append([]string(nil), c.Models...)
	c.Efforts = append([]string(nil), c.Efforts...)
	c.ToolSchema = append(json.RawMessage(nil), c.ToolSchema...)
	if c.MaxSteps <= 0 {
		c.MaxSteps = openAIDefaultSteps
	}
	if c.ToolName == "" {
		c.ToolName = "relay_tool"
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.DiscoverEvery <= 0 {
		c.DiscoverEvery = openAIDiscoverEvery
	}
	if c.Backoff == nil {
		c.Backoff = func(retry int) time.Duration { return 500 * time.Millisecond << (retry - 1) }
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = openAIMaxRetryAfter
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	return &OpenAI{c: c, log: log}
}

// Info describes the provider; without configured models it lists the ones
// the endpoint named last (none before the first discovery: a model then
// passes unchecked).
func (o *OpenAI) Info() Info {
	return Info{
		ID:           o.c.ID,
		Name:         o.c.Name,
		Type:         "openai",
		Models:       o.models(),
		DefaultModel: o.c.DefaultModel,
		// Discovered lists may lag behind the server (a model pulled since).
		ModelsDiscovered: len(o.c.Models) == 0,
		Efforts:          append([]string(nil), o.c.Efforts...),
		SwitchTo:         o.c.SwitchTo,
		WantsHistory:     true, // the model sees the conversation only as the request carries it
	}
}

func (o *OpenAI) models() []string {
	if len(o.c.Models) > 0 {
		return append([]string(nil), o.c.Models...)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.discovered...)
}

// Discovery lists the endpoint's models now and every DiscoverEvery (a
// failed listing is tried again after a minute) until ctx ends. It returns at
// once when the config names the models.
func (o *OpenAI) Discovery(ctx context.Context) {
	if len(o.c.Models) > 0 {
		return
	}
	for {
		wait := o.c.DiscoverEvery
		if err := o.Discover(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			o.log.Warn("openai provider: model discovery failed", "provider", o.c.ID, "err", err)
			wait = min(wait, time.Minute)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Discover reads GET BaseURL/models once and keeps the model ids it names.
func (o *OpenAI) Discover(ctx context.Context) error {
	key, err := o.key()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, openAIDiscoverTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.c.BaseURL+"/models", nil)
	if err != nil {
		return errors.New(o.scrub(err.Error(), key))
	}
	o.headers(req, key)
	resp, err := o.c.HTTPClient.Do(req)
	if err != nil {
		return errors.New(o.connError(err, key))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return errors.New(o.statusError(resp.StatusCode, body, key, 0))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return errors.New(o.scrub(fmt.Sprintf("GET %s/models: not a model list: %v", o.shownURL(), err), key))
	}
	seen := map[string]bool{}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" && !seen[m.ID] {
			seen[m.ID] = true
			ids = append(ids, m.ID)
		}
	}
	o.mu.Lock()
	o.discovered = ids
	o.mu.Unlock()
	return nil
}

// Chat-completions wire types (only the fields the provider uses).
type chatMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string          `json:"type"`
	Function chatToolFuncDef `json:"function"`
}

type chatToolFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type chatRequest struct {
	Model           string        `json:"model"`
	Messages        []chatMessage `json:"messages"`
	Tools           []chatTool    `json:"tools,omitempty"`
	Stream          bool          `json:"stream"`
	StreamOptions   *streamOpts   `json:"stream_options,omitempty"`
	ReasoningEffort string        `json:"reasoning_effort,omitempty"`
}

type streamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type chatError struct {
	Message string `json:"message"`
}

// chatChunk is one streamed chunk, or (with Message) a whole answer from a
// server that did not stream.
type chatChunk struct {
	Choices []struct {
		Delta   *chunkDelta `json:"delta"`
		Message *chunkDelta `json:"message"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
	Error *chatError `json:"error"`
}

type chunkDelta struct {
	Content   *string `json:"content"`
	ToolCalls []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string   `json:"name"`
			Arguments jsonText `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// jsonText is a JSON string's text, or the JSON itself when the value is not
// a string (some servers send tool arguments as an object).
type jsonText string

func (t *jsonText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = jsonText(s)
		return nil
	}
	if string(b) == "null" {
		*t = ""
		return nil
	}
	*t = jsonText(b)
	return nil
}

func strPtr(s string) *string { return &s }

// Run runs the agent loop of one turn: the model answers, each relay_tool
// call it makes runs as the session (Host.CallTool) and its result goes back
// as a tool message, until an answer without a tool call (the reply) or
// MaxSteps model calls.
func (o *OpenAI) Run(ctx context.Context, t Turn, h Host) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("openai provider %q: %w", o.c.ID, err)
	}
	model := o.turnModel(t)
	if model == "" {
		return Result{}, &TurnError{Msg: fmt.Sprintf("openai provider %q: no model: set default_model or models in the provider's config, or pass model", o.c.ID)}
	}
	key, err := o.key()
	if err != nil {
		return Result{}, &TurnError{Msg: err.Error()}
	}
	req := o.request(t, model)
	var usage Usage
	text := &turnText{}
	for step := 1; step <= o.c.MaxSteps; step++ {
		if step > 1 {
			text.sep()
		}
		ans, err := o.complete(ctx, key, &req, text, h)
		usage.InputTokens += ans.usage.PromptTokens
		usage.OutputTokens += ans.usage.CompletionTokens
		if err != nil {
			return Result{Usage: usage}, o.stopped(ctx, err)
		}
		if len(ans.calls) == 0 {
			return Result{Text: BoundReply(ans.content.reply()), Model: model, Usage: usage}, nil
		}
		if err := o.callTools(ctx, h, &req, ans); err != nil {
			return Result{Usage: usage}, err
		}
	}
	return Result{Usage: usage}, &TurnError{Msg: fmt.Sprintf("stopped after %d steps", o.c.MaxSteps)}
}

// turnModel is the turn's model, else the provider's default, else the
// first it lists ("" when none).
func (o *OpenAI) turnModel(t Turn) string {
	if t.Model != "" {
		return t.Model
	}
	if o.c.DefaultModel != "" {
		return o.c.DefaultModel
	}
	if ms := o.models(); len(ms) > 0 {
		return ms[0]
	}
	return ""
}

// request is the turn's first chat request: streamed with its usage, the
// effort when the provider has efforts, and relay_tool when the relay
// hands its agents the MCP route (agent sessions on, R4.2 Decision).
func (o *OpenAI) request(t Turn, model string) chatRequest {
	req := chatRequest{
		Model:         model,
		Messages:      o.messages(t),
		Stream:        true,
		StreamOptions: &streamOpts{IncludeUsage: true},
	}
	if t.Effort != "" && len(o.c.Efforts) > 0 {
		req.ReasoningEffort = t.Effort
	}
	if t.MCPURL != "" && len(o.c.ToolSchema) > 0 {
		req.Tools = []chatTool{{Type: "function", Function: chatToolFuncDef{
			Name: o.c.ToolName, Description: o.c.ToolDescription, Parameters: o.c.ToolSchema}}}
	}
	return req
}

// stopped is a failed step's error: the stop when the turn was stopped.
func (o *OpenAI) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai provider %q: %w", o.c.ID, ctx.Err())
	}
	return err
}

// callTools adds the model's answer with its tool calls to the
// conversation, runs each call and adds its result; a stop ends it.
func (o *OpenAI) callTools(ctx context.Context, h Host, req *chatRequest, ans answer) error {
	am := chatMessage{Role: "assistant", ToolCalls: ans.calls}
	if c := ans.content.reply(); c != "" {
		am.Content = strPtr(c)
	}
	req.Messages = append(req.Messages, am)
	for _, call := range ans.calls {
		res := o.callTool(ctx, h, call)
		if ctx.Err() != nil {
			return fmt.Errorf("openai provider %q: %w", o.c.ID, ctx.Err())
		}
		req.Messages = append(req.Messages, chatMessage{Role: "tool", ToolCallID: call.ID, Content: strPtr(string(res))})
	}
	return nil
}

// messages is the start of a turn's conversation: the system prompt, the
// session's history (the agent's own replies as assistant, everything else
// as user; neighbours of one role joined, as some chat templates require
// alternating roles) and the prompt.
func (o *OpenAI) messages(t Turn) []chatMessage {
	var out []chatMessage
	if o.c.SystemPrompt != "" {
		out = append(out, chatMessage{Role: "system", Content: strPtr(o.c.SystemPrompt)})
	}
	add := func(role, text string) {
		if strings.TrimSpace(text) == "" {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role && role != "system" {
			out[n-1].Content = strPtr(*out[n-1].Content + "\n\n" + text)
			return
		}
		out = append(out, chatMessage{Role: role, Content: strPtr(text)})
	}
	for _, m := range t.History {
		role := "user"
		if m.Role == "assistant" {
			role = "assistant"
		}
		add(role, m.Text)
	}
	add("user", t.Prompt)
	if n := len(out); n == 0 || out[n-1].Role != "user" {
		out = append(out, chatMessage{Role: "user", Content: strPtr(t.Prompt)})
	}
	return out
}

// callTool runs one tool call as the session and returns its JSON result; a
// call the relay cannot take gets an error envelope of the same shape.
func (o *OpenAI) callTool(ctx context.Context, h Host, call chatToolCall) json.RawMessage {
	if call.Function.Name != o.c.ToolName && call.Function.Name != "remote_relay" {
		return toolFailure(fmt.Sprintf("There is no tool %q; the only tool is %s. Nothing was done.", call.Function.Name, o.c.ToolName))
	}
	args := strings.TrimSpace(call.Function.Arguments)
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return toolFailure("The arguments of " + o.c.ToolName + " are not valid JSON; pass one JSON object. Nothing was done.")
	}
	if h == nil {
		return toolFailure("relay_tool is not available in this turn. Nothing was done.")
	}
	return h.CallTool(ctx, json.RawMessage(args))
}

func toolFailure(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"ok": false, "code": "REMOTE_RELAY_INVALID_INPUT", "error": msg, "summary": msg})
	return b
}

// answer is one model call's outcome.
type answer struct {
	content *turnText // the shared turn text; reply() is this step's part
	calls   []chatToolCall
	usage   chatUsage
}

// complete makes one model call, retrying 429 and 5xx answers.
func (o *OpenAI) complete(ctx context.Context, key string, req *chatRequest, text *turnText, h Host) (answer, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return answer{}, &TurnError{Msg: fmt.Sprintf("openai provider %q: encode the request: %v", o.c.ID, err)}
	}
	for retry := 0; ; retry++ {
		resp, err := o.post(ctx, key, body)
		if err != nil {
			return answer{}, err
		}
		if resp.StatusCode == http.StatusOK {
			ans, err := o.read(ctx, resp, key, text, h)
			resp.Body.Close()
			return ans, err
		}
		wait, err := o.retryWait(resp, key, retry)
		if err != nil {
			return answer{}, err
		}
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return answer{}, ctx.Err()
		case <-tm.C:
		}
	}
}

// post sends one chat request; an error is the stop, or a *TurnError
// saying why the endpoint gave no answer.
func (o *OpenAI) post(ctx context.Context, key string, body []byte) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, o.c.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, &TurnError{Msg: o.scrub(fmt.Sprintf("openai provider %q: %v", o.c.ID, err), key)}
	}
	o.headers(hr, key)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	resp, err := o.c.HTTPClient.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &TurnError{Msg: o.connError(err, key)}
	}
	return resp, nil
}

// retryWait reads (and closes) an answer other than 200: how long to wait
// before retry+1, or the turn's error when its status is not retried (only
// 429 and 5xx are), the retries are spent, or the endpoint asks to wait
// longer than MaxRetryAfter.
func (o *OpenAI) retryWait(resp *http.Response, key string, retry int) (time.Duration, error) {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	st := resp.StatusCode
	if st != http.StatusTooManyRequests && st < 500 {
		return 0, &TurnError{Msg: o.statusError(st, data, key, 0)}
	}
	if retry == openAIRetries {
		return 0, &TurnError{Msg: o.statusError(st, data, key, retry)}
	}
	wait := o.c.Backoff(retry + 1)
	if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		if ra > o.c.MaxRetryAfter {
			return 0, &TurnError{Msg: o.statusError(st, data, key, retry) +
				fmt.Sprintf(" (it asks to wait %s before trying again)", ra.Round(time.Second))}
		}
		wait = ra
	}
	return wait, nil
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := time.Until(t)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// read reads one answer: an SSE stream of chunks up to [DONE] (or a plain
// JSON completion from a server that does not stream).
func (o *OpenAI) read(ctx context.Context, resp *http.Response, key string, text *turnText, h Host) (answer, error) {
	text.startStep()
	r := &answerReader{o: o, key: key, h: h, text: text, ans: answer{content: text},
		byIndex: map[int]*pendingCall{}, reported: text.total()}
	defer r.report(true)
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		return r.readJSON(ctx, resp.Body)
	}
	return r.readSSE(ctx, resp.Body)
}

// answerReader reads one answer of the endpoint: its text goes to the
// turn's text (and, as it streams, to the host), its tool calls gather by
// their index.
type answerReader struct {
	o    *OpenAI
	key  string
	h    Host
	text *turnText
	ans  answer

	calls   []*pendingCall
	byIndex map[int]*pendingCall

	// The text streamed so far is reported at most every
	// openAIPartialEvery, and once more when the answer ends (or breaks
	// off), so a stopped turn keeps all of it.
	last     time.Time
	reported int64
}

// pendingCall is a tool call whose parts are still streaming.
type pendingCall struct {
	id, name string
	args     strings.Builder
}

// readJSON reads a plain JSON completion.
func (r *answerReader) readJSON(ctx context.Context, body io.Reader) (answer, error) {
	var c chatChunk
	if err := json.NewDecoder(io.LimitReader(body, openAIMaxLine)).Decode(&c); err != nil {
		if ctx.Err() != nil {
			return r.ans, ctx.Err()
		}
		return r.ans, &TurnError{Msg: fmt.Sprintf("openai provider %q: the endpoint's answer is not a chat completion: %v", r.o.c.ID, err)}
	}
	if err := r.chunk(&c, false); err != nil {
		return r.ans, err
	}
	return r.finish(), nil
}

// readSSE reads an SSE stream of chunks up to [DONE].
func (r *answerReader) readSSE(ctx context.Context, body io.Reader) (answer, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), openAIMaxLine)
	done := false
	for sc.Scan() {
		data, ok := sseData(sc.Bytes())
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var c chatChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return r.ans, &TurnError{Msg: fmt.Sprintf("openai provider %q: the endpoint streamed a chunk that is not JSON: %v", r.o.c.ID, err)}
		}
		if err := r.chunk(&c, true); err != nil {
			return r.ans, err
		}
		r.report(false)
	}
	if err := r.streamEnd(ctx, sc.Err(), done); err != nil {
		return r.ans, err
	}
	return r.finish(), nil
}

// sseData is the data of an SSE data: line, trimmed; false for other
// lines (blank lines, comments, event: and id: fields) and empty data.
func sseData(line []byte) ([]byte, bool) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false
	}
	data = bytes.TrimSpace(data)
	return data, len(data) > 0
}

// streamEnd is the error of a stream that ended (scanned to its end or to
// [DONE]): it broke off, the turn was stopped, or it ended without an
// answer.
func (r *answerReader) streamEnd(ctx context.Context, err error, done bool) error {
	id := r.o.c.ID
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, bufio.ErrTooLong) {
			return &TurnError{Msg: fmt.Sprintf("openai provider %q: the endpoint streamed a line longer than %d bytes", id, openAIMaxLine)}
		}
		return &TurnError{Msg: r.o.scrub(fmt.Sprintf("openai provider %q: the stream broke off: %v", id, unwrapURLError(err)), r.key)}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !done && r.text.stepLen() == 0 && len(r.calls) == 0 {
		return &TurnError{Msg: fmt.Sprintf("openai provider %q: the stream ended without an answer", id)}
	}
	return nil
}

// chunk takes one chunk (a streamed one, or a whole answer): its error
// ends the answer; its usage, its choices' text and tool calls are kept.
func (r *answerReader) chunk(c *chatChunk, streamed bool) error {
	if c.Error != nil {
		return &TurnError{Msg: r.o.scrub(fmt.Sprintf("the endpoint reported an error: %s", c.Error.Message), r.key)}
	}
	if c.Usage != nil {
		r.ans.usage = *c.Usage
	}
	for _, ch := range c.Choices {
		d := ch.Message
		if streamed && ch.Delta != nil {
			d = ch.Delta
		}
		if err := r.apply(d); err != nil {
			return err
		}
	}
	return nil
}

// apply adds a choice's text and tool call parts.
func (r *answerReader) apply(d *chunkDelta) error {
	if d == nil {
		return nil
	}
	if d.Content != nil && *d.Content != "" {
		r.text.write(*d.Content)
	}
	for i, tc := range d.ToolCalls {
		idx := i
		if tc.Index != nil {
			idx = *tc.Index
		}
		p := r.call(idx)
		if tc.ID != "" {
			p.id = tc.ID
		}
		if tc.Function.Name != "" {
			p.name = tc.Function.Name
		}
		if p.args.Len()+len(tc.Function.Arguments) > openAIMaxArgs {
			return &TurnError{Msg: fmt.Sprintf("openai provider %q: the model's tool call arguments exceed %d bytes", r.o.c.ID, openAIMaxArgs)}
		}
		p.args.WriteString(string(tc.Function.Arguments))
	}
	return nil
}

// call is the tool call of index idx, new when first heard of.
func (r *answerReader) call(idx int) *pendingCall {
	p := r.byIndex[idx]
	if p == nil {
		p = &pendingCall{}
		r.byIndex[idx] = p
		r.calls = append(r.calls, p)
	}
	return p
}

// finish is the answer with its tool calls (an id made up where the
// endpoint gave none).
func (r *answerReader) finish() answer {
	for i, p := range r.calls {
		id := p.id
		if id == "" {
			id = fmt.Sprintf("call_%d", i+1)
		}
		r.ans.calls = append(r.ans.calls, chatToolCall{ID: id, Type: "function", Function: chatFunction{Name: p.name, Arguments: p.args.String()}})
	}
	return r.ans
}

// report hands the host the text streamed so far, at most every
// openAIPartialEvery unless forced.
func (r *answerReader) report(force bool) {
	if r.h == nil || r.text.total() == r.reported || (!force && time.Since(r.last) < openAIPartialEvery) {
		return
	}
	r.last, r.reported = time.Now(), r.text.total()
	if s := r.text.partial(); s != "" {
		r.h.Partial(s)
	}
}

// key is the API key from the environment variable named by api_key_env
// ("" when none is configured).
func (o *OpenAI) key() (string, error) {
	if o.c.APIKeyEnv == "" {
		return "", nil
	}
	k := strings.TrimSpace(o.c.Getenv(o.c.APIKeyEnv))
	if k == "" {
		return "", fmt.Errorf("openai provider %q: the environment variable %s (api_key_env) is not set", o.c.ID, o.c.APIKeyEnv)
	}
	return k, nil
}

func (o *OpenAI) headers(r *http.Request, key string) {
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
}

// shownURL is BaseURL without user info and query, for messages.
func (o *OpenAI) shownURL() string {
	u, err := url.Parse(o.c.BaseURL)
	if err != nil {
		return "(the configured base_url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// connError describes a request that got no answer.
func (o *OpenAI) connError(err error, key string) string {
	inner := unwrapURLError(err)
	var msg string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("the endpoint %s refused the connection (is the server running?)", o.shownURL())
	default:
		var dns *net.DNSError
		if errors.As(err, &dns) {
			msg = fmt.Sprintf("the endpoint %s cannot be found: %v", o.shownURL(), dns)
		} else {
			msg = fmt.Sprintf("the endpoint %s cannot be reached: %v", o.shownURL(), inner)
		}
	}
	return o.scrub(msg, key)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// statusError describes an answer other than 200. 401/403 are about the key
// and say nothing else (an endpoint may echo part of the key).
func (o *OpenAI) statusError(status int, body []byte, key string, retries int) string {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return fmt.Sprintf("the endpoint refused the API key (HTTP %d)", status)
	}
	msg := fmt.Sprintf("the endpoint answered HTTP %d", status)
	if t := http.StatusText(status); t != "" {
		msg += " (" + t + ")"
	}
	if retries > 0 {
		msg += fmt.Sprintf(" and still did after %d retries", retries)
	}
	if detail := errorDetail(body); detail != "" {
		msg += ": " + detail
	}
	return o.scrub(msg, key)
}

// errorDetail is the error message of an error body ({"error":{"message"}},
// {"error":"…"}, or short text), at most 300 bytes.
func errorDetail(body []byte) string {
	var s string
	var e1 struct {
		Error chatError `json:"error"`
	}
	var e2 struct {
		Error string `json:"error"`
	}
	switch {
	case json.Unmarshal(body, &e1) == nil && e1.Error.Message != "":
		s = e1.Error.Message
	case json.Unmarshal(body, &e2) == nil && e2.Error != "":
		s = e2.Error
	case !json.Valid(body):
		s = string(body)
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// keyLike are words that look like API keys (sk-…, pk-…, key-…), masked in any
// text that came from the endpoint, in case it echoes (part of) a key.
var keyLike = regexp.MustCompile(`\b(sk|pk|key)-[A-Za-z0-9*_.\-]{8,}`)

// scrub removes the key, and anything that looks like a key, from text that
// reaches an error, a log line or a message.
func (o *OpenAI) scrub(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "[key]")
	}
	return keyLike.ReplaceAllString(s, "[key]")
}

// turnText is the text a turn streamed, kept bounded (the last
// MaxReplyBytes, the cut counted) across the turn's steps; the reply is the
// last step's part.
type turnText struct {
	buf       []byte
	cut       int64
	stepStart int64 // absolute offset (cut included) where this step began
}

func (b *turnText) startStep() { b.stepStart = b.total() }

// sep separates one step's text from the next in partial reports.
func (b *turnText) sep() {
	if len(b.buf) > 0 && !bytes.HasSuffix(b.buf, []byte("\n\n")) {
		b.write("\n\n")
	}
}

func (b *turnText) write(s string) {
	b.buf = append(b.buf, s...)
	if len(b.buf) > 2*MaxReplyBytes {
		drop := len(b.buf) - MaxReplyBytes
		b.cut += int64(drop)
		b.buf = append(b.buf[:0], b.buf[drop:]...)
	}
}

func (b *turnText) total() int64 { return b.cut + int64(len(b.buf)) }

func (b *turnText) stepLen() int64 { return b.total() - b.stepStart }

// reply is this step's text (bounded: boundReply notes what was cut).
func (b *turnText) reply() string {
	start := b.stepStart - b.cut
	cut := int64(0)
	if start < 0 {
		cut, start = -start, 0
	}
	return boundReply(bytes.TrimSpace(b.buf[start:]), cut)
}

// partial is the last MaxPartialBytes of the turn's text so far.
func (b *turnText) partial() string { return tailText(b.buf, MaxPartialBytes) }
