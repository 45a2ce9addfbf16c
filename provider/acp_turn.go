package provider

// One turn of an ACP agent: the prompt and its stop (R22.2), the silence
// watchdog, the session updates that stream the reply and the tool calls
// (R22.6), the turn's result.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// acpTurn is the running turn of a process.
type acpTurn struct {
	t      Turn
	h      Host
	ctx    context.Context
	model  string
	folder *acpFolder // the session's folder, open for this turn (R18.25)

	mu      sync.Mutex
	text    []byte // all text so far (inFlight)
	segment []byte // text since the last tool call (the reply)
	waits   int    // questions, relay_tool calls and terminal waits running
	tools   map[string]*acpTool
	added   chan struct{} // closed (and made anew) when a tool call is first heard of
	usage   Usage
}

type acpTool struct {
	title string
	name  string // the agent's name of the tool (_meta), e.g. mcp__relay__relay_tool
	kind  acp.ToolKind
	relay bool
	done  bool
}

func (at *acpTurn) wait(d int) {
	at.mu.Lock()
	at.waits += d
	at.mu.Unlock()
}

// waiting reports whether the agent waits on the relay: a question, a
// terminal, or a relay_tool call not answered yet (a card, a send waiting
// for its reply): its silence then is not a hung agent.
func (at *acpTurn) waiting() bool {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.waits > 0 {
		return true
	}
	for _, tc := range at.tools {
		if tc.relay && !tc.done {
			return true
		}
	}
	return false
}

// run runs one turn in the process.
func (pr *acpProc) run(ctx context.Context, t Turn, h Host, model string) (Result, error) {
	fo, err := pr.turnFolder(t)
	if err != nil {
		return Result{Model: model}, err
	}
	at := &acpTurn{t: t, h: h, ctx: ctx, model: model, tools: map[string]*acpTool{}, folder: fo}
	pr.begin(at)
	defer pr.end(at)
	pr.touch()
	w := &acpWait{pr: pr, at: at, ctx: ctx}
	w.setup, w.done = pr.prompt(t, at)
	return w.wait()
}

// turnFolder opens the turn's folder: the turn's files go through it,
// opened once (R18.25), and it must be the one the process's first turn
// opened (else the process is stopped).
func (pr *acpProc) turnFolder(t Turn) (*acpFolder, error) {
	fo, err := openFolder(t.Cwd)
	if err != nil {
		pr.idle()
		return nil, &TurnError{Msg: fmt.Sprintf("The session's folder %s cannot be opened: %v", t.Cwd, err)}
	}
	pr.mu.Lock()
	if pr.folder == nil {
		pr.folder = fo.info
	}
	same := os.SameFile(pr.folder, fo.info)
	pr.mu.Unlock()
	if !same {
		fo.close()
		pr.p.forget(pr)
		pr.stop()
		return nil, &TurnError{Msg: fmt.Sprintf("The session's folder %s is no longer the folder the agent (acp) started in (it was replaced); the agent was stopped, the next turn starts it again.", t.Cwd)}
	}
	return fo, nil
}

// begin makes at the process's running turn: the session updates stream
// to it, its relay_tool calls go to its MCP route with its token.
func (pr *acpProc) begin(at *acpTurn) {
	pr.mu.Lock()
	pr.cur = at
	pr.mu.Unlock()
	pr.proxy.set(pr.key, at.t.MCPURL, at.t.Token)
}

// end ends the running turn: its folder is closed, and a process still
// alive waits for the next turn (the idle stop, R22.1).
func (pr *acpProc) end(at *acpTurn) {
	pr.proxy.set(pr.key, "", "")
	pr.mu.Lock()
	pr.cur = nil
	pr.mu.Unlock()
	at.folder.close()
	if !pr.dead() {
		pr.idle()
	}
}

// acpPrompted is the agent's answer to session/prompt.
type acpPrompted struct {
	res acp.PromptResponse
	err error
}

