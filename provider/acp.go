package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// TypeACP is the provider type of agents that speak the Agent Client
// Protocol on their stdio (R22): Gemini CLI --acp, Zed's claude-code-acp and
// codex-acp, Qwen Code, …
const TypeACP = "acp"

// ACP defaults (R22.1, R22.2).
const (
	DefaultACPIdle = 10 * time.Minute
	// acpCancelGrace: a stopped turn's agent gets this long after
	// session/cancel to end its prompt before its process group is killed.
	acpCancelGrace = 10 * time.Second
	// acpStartTimeout bounds initialize, session/new and session/load.
	acpStartTimeout = 2 * time.Minute
)

// ACPConfig configures an ACP provider (R22.1).
type ACPConfig struct {
	ID, Name string
	// Command is the agent's binary and its arguments, e.g. [gemini, --acp].
	Command      []string
	Env          map[string]string // on top of AgentEnv (R18.1)
	Models       []string
	DefaultModel string
	Efforts      []string
	SwitchTo     string
	// Silence: an agent that sends nothing this long during a turn (while
	// it waits for no question, relay_tool call or terminal) is killed
	// (timing.agent_silence, default 10 min).
	Silence time.Duration
	// Idle: a session's agent process is stopped when the session was idle
	// this long (timing.acp_idle, default 10 min).
	Idle   time.Duration
	Logger *slog.Logger

	Sandbox *Sandbox // the agent and its terminals run in it (R18.31, R18.26); nil = none
}

// ACP is the provider for Agent Client Protocol agents. It keeps one agent
// process per relay session (while the session is busy or idle for less than
// Idle) and one ACP session in it; the ACP session id is stored with the
// relay session, so a new process resumes it with session/load.
type ACP struct {
	c   ACPConfig
	log *slog.Logger

	mu     sync.Mutex
	procs  map[string]*acpProc // by relay session id
	proxy  *mcpProxy
	closed bool
	cmd    cmdCheck
}

var _ Provider = (*ACP)(nil)

// NewACP returns the provider; a binary that cannot be found is not an
// error: Info reports the provider unavailable.
func NewACP(c ACPConfig) *ACP {
	c.Command = append([]string(nil), c.Command...)
	c.Models = append([]string(nil), c.Models...)
	c.Efforts = append([]string(nil), c.Efforts...)
	env := make(map[string]string, len(c.Env))
	for k, v := range c.Env {
		env[k] = v
	}
	c.Env = env
	if c.Silence <= 0 {
		c.Silence = DefaultAgentSilence
	}
	if c.Idle <= 0 {
		c.Idle = DefaultACPIdle
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &ACP{c: c, log: log, procs: map[string]*acpProc{}}
	p.availability()
	return p
}

// Info describes the provider; Status says whether its binary can be found.
func (p *ACP) Info() Info {
	st, why := p.availability()
	return Info{ID: p.c.ID, Name: p.c.Name, Type: TypeACP, Models: append([]string(nil), p.c.Models...),
		DefaultModel: p.c.DefaultModel, Efforts: append([]string(nil), p.c.Efforts...), SwitchTo: p.c.SwitchTo,
		Status: st, StatusReason: why}
}

// KeepsConversation: the agent keeps its own conversation (the ACP session);
// a new folder starts a fresh one.
func (p *ACP) KeepsConversation() bool { return true }

func (p *ACP) availability() (string, string) {
	name := ""
	if len(p.c.Command) > 0 {
		name = p.c.Command[0]
	}
	return p.cmd.get("the ACP agent command", name, p.baseEnv)
}

func (p *ACP) baseEnv() []string { return withExtras(AgentEnv(os.Environ()), p.c.Env) }

// Close stops every agent process (and their terminals).
func (p *ACP) Close() {
	p.mu.Lock()
	p.closed = true
	procs := p.procs
	p.procs = map[string]*acpProc{}
	px := p.proxy
	p.proxy = nil
	p.mu.Unlock()
	for _, pr := range procs {
		pr.stop()
	}
	if px != nil {
		px.close()
	}
}

// Processes is how many agent processes run now (tests).
func (p *ACP) Processes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pr := range p.procs {
		if !pr.dead() {
			n++
		}
	}
	return n
}