// prompt opens the turn's ACP session and sends it the prompt, in a
// goroutine: setup delivers the opening's error (nil: opened), done the
// prompt's answer. The prompt runs on the process's own context: a stop
// is session/cancel, and the agent ends the prompt itself.
func (pr *acpProc) prompt(t Turn, at *acpTurn) (<-chan error, <-chan acpPrompted) {
	done := make(chan acpPrompted, 1)
	setup := make(chan error, 1)
	go func() {
		note, err := pr.open(t, at)
		setup <- err
		if err != nil {
			return
		}
		prompt := t.Prompt
		if note != "" {
			prompt = note + "\n\n" + prompt
		}
		res, err := pr.conn.Prompt(context.Background(), acp.PromptRequest{SessionId: acp.SessionId(pr.sess()),
			Prompt: []acp.ContentBlock{acp.TextBlock(prompt)}})
		done <- acpPrompted{res, err}
	}()
	return setup, done
}

// acpWait waits for a turn's end: its prompt's answer, the process's end
// or failure, a stop (R22.2), garbage or the agent's silence.
type acpWait struct {
	pr  *acpProc
	at  *acpTurn
	ctx context.Context

	setup   <-chan error
	done    <-chan acpPrompted
	stopped bool        // the turn was stopped: session/cancel was sent
	grace   *time.Timer // the stop's grace (acpCancelGrace)
}

func (w *acpWait) wait() (Result, error) {
	pr := w.pr
	ticker := pr.wd.ticker()
	defer ticker.Stop()
	stopping := w.ctx.Done()
	var grace <-chan time.Time
	defer w.stopGrace()
	for {
		select {
		case err := <-w.setup:
			if err != nil {
				return w.setupFailed(err)
			}
			w.setup = nil
		case o := <-w.done:
			if w.stopped {
				return w.stoppedResult()
			}
			return pr.outcome(w.at, o.res, o.err)
		case <-pr.exited:
			return w.crashed()
		case <-pr.failed:
			// A handler panicked (R18.27): the process is stopped, the
			// turn ends as an error naming the cause.
			pr.p.forget(pr)
			pr.stop()
			return w.crashed()
		case <-stopping:
			stopping = nil // once: the turn is stopped
			grace = w.stop()
		case <-grace:
			pr.p.forget(pr)
			pr.stop()
			return w.stoppedResult()
		case <-ticker.C:
			if err := w.check(); err != nil {
				return w.at.result(), err
			}
		}
	}
}

// stop is the turn's stop (R22.2): session/cancel, then the process group
// is killed if the prompt has not ended within acpCancelGrace.
func (w *acpWait) stop() <-chan time.Time {
	w.stopped = true
	if id := w.pr.sess(); id != "" {
		_ = w.pr.conn.Cancel(context.Background(), acp.CancelNotification{SessionId: acp.SessionId(id)})
	}
	w.grace = time.NewTimer(acpCancelGrace)
	return w.grace.C
}

func (w *acpWait) stopGrace() {
	if w.grace != nil {
		w.grace.Stop()
	}
}

// check is the watchdog's tick: garbage from the agent ends the turn, and
// so does its silence (R17.5) unless the turn was stopped.
func (w *acpWait) check() error {
	pr := w.pr
	if pr.garbage.Load() != nil {
		pr.stop()
		return &TurnError{Msg: pr.crashText()}
	}
	if w.stopped || !pr.wd.silent(w.at.waiting()) {
		return nil
	}
	pr.p.forget(pr)
	pr.stop()
	return &TurnError{Msg: fmt.Sprintf("The agent (acp) sent nothing for %s and was stopped (timing.agent_silence).", pr.p.c.Silence)}
}

// setupFailed: the ACP session could not be opened; the process is
// stopped.
func (w *acpWait) setupFailed(err error) (Result, error) {
	w.pr.p.forget(w.pr)
	w.pr.stop()
	if w.stopped || w.ctx.Err() != nil {
		return w.stoppedResult()
	}
	return Result{Model: w.at.model}, err
}

// crashed: the process ended, or failed, before the prompt's answer.
func (w *acpWait) crashed() (Result, error) {
	if w.stopped {
		return w.stoppedResult()
	}
	return w.at.result(), &TurnError{Msg: w.pr.crashText()}
}

// stoppedResult is a stopped turn's end: what it produced so far.
func (w *acpWait) stoppedResult() (Result, error) {
	return w.at.result(), fmt.Errorf("acp provider %q: %w", w.pr.p.c.ID, w.ctx.Err())
}

// outcome is the turn's result once its prompt ended (R22.2).
func (pr *acpProc) outcome(at *acpTurn, res acp.PromptResponse, err error) (Result, error) {
	out := at.result()
	promptUsage(res, &out)
	if err != nil {
		return out, pr.promptError(err, &out)
	}
	if msg, ok := acpStopErrors[res.StopReason]; ok {
		return out, &TurnError{Msg: msg}
	}
	return out, nil
}

// promptUsage puts the prompt's tokens in out: its usage, else Gemini
// CLI's _meta.quota (with the model it names when it names one).
func promptUsage(res acp.PromptResponse, out *Result) {
	if res.Usage != nil {
		out.Usage.InputTokens = int64(res.Usage.InputTokens)
		out.Usage.OutputTokens = int64(res.Usage.OutputTokens)
		return
	}
	q := jmap(res.Meta, "quota")
	if q == nil {
		return
	}
	out.Usage.InputTokens = int64(jnum(q, "token_count", "input_tokens"))
	out.Usage.OutputTokens = int64(jnum(q, "token_count", "output_tokens"))
	if mu, _ := q["model_usage"].([]any); len(mu) == 1 {
		if m, _ := mu[0].(map[string]any); m != nil {
			if name := jstr(m, "model"); name != "" {
				out.Model = name
			}
		}
	}
}

// promptError is the turn's error when the prompt failed: the agent is
// gone, wants a login, hit a limit (out is paused) or reported an error.
func (pr *acpProc) promptError(err error, out *Result) error {
	if pr.gone() {
		return &TurnError{Msg: pr.crashText()}
	}
	if ok, methods := authRequired(err); ok {
		return &TurnError{Msg: pr.authText("session/prompt", err, methods)}
	}
	msg := reqErrText(err)
	if limitText(msg) {
		out.Paused = excerptLine(msg, 300)
		return &TurnError{Msg: "The agent hit a usage or rate limit: " + out.Paused}
	}
	return &TurnError{Msg: "The agent reported an error: " + excerptLine(msg, 500)}
}

// acpStopErrors are the stop reasons that end a turn as an error.
var acpStopErrors = map[acp.StopReason]string{
	acp.StopReasonRefusal:         "The agent refused to go on (stop reason refusal).",
	acp.StopReasonMaxTokens:       "The agent stopped at its token limit (stop reason max_tokens).",
	acp.StopReasonMaxTurnRequests: "The agent stopped at its limit of model requests in one turn (stop reason max_turn_requests).",
	acp.StopReasonCancelled:       "The agent cancelled the turn (stop reason cancelled).",
}

// result is what the turn produced so far: the text after the last tool
// call is the reply (as for the agent CLIs), all of it when that is empty.
func (at *acpTurn) result() Result {
	at.mu.Lock()
	defer at.mu.Unlock()
	txt := strings.TrimSpace(string(at.segment))
	if txt == "" {
		txt = strings.TrimSpace(string(at.text))
	}
	return Result{Text: BoundReply(txt), Model: at.model, Usage: at.usage}
}

func (pr *acpProc) turn() *acpTurn {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.cur
}

// SessionUpdate streams the turn (R22.2, R22.6).
func (pr *acpProc) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	pr.touch()
	at := pr.turn()
	if at == nil || string(n.SessionId) != pr.sess() {
		return nil // a replay of session/load, or between turns
	}
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil:
		if c := u.AgentMessageChunk.Content.Text; c != nil {
			at.addText(c.Text)
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		at.tool(string(tc.ToolCallId), tc.Title, agentToolName(tc.Meta, tc.RawInput), tc.Kind, toolArgs(tc.RawInput, tc.Content), string(tc.Status))
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		title := ""
		if tc.Title != nil {
			title = *tc.Title
		}
		status := ""
		if tc.Status != nil {
			status = string(*tc.Status)
		}
		kind := acp.ToolKind("")
		if tc.Kind != nil {
			kind = *tc.Kind
		}
		at.tool(string(tc.ToolCallId), title, agentToolName(tc.Meta, tc.RawInput), kind, toolArgs(tc.RawInput, nil), status)
	}
	return nil
}