// Run runs one turn as one session/prompt of the session's ACP session.
func (p *ACP) Run(ctx context.Context, t Turn, h Host) (Result, error) {
	if st, why := p.availability(); st == StatusUnavailable {
		return Result{}, &TurnError{Msg: fmt.Sprintf("provider %q is unavailable: %s", p.c.ID, why)}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("acp provider %q: %w", p.c.ID, err)
	}
	model := t.Model
	if model == "" {
		model = p.c.DefaultModel
	}
	pr, err := p.process(t)
	if err != nil {
		return Result{Model: model}, err
	}
	return pr.run(ctx, t, h, model)
}

// process returns the session's running agent process, or starts one. A
// process of another folder (the session moved) is stopped first.
func (p *ACP) process(t Turn) (*acpProc, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, &TurnError{Msg: "the relay is shutting down"}
	}
	pr := p.procs[t.SessionID]
	if pr != nil && (pr.dead() || pr.cwd != t.Cwd) {
		delete(p.procs, t.SessionID)
		p.mu.Unlock()
		pr.stop()
		p.mu.Lock()
		pr = nil
	}
	if pr != nil {
		pr.busy()
		p.mu.Unlock()
		return pr, nil
	}
	if p.proxy == nil {
		px, err := newMCPProxy()
		if err != nil {
			p.mu.Unlock()
			return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: cannot listen for the agent's relay_tool calls: %v", p.c.ID, err)}
		}
		p.proxy = px
	}
	px := p.proxy
	p.mu.Unlock()
	pr, err := p.start(t, px)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.procs[t.SessionID] = pr
	p.mu.Unlock()
	return pr, nil
}

// forget drops a process that stopped.
func (p *ACP) forget(pr *acpProc) {
	p.mu.Lock()
	if p.procs[pr.sid] == pr {
		delete(p.procs, pr.sid)
	}
	p.mu.Unlock()
}

// acpProc is one agent process serving one relay session.
type acpProc struct {
	p     *ACP
	sid   string
	cwd   string
	cmd   *exec.Cmd
	pgid  int
	conn  *acp.ClientSideConnection
	proxy *mcpProxy
	key   string // the proxy's key of this process

	exited  chan struct{} // closed once the process was reaped
	exitErr error
	errTail *tailBuffer
	last    atomic.Int64 // unix nanos of the agent's last output
	garbage atomic.Pointer[string]

	caps      acp.AgentCapabilities
	initDone  bool
	acpSess   atomic.Pointer[string] // the ACP session open in this process (read by the SDK's goroutines)
	stopOnce  sync.Once
	idleTimer *time.Timer

	mu    sync.Mutex
	cur   *acpTurn // the running turn; nil between turns
	terms map[string]*acpTerm
	nterm int
}

// start starts the agent process in the session's folder (R22.1).
func (p *ACP) start(t Turn, px *mcpProxy) (*acpProc, error) {
	env := append(p.baseEnv(), "RELAY_URL="+t.RelayURL, "RELAY_SESSION_ID="+t.SessionID)
	path, err := lookPath(p.c.Command[0], env)
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: command %q not found", p.c.ID, p.c.Command[0])}
	}
	pr := &acpProc{p: p, sid: t.SessionID, cwd: t.Cwd, proxy: px, exited: make(chan struct{}),
		errTail: &tailBuffer{max: defaultStderrTail}, terms: map[string]*acpTerm{}}
	pr.touch()
	pr.cmd = &exec.Cmd{
		Path:        path,
		Args:        append([]string(nil), p.c.Command...),
		Env:         env,
		Dir:         t.Cwd,
		SysProcAttr: agentProcAttr(), // own process group, killed with the relay (R18.11)
		WaitDelay:   execPipeDelay,
		Stderr:      &acpErrWriter{pr: pr},
	}
	p.c.Sandbox.wrap(pr.cmd, t.Cwd)
	stdinW, err := pr.cmd.StdinPipe()
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: %v", p.c.ID, err)}
	}
	stdout, err := pr.cmd.StdoutPipe()
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: %v", p.c.ID, err)}
	}
	if err := pr.cmd.Start(); err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: cannot start %q: %v", p.c.ID, p.c.Command[0], err)}
	}
	pr.pgid = pr.cmd.Process.Pid
	stdoutR, stdoutW := io.Pipe()
	filter := &lineFilter{pr: pr, out: stdoutW}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(filter, stdout)
		_ = stdoutW.Close()
	}()
	go func() {
		<-copied // Wait closes stdout: read it to its end first
		pr.exitErr = pr.cmd.Wait()
		_ = stdoutW.Close()
		close(pr.exited)
		pr.endTerminals()
		p.forget(pr)
		pr.proxy.drop(pr.key)
	}()
	pr.key = px.add()
	pr.conn = acp.NewClientSideConnection(pr, stdinW, stdoutR)
	pr.conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil))) // garbage is reported by lineFilter
	return pr, nil
}

// sess is the ACP session open in this process, "" before the first.
func (pr *acpProc) sess() string {
	if p := pr.acpSess.Load(); p != nil {
		return *p
	}
	return ""
}

func (pr *acpProc) touch() { pr.last.Store(time.Now().UnixNano()) }

func (pr *acpProc) lastOutput() time.Time { return time.Unix(0, pr.last.Load()) }

func (pr *acpProc) dead() bool {
	select {
	case <-pr.exited:
		return true
	default:
	}
	return pr.garbage.Load() != nil
}

// busy cancels the idle stop (a turn starts).
func (pr *acpProc) busy() {
	pr.mu.Lock()
	if pr.idleTimer != nil {
		pr.idleTimer.Stop()
		pr.idleTimer = nil
	}
	pr.mu.Unlock()
}

// idle arms the idle stop (R22.1): the process is stopped once the session
// ran no turn and no terminal for Idle.
func (pr *acpProc) idle() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.idleTimer != nil {
		pr.idleTimer.Stop()
	}
	pr.idleTimer = time.AfterFunc(pr.p.c.Idle, func() {
		pr.mu.Lock()
		busy := pr.cur != nil || pr.runningTerms() > 0
		pr.mu.Unlock()
		if busy {
			pr.idle()
			return
		}
		pr.p.forget(pr)
		pr.stop()
	})
}

// stop kills the process group and its terminals.
func (pr *acpProc) stop() {
	pr.stopOnce.Do(func() {
		pr.busy()
		pr.endTerminals()
		_ = syscall.Kill(-pr.pgid, syscall.SIGTERM)
		select {
		case <-pr.exited:
			_ = syscall.Kill(-pr.pgid, syscall.SIGKILL)
		case <-time.After(execTermGrace):
			_ = syscall.Kill(-pr.pgid, syscall.SIGKILL)
			<-pr.exited
		}
	})
}

// crashText says why the process is gone.
func (pr *acpProc) crashText() string {
	if g := pr.garbage.Load(); g != nil {
		return fmt.Sprintf("The agent (acp) sent a line that is not JSON-RPC and was stopped: %s", *g)
	}
	msg := "its connection closed"
	select {
	case <-pr.exited:
		msg = "exit status 0"
		if pr.exitErr != nil {
			msg = pr.exitErr.Error()
		}
	default:
	}
	if tail := strings.TrimSpace(pr.errTail.String()); tail != "" {
		msg += ": " + excerptLine(tail, 500)
	}
	return "The agent (acp) ended with " + msg
}

// lineFilter passes the agent's stdout to the ACP connection line by line;
// a line that is not JSON ends the process (R22.7: garbage).
type lineFilter struct {
	pr  *acpProc
	out *io.PipeWriter
	buf []byte
}