func (at *acpTurn) addText(s string) {
	if s == "" {
		return
	}
	at.mu.Lock()
	at.text = appendBounded(at.text, s, MaxReplyBytes)
	at.segment = appendBounded(at.segment, s, MaxReplyBytes)
	out := tailText(at.text, MaxPartialBytes)
	at.mu.Unlock()
	at.h.Partial(out)
}

// tool records a tool call's start or update: other tools get a line with
// their title and status when they end (R22.6); relay_tool's 🛰️ line
// (R19.3) is the relay's, written once when the call reaches it. A tool
// call starts a new reply segment.
func (at *acpTurn) tool(id, title, name string, kind acp.ToolKind, raw any, status string) {
	at.mu.Lock()
	tc := at.toolCall(id)
	tc.update(title, name, kind)
	line := tc.end(status)
	at.mu.Unlock()
	if line == "" {
		return
	}
	if ah, ok := at.h.(ActivityHost); ok {
		ah.Activity(line)
	}
}

// toolCall is the tool call id (at.mu held); one first heard of wakes
// waitTool and starts a new reply segment.
func (at *acpTurn) toolCall(id string) *acpTool {
	if tc := at.tools[id]; tc != nil {
		return tc
	}
	tc := &acpTool{}
	at.tools[id] = tc
	if at.added != nil {
		close(at.added)
		at.added = nil
	}
	if len(at.text) > 0 && !strings.HasSuffix(string(at.text), "\n\n") {
		at.text = append(at.text, '\n', '\n')
	}
	at.segment = at.segment[:0]
	return tc
}

// update keeps what an update tells of the call; a title naming
// relay_tool marks it the relay's.
func (tc *acpTool) update(title, name string, kind acp.ToolKind) {
	if title != "" {
		tc.title = title
	}
	if name != "" {
		tc.name = name
	}
	if kind != "" {
		tc.kind = kind
	}
	if strings.Contains(tc.title, "relay_tool") {
		tc.relay = true
	}
}

// end marks the call done when status ends it; the line is its activity
// line, once, for a tool other than relay_tool.
func (tc *acpTool) end(status string) (line string) {
	ended := status == string(acp.ToolCallStatusCompleted) || status == string(acp.ToolCallStatusFailed)
	if !ended {
		return ""
	}
	if !tc.relay && !tc.done {
		line = "🔧 " + excerptLine(tc.title, 200) + ": " + status
	}
	tc.done = true
	return line
}

// acpToolWait bounds waitTool.
const acpToolWait = 2 * time.Second

// waitTool waits up to acpToolWait for the tool_call update of id: woken
// by each new tool call (tool closes added), not by polling.
func (at *acpTurn) waitTool(ctx context.Context, id string) {
	timer := time.NewTimer(acpToolWait)
	defer timer.Stop()
	for {
		at.mu.Lock()
		if at.tools[id] != nil {
			at.mu.Unlock()
			return
		}
		if at.added == nil {
			at.added = make(chan struct{})
		}
		added := at.added
		at.mu.Unlock()
		select {
		case <-added:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// toolArgs is a tool call's input: rawInput, else a text content that is a
// JSON object (Gemini CLI shows an MCP call's arguments so).
func toolArgs(raw any, content []acp.ToolCallContent) any {
	if m, ok := raw.(map[string]any); ok && len(m) == 0 {
		raw = nil // Claude Code's adapter starts the call with {} while the arguments stream
	}
	if raw != nil {
		return raw
	}
	for _, t := range contentTexts(content) {
		var m map[string]any
		if strings.HasPrefix(t, "{") && json.Unmarshal([]byte(t), &m) == nil {
			return m
		}
	}
	return nil
}