func (f *lineFilter) Write(b []byte) (int, error) {
	f.pr.touch()
	n := len(b)
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			if len(f.buf)+len(b) > 10<<20 {
				f.bad("a line longer than 10 MiB")
				return n, nil
			}
			f.buf = append(f.buf, b...)
			break
		}
		line := append(f.buf, b[:i+1]...)
		f.buf = nil
		b = b[i+1:]
		trim := strings.TrimSpace(string(line))
		if trim == "" {
			continue
		}
		if !json.Valid([]byte(trim)) {
			f.bad(excerptLine(trim, 200))
			return n, nil
		}
		if _, err := f.out.Write(line); err != nil {
			return n, nil //nolint:nilerr // the connection is gone; the process is reaped by Wait
		}
	}
	return n, nil
}

func (f *lineFilter) bad(what string) {
	if f.pr.garbage.CompareAndSwap(nil, &what) {
		_ = f.out.CloseWithError(errors.New("the agent sent garbage"))
		go f.pr.stop()
	}
}

// acpErrWriter keeps the stderr tail; stderr counts as a sign of life.
type acpErrWriter struct{ pr *acpProc }

func (w *acpErrWriter) Write(b []byte) (int, error) {
	w.pr.touch()
	return w.pr.errTail.Write(b)
}

// acpTurn is the running turn of a process.
type acpTurn struct {
	t     Turn
	h     Host
	ctx   context.Context
	model string

	mu      sync.Mutex
	text    []byte // all text so far (inFlight)
	segment []byte // text since the last tool call (the reply)
	waits   int    // questions, relay_tool calls and terminal waits running
	tools   map[string]*acpTool
	usage   Usage
}

type acpTool struct {
	title string
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
	at := &acpTurn{t: t, h: h, ctx: ctx, model: model, tools: map[string]*acpTool{}}
	pr.mu.Lock()
	pr.cur = at
	pr.mu.Unlock()
	pr.proxy.set(pr.key, t.MCPURL, t.Token)
	defer func() {
		pr.proxy.set(pr.key, "", "")
		pr.mu.Lock()
		pr.cur = nil
		pr.mu.Unlock()
		if !pr.dead() {
			pr.idle()
		}
	}()
	pr.touch()

	type outcome struct {
		res acp.PromptResponse
		err error
	}
	done := make(chan outcome, 1)
	setup := make(chan error, 1)
	prompt := t.Prompt
	go func() {
		note, err := pr.open(t, at)
		setup <- err
		if err != nil {
			return
		}
		if note != "" {
			prompt = note + "\n\n" + prompt
		}
		// The prompt runs on the process's own context: a stop is
		// session/cancel, and the agent ends the prompt itself.
		res, err := pr.conn.Prompt(context.Background(), acp.PromptRequest{SessionId: acp.SessionId(pr.sess()),
			Prompt: []acp.ContentBlock{acp.TextBlock(prompt)}})
		done <- outcome{res, err}
	}()

	tick := pr.p.c.Silence / 4
	if tick > time.Second {
		tick = time.Second
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var cancelled <-chan time.Time
	stopped := false
	for {
		select {
		case err := <-setup:
			if err != nil {
				pr.p.forget(pr)
				pr.stop()
				if stopped || ctx.Err() != nil {
					return at.result(), fmt.Errorf("acp provider %q: %w", pr.p.c.ID, ctx.Err())
				}
				return Result{Model: model}, err
			}
			setup = nil
		case o := <-done:
			if stopped {
				return at.result(), fmt.Errorf("acp provider %q: %w", pr.p.c.ID, ctx.Err())
			}
			return pr.outcome(at, o.res, o.err)
		case <-pr.exited:
			if stopped {
				return at.result(), fmt.Errorf("acp provider %q: %w", pr.p.c.ID, ctx.Err())
			}
			return at.result(), &TurnError{Msg: pr.crashText()}
		case <-ctx.Done():
			if stopped {
				continue
			}
			// A stop (R22.2): session/cancel, then the process group is
			// killed if the prompt has not ended within 10 s.
			stopped = true
			if id := pr.sess(); id != "" {
				_ = pr.conn.Cancel(context.Background(), acp.CancelNotification{SessionId: acp.SessionId(id)})
			}
			timer := time.NewTimer(acpCancelGrace)
			defer timer.Stop()
			cancelled = timer.C
		case <-cancelled:
			pr.p.forget(pr)
			pr.stop()
			return at.result(), fmt.Errorf("acp provider %q: %w", pr.p.c.ID, ctx.Err())
		case <-ticker.C:
			if pr.garbage.Load() != nil {
				pr.stop()
				return at.result(), &TurnError{Msg: pr.crashText()}
			}
			if stopped {
				continue
			}
			if at.waiting() {
				pr.touch()
			} else if time.Since(pr.lastOutput()) >= pr.p.c.Silence {
				pr.p.forget(pr)
				pr.stop()
				return at.result(), &TurnError{Msg: fmt.Sprintf("The agent (acp) sent nothing for %s and was stopped (timing.agent_silence).", pr.p.c.Silence)}
			}
		}
	}
}

// open initializes the process on its first turn and opens the ACP session
// the turn needs: the stored one (session/load in a new process), or a new
// one (R22.2). The note is put before the prompt when a stored conversation
// could not be resumed.
func (pr *acpProc) open(t Turn, at *acpTurn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), acpStartTimeout)
	defer cancel()
	id := pr.p.c.ID
	if !pr.initDone {
		res, err := pr.conn.Initialize(ctx, acp.InitializeRequest{
			ProtocolVersion: acp.ProtocolVersionNumber,
			ClientCapabilities: acp.ClientCapabilities{
				Fs:       acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true},
				Terminal: true,
			},
			ClientInfo: &acp.Implementation{Name: "relay", Version: "1"},
		})
		if err != nil {
			return "", &TurnError{Msg: pr.startError("initialize", err)}
		}
		pr.caps = res.AgentCapabilities
		pr.initDone = true
	}
	want := t.AgentSession
	if want != "" && want == pr.sess() {
		return "", nil
	}
	servers := pr.mcpServers(t)
	note := ""
	if want != "" {
		if pr.caps.LoadSession {
			// The agent replays the conversation as updates: no turn
			// reads them.
			pr.mu.Lock()
			pr.cur = nil
			pr.mu.Unlock()
			_, err := pr.conn.LoadSession(ctx, acp.LoadSessionRequest{SessionId: acp.SessionId(want), Cwd: t.Cwd, McpServers: servers})
			pr.mu.Lock()
			pr.cur = at
			pr.mu.Unlock()
			if err == nil {
				pr.acpSess.Store(&want)
				return "", nil
			}
			if pr.gone() {
				return "", &TurnError{Msg: pr.crashText()}
			}
			note = fmt.Sprintf("[relay: this session's earlier conversation could not be resumed (%s); this turn starts a new one]", excerptLine(reqErrText(err), 200))
		} else {
			note = "[relay: the agent cannot load this session's earlier conversation; this turn starts a new one]"
		}
	}
	res, err := pr.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.Cwd, McpServers: servers})
	if err != nil {
		return "", &TurnError{Msg: pr.startError("session/new", err)}
	}
	if res.SessionId == "" {
		return "", &TurnError{Msg: fmt.Sprintf("acp provider %q: the agent's session/new named no session", id)}
	}
	sid := string(res.SessionId)
	pr.acpSess.Store(&sid)
	if ah, ok := at.h.(AgentSessionHost); ok {
		ah.SetAgentSession(sid)
	}
	return note, nil
}

// gone reports whether the connection to the agent ended (the process
// exits, or sent garbage); it waits a moment for the process to be reaped,
// so the error names its exit.
func (pr *acpProc) gone() bool {
	select {
	case <-pr.conn.Done():
	default:
		return pr.dead()
	}
	select {
	case <-pr.exited:
	case <-time.After(execPipeDelay + time.Second):
	}
	return true
}

func (pr *acpProc) startError(step string, err error) string {
	if pr.gone() {
		return pr.crashText()
	}
	msg := fmt.Sprintf("The agent (acp) refused %s: %s", step, excerptLine(reqErrText(err), 500))
	if tail := strings.TrimSpace(pr.errTail.String()); tail != "" {
		msg += " (its stderr: " + excerptLine(tail, 500) + ")"
	}
	return msg
}

// reqErrText is an ACP error's message and detail.
func reqErrText(err error) string {
	var re *acp.RequestError
	if errors.As(err, &re) {
		s := re.Message
		if re.Data != nil {
			if b, jerr := json.Marshal(re.Data); jerr == nil && string(b) != "null" {
				s += " " + string(b)
			}
		}
		return s
	}
	return err.Error()
}

// mcpServers hands relay_tool over (R22.2): the HTTP form when the agent
// accepts it (else SSE, which the relay does not serve: none), pointing at
// this process's key on the provider's loopback proxy, which forwards to
// the relay's /mcp with the running turn's token.
func (pr *acpProc) mcpServers(t Turn) []acp.McpServer {
	if !mcpOn(t) {
		return []acp.McpServer{}
	}
	hdr := []acp.HttpHeader{{Name: "Authorization", Value: "Bearer " + pr.key}}
	if pr.caps.McpCapabilities.Http {
		return []acp.McpServer{{Http: &acp.McpServerHttpInline{Type: "http", Name: "relay", Url: pr.proxy.url(), Headers: hdr}}}
	}
	return []acp.McpServer{}
}

// outcome is the turn's result once its prompt ended (R22.2).
func (pr *acpProc) outcome(at *acpTurn, res acp.PromptResponse, err error) (Result, error) {
	out := at.result()
	if res.Usage != nil {
		out.Usage.InputTokens = int64(res.Usage.InputTokens)
		out.Usage.OutputTokens = int64(res.Usage.OutputTokens)
	} else if q := jmap(res.Meta, "quota"); q != nil {
		// Gemini CLI reports the turn's tokens in _meta.quota.
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
	if err != nil {
		if pr.gone() {
			return out, &TurnError{Msg: pr.crashText()}
		}
		msg := reqErrText(err)
		if limitText(msg) {
			out.Paused = excerptLine(msg, 300)
			return out, &TurnError{Msg: "The agent hit a usage or rate limit: " + out.Paused}
		}
		return out, &TurnError{Msg: "The agent reported an error: " + excerptLine(msg, 500)}
	}
	switch res.StopReason {
	case acp.StopReasonRefusal:
		return out, &TurnError{Msg: "The agent refused to go on (stop reason refusal)."}
	case acp.StopReasonMaxTokens:
		return out, &TurnError{Msg: "The agent stopped at its token limit (stop reason max_tokens)."}
	case acp.StopReasonMaxTurnRequests:
		return out, &TurnError{Msg: "The agent stopped at its limit of model requests in one turn (stop reason max_turn_requests)."}
	case acp.StopReasonCancelled:
		return out, &TurnError{Msg: "The agent cancelled the turn (stop reason cancelled)."}
	}
	return out, nil
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

// ---- the client side of ACP: what the agent asks of the relay ----

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
		at.tool(string(tc.ToolCallId), tc.Title, tc.Kind, toolArgs(tc.RawInput, tc.Content), string(tc.Status))
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
		at.tool(string(tc.ToolCallId), title, kind, toolArgs(tc.RawInput, nil), status)
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
func (at *acpTurn) tool(id, title string, kind acp.ToolKind, raw any, status string) {
	at.mu.Lock()
	tc := at.tools[id]
	if tc == nil {
		tc = &acpTool{}
		at.tools[id] = tc
		if len(at.text) > 0 && !strings.HasSuffix(string(at.text), "\n\n") {
			at.text = append(at.text, '\n', '\n')
		}
		at.segment = at.segment[:0]
	}
	if title != "" {
		tc.title = title
	}
	if kind != "" {
		tc.kind = kind
	}
	if strings.Contains(tc.title, "relay_tool") {
		tc.relay = true
	}
	ended := status == string(acp.ToolCallStatusCompleted) || status == string(acp.ToolCallStatusFailed)
	var line string
	if !tc.relay && !tc.done && ended {
		line = "🔧 " + excerptLine(tc.title, 200) + ": " + status
	}
	if ended {
		tc.done = true
	}
	at.mu.Unlock()
	if line == "" {
		return
	}
	if ah, ok := at.h.(ActivityHost); ok {
		ah.Activity(line)
	}
}

// RequestPermission is a question card of the session (R22.3).
func (pr *acpProc) RequestPermission(ctx context.Context, req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	pr.touch()
	cancelled := acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}
	at := pr.turn()
	if at == nil || len(req.Options) == 0 {
		return cancelled, nil
	}
	title := ""
	if req.ToolCall.Title != nil {
		title = *req.ToolCall.Title
	}
	if title == "" {
		at.mu.Lock()
		if tc := at.tools[string(req.ToolCall.ToolCallId)]; tc != nil {
			title = tc.title
		}
		at.mu.Unlock()
	}
	// The request may be the first the relay hears of the call (Gemini CLI
	// sends no tool_call first; the arguments are its content).
	{
		kind := acp.ToolKind("")
		if req.ToolCall.Kind != nil {
			kind = *req.ToolCall.Kind
		}
		at.tool(string(req.ToolCall.ToolCallId), title, kind, toolArgs(req.ToolCall.RawInput, req.ToolCall.Content), "")
	}
	pick := func(kinds ...acp.PermissionOptionKind) (acp.RequestPermissionResponse, bool) {
		for _, k := range kinds {
			for _, o := range req.Options {
				if o.Kind == k {
					return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(o.OptionId)}, true
				}
			}
		}
		return cancelled, false
	}
	// relay_tool's own calls: the relay checks them itself (cards, modes).
	if strings.Contains(title, "relay_tool") {
		r, _ := pick(acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways)
		return r, nil
	}
	kind := acp.ToolKind("")
	if req.ToolCall.Kind != nil {
		kind = *req.ToolCall.Kind
	} else {
		at.mu.Lock()
		if tc := at.tools[string(req.ToolCall.ToolCallId)]; tc != nil {
			kind = tc.kind
		}
		at.mu.Unlock()
	}
	if at.t.Mode == "plan" && writeKind(kind) {
		if r, ok := pick(acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways); ok {
			return r, nil
		}
		return cancelled, nil
	}
	names := make([]string, len(req.Options))
	for i, o := range req.Options {
		names[i] = o.Name
	}
	if title == "" {
		title = "The agent asks for permission"
	}
	qctx, cancel := context.WithCancel(at.ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done(): // the agent withdrew the request, or the connection closed
			cancel()
		case <-qctx.Done():
		}
	}()
	at.wait(1)
	ans, err := at.h.AskUser(qctx, title, names)
	at.wait(-1)
	pr.touch()
	if err != nil {
		return cancelled, nil //nolint:nilerr // a stopped turn cancels the request (ACP's rule for session/cancel)
	}
	ans = strings.TrimSpace(ans)
	for _, match := range []func(o acp.PermissionOption) bool{
		func(o acp.PermissionOption) bool { return o.Name == ans },
		func(o acp.PermissionOption) bool { return string(o.OptionId) == ans },
		func(o acp.PermissionOption) bool { return strings.EqualFold(o.Name, ans) },
	} {
		for _, o := range req.Options {
			if match(o) {
				return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(o.OptionId)}, nil
			}
		}
	}
	// A free answer that names no option: the agent gets a rejection.
	r, _ := pick(acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways)
	return r, nil
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
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			t := strings.TrimSpace(c.Content.Content.Text.Text)
			var m map[string]any
			if strings.HasPrefix(t, "{") && json.Unmarshal([]byte(t), &m) == nil {
				return m
			}
		}
	}
	return nil
}

// writeKind: tool kinds that change files or run commands; plan mode
// rejects them (R22.3).
func writeKind(k acp.ToolKind) bool {
	switch k {
	case acp.ToolKindEdit, acp.ToolKindDelete, acp.ToolKindMove, acp.ToolKindExecute:
		return true
	}
	return false
}
