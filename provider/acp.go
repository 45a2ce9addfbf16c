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
	"runtime/debug"
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
	User    *RunAs   // the agent and its terminals run as that OS user (R18.26); nil = the relay's own
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

var (
	_ Provider = (*ACP)(nil)
	_ Killer   = (*ACP)(nil)
)

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
	c.Env = c.User.withEnv(env) // HOME of the provider's user (R18.26)
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

// Kill ends the session's agent process, if this provider runs one (R23.6).
// A turn running in it ends (the relay stops the turn first, so it ends as
// stopped); the next turn starts a new process.
func (p *ACP) Kill(sessionID string) bool {
	p.mu.Lock()
	pr := p.procs[sessionID]
	delete(p.procs, sessionID)
	p.mu.Unlock()
	if pr == nil {
		return false
	}
	alive := !pr.dead()
	pr.stop()
	return alive
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
	stdin *acpStdin
	proxy *mcpProxy
	key   string // the proxy's key of this process

	exited  chan struct{} // closed once the process was reaped
	exitErr error
	errTail *tailBuffer
	last    atomic.Int64 // unix nanos of the agent's last output
	garbage atomic.Pointer[string]

	caps      acp.AgentCapabilities
	info      *acp.Implementation // initialize's agentInfo (names the agent in errors)
	auth      []acpAuthMethod     // initialize's authMethods (R24.3)
	initDone  bool
	acpSess   atomic.Pointer[string] // the ACP session open in this process (read by the SDK's goroutines)
	stopOnce  sync.Once
	idleTimer *time.Timer

	// The agent's requests in flight (R18.27): a place in slots is taken
	// when a request is passed to the connection and given back when its
	// answer is written; quit ends a wait for a place when the process stops.
	slots    chan struct{}
	quit     chan struct{}
	slotWait atomic.Int32 // requests waiting for a place (tests)

	// A handler that panicked (R18.27): the turn ends as an error with
	// failMsg, the process is stopped, the relay goes on.
	failMsg  atomic.Pointer[string]
	failed   chan struct{}
	failOnce sync.Once

	mu           sync.Mutex
	cur          *acpTurn // the running turn; nil between turns
	terms        map[string]*acpTerm
	nterm        int
	termStarting int         // terminals being started (termRoom)
	folder       os.FileInfo // the session's folder the process's first turn opened (R18.25)
}

// start starts the agent process in the session's folder (R22.1).
func (p *ACP) start(t Turn, px *mcpProxy) (*acpProc, error) {
	env := append(p.baseEnv(), "RELAY_URL="+t.RelayURL, "RELAY_SESSION_ID="+t.SessionID)
	// R25.1: TRACEPARENT of the span of the turn that starts the process
	// (a kept process's later turns have spans of their own on the relay's side).
	env = append(env, t.TraceEnv...)
	path, err := lookPath(p.c.Command[0], env)
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("acp provider %q: command %q not found", p.c.ID, p.c.Command[0])}
	}
	pr := &acpProc{p: p, sid: t.SessionID, cwd: t.Cwd, proxy: px, exited: make(chan struct{}),
		errTail: &tailBuffer{max: defaultStderrTail}, terms: map[string]*acpTerm{},
		slots: make(chan struct{}, acpInFlight), quit: make(chan struct{}), failed: make(chan struct{})}
	pr.touch()
	pr.cmd = &exec.Cmd{
		Path:        path,
		Args:        append([]string(nil), p.c.Command...),
		Env:         env,
		Dir:         t.Cwd,
		SysProcAttr: p.c.User.procAttr(), // own process group, killed with the relay (R18.11); the provider's user (R18.26)
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
	pr.stdin = &acpStdin{pr: pr, w: stdinW}
	pr.conn = acp.NewClientSideConnection(acpClient{pr}, pr.stdin, stdoutR)
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
	return pr.garbage.Load() != nil || pr.failMsg.Load() != nil
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
		close(pr.quit)
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
	if m := pr.failMsg.Load(); m != nil {
		return *m
	}
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
// a line that is not JSON ends the process (R22.7: garbage). A request
// waits here for a place among the acpInFlight (R18.27): the agent's
// further lines wait in its pipe, so nothing of them is held.
type lineFilter struct {
	pr  *acpProc
	out interface {
		io.Writer
		CloseWithError(error) error
	}
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
		if h := rpcHeadOf(line); h.ID != nil && h.Method != "" && !f.pr.acquire(*h.ID) {
			continue // refused, or the process stops
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

// acpInFlight bounds an agent's requests in flight (R18.27): a request
// counts from when it is passed to the ACP connection until its answer is
// written. The next one waits (its line and all after it stay in the
// agent's pipe) up to acpSlotWait, then is answered with an error.
const acpInFlight = 8

// acpSlotWait: how long a request waits for a place. A wait must end: the
// places may all be held by requests that wait on the owner or a terminal
// while the agent is gone.
var acpSlotWait = 30 * time.Second

// rpcHead is what tells a JSON-RPC request (id and method), a response (id
// only) and a notification (method only) apart, read as the ACP SDK reads
// them: the same fields and types as its message, so a line it cannot
// decode (and drops unanswered) counts as no request here either; an id of
// null is none.
type rpcHead struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      *json.RawMessage  `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *acp.RequestError `json:"error,omitempty"`
}

func rpcHeadOf(b []byte) rpcHead {
	var h rpcHead
	if json.Unmarshal(b, &h) != nil {
		return rpcHead{}
	}
	return h
}

// acquire takes a place for the agent's request id; false: the request was
// refused (after acpSlotWait) or the process stops, and is dropped.
func (pr *acpProc) acquire(id json.RawMessage) bool {
	select {
	case pr.slots <- struct{}{}:
		return true
	default:
	}
	pr.slotWait.Add(1)
	defer pr.slotWait.Add(-1)
	timer := time.NewTimer(acpSlotWait)
	defer timer.Stop()
	select {
	case pr.slots <- struct{}{}:
		return true
	case <-pr.quit:
		return false
	case <-timer.C:
		msg := fmt.Sprintf("the relay answers at most %d requests of an agent at a time; this one waited %s and was refused", acpInFlight, acpSlotWait)
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32000, "message": msg}})
		if err == nil {
			_, _ = pr.stdin.writeRaw(append(b, '\n')) // a gone agent reads no answer
		}
		return false
	}
}

// release gives a place back: an answer was written.
func (pr *acpProc) release() {
	select {
	case <-pr.slots:
	default:
	}
}

// acpStdin is the agent's stdin: the connection's messages one Write each
// (the SDK writes a message at once), and the relay's own refusals, never
// interleaved. An answer written gives its request's place back.
type acpStdin struct {
	pr *acpProc
	mu sync.Mutex
	w  io.Writer
}

func (s *acpStdin) Write(b []byte) (int, error) {
	n, err := s.writeRaw(b)
	if h := rpcHeadOf(b); h.ID != nil && h.Method == "" {
		s.pr.release()
	}
	return n, err
}

func (s *acpStdin) writeRaw(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// acpErrWriter keeps the stderr tail; stderr counts as a sign of life.
type acpErrWriter struct{ pr *acpProc }

func (w *acpErrWriter) Write(b []byte) (int, error) {
	w.pr.touch()
	return w.pr.errTail.Write(b)
}

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
	// The turn's files go through its folder opened once (R18.25); the
	// folder must be the one the process's first turn opened.
	fo, err := openFolder(t.Cwd)
	if err != nil {
		pr.idle()
		return Result{Model: model}, &TurnError{Msg: fmt.Sprintf("The session's folder %s cannot be opened: %v", t.Cwd, err)}
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
		return Result{Model: model}, &TurnError{Msg: fmt.Sprintf("The session's folder %s is no longer the folder the agent (acp) started in (it was replaced); the agent was stopped, the next turn starts it again.", t.Cwd)}
	}
	at := &acpTurn{t: t, h: h, ctx: ctx, model: model, tools: map[string]*acpTool{}, folder: fo}
	pr.mu.Lock()
	pr.cur = at
	pr.mu.Unlock()
	pr.proxy.set(pr.key, t.MCPURL, t.Token)
	defer func() {
		pr.proxy.set(pr.key, "", "")
		pr.mu.Lock()
		pr.cur = nil
		pr.mu.Unlock()
		fo.close()
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
		case <-pr.failed:
			// A handler panicked (R18.27): the process is stopped, the
			// turn ends as an error naming the cause.
			pr.p.forget(pr)
			pr.stop()
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
		pr.info = res.AgentInfo
		pr.auth = authMethodsOf(res.AuthMethods)
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
	if ok, methods := authRequired(err); ok {
		return pr.authText(step, err, methods)
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
		if ok, methods := authRequired(err); ok {
			return out, &TurnError{Msg: pr.authText("session/prompt", err, methods)}
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

// acpClient is what the ACP connection calls: each of the agent's requests
// and notifications runs in a goroutine of the SDK, where a panic would end
// the relay. Each method recovers one (R18.27): the request is answered
// with an error, the turn ends as an error naming the cause, the agent
// process is stopped, the relay goes on. It implements no optional method
// (extension methods, elicitation, MCP over ACP): the SDK answers those
// "method not found" itself.
type acpClient struct{ pr *acpProc }

var _ acp.Client = acpClient{}

// recovered turns a panic of a handler into the request's error and the
// process's failure.
func (pr *acpProc) recovered(method string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	pr.p.log.Error("acp: a handler of the agent's request panicked", "provider", pr.p.c.ID, "session", pr.sid,
		"method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	pr.fail(fmt.Sprintf("The relay failed on the agent's %s request (%v); the agent (acp) was stopped.", method, v))
	if err != nil {
		*err = acp.NewInternalError(map[string]any{"error": fmt.Sprintf("the relay failed on this request: %v", v)})
	}
}

// fail marks the process failed: its turn ends, it is stopped.
func (pr *acpProc) fail(msg string) {
	pr.failOnce.Do(func() {
		pr.failMsg.Store(&msg)
		close(pr.failed)
	})
}

func (c acpClient) SessionUpdate(ctx context.Context, n acp.SessionNotification) (err error) {
	defer c.pr.recovered(acp.ClientMethodSessionUpdate, &err)
	return c.pr.SessionUpdate(ctx, n)
}

func (c acpClient) RequestPermission(ctx context.Context, req acp.RequestPermissionRequest) (res acp.RequestPermissionResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodSessionRequestPermission, &err)
	return c.pr.RequestPermission(ctx, req)
}

func (c acpClient) ReadTextFile(ctx context.Context, req acp.ReadTextFileRequest) (res acp.ReadTextFileResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodFsReadTextFile, &err)
	return c.pr.ReadTextFile(ctx, req)
}

func (c acpClient) WriteTextFile(ctx context.Context, req acp.WriteTextFileRequest) (res acp.WriteTextFileResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodFsWriteTextFile, &err)
	return c.pr.WriteTextFile(ctx, req)
}

func (c acpClient) CreateTerminal(ctx context.Context, req acp.CreateTerminalRequest) (res acp.CreateTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalCreate, &err)
	return c.pr.CreateTerminal(ctx, req)
}

func (c acpClient) TerminalOutput(ctx context.Context, req acp.TerminalOutputRequest) (res acp.TerminalOutputResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalOutput, &err)
	return c.pr.TerminalOutput(ctx, req)
}

func (c acpClient) WaitForTerminalExit(ctx context.Context, req acp.WaitForTerminalExitRequest) (res acp.WaitForTerminalExitResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalWaitForExit, &err)
	return c.pr.WaitForTerminalExit(ctx, req)
}

func (c acpClient) KillTerminal(ctx context.Context, req acp.KillTerminalRequest) (res acp.KillTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalKill, &err)
	return c.pr.KillTerminal(ctx, req)
}

func (c acpClient) ReleaseTerminal(ctx context.Context, req acp.ReleaseTerminalRequest) (res acp.ReleaseTerminalResponse, err error) {
	defer c.pr.recovered(acp.ClientMethodTerminalRelease, &err)
	return c.pr.ReleaseTerminal(ctx, req)
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
	tc := at.tools[id]
	if tc == nil {
		tc = &acpTool{}
		at.tools[id] = tc
		if at.added != nil {
			close(at.added)
			at.added = nil
		}
		if len(at.text) > 0 && !strings.HasSuffix(string(at.text), "\n\n") {
			at.text = append(at.text, '\n', '\n')
		}
		at.segment = at.segment[:0]
	}
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
	id := string(req.ToolCall.ToolCallId)
	// The tool's name and kind: Claude Code's adapter gives them only in
	// the tool_call update it sends before the request, codex-acp the MCP
	// call's server and tool, both handled by the SDK in another
	// goroutine: wait a moment for it.
	name := metaToolName(req.ToolCall.Meta, req.Meta)
	if name == "" && (req.ToolCall.Kind == nil || mcpApproval(req)) {
		at.waitTool(ctx, id)
	}
	title, kind := "", acp.ToolKind("")
	if req.ToolCall.Title != nil {
		title = *req.ToolCall.Title
	}
	if req.ToolCall.Kind != nil {
		kind = *req.ToolCall.Kind
	}
	// The request may be the first the relay hears of the call (Gemini CLI
	// sends no tool_call first; the arguments are its content). Then what
	// the call's updates told (title, kind, name), in one look.
	at.tool(id, title, name, kind, toolArgs(req.ToolCall.RawInput, req.ToolCall.Content), "")
	at.mu.Lock()
	if tc := at.tools[id]; tc != nil {
		title, kind, name = tc.title, tc.kind, tc.name
	}
	at.mu.Unlock()
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
	// relay_tool's own calls: the relay checks them itself (cards, modes),
	// told from the request's structured fields, never its text (R18.28).
	if relayToolCall(req, kind, name) {
		r, _ := pick(acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways)
		return r, nil
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

// relayTool* name relay_tool of the MCP server "relay" that session/new
// hands over (mcpServers), as the agents name the call.
const (
	relayToolName  = "relay_tool"
	relayMCPServer = "relay"
)

// relayToolCall reports whether a permission request is a call of the
// relay's own relay_tool, from its structured fields only (R18.28): the
// tool kind must be other (relay_tool is no edit, delete, move or execute:
// a write is never answered here) — or execute in a request the agent
// marks as an MCP tool's approval (codex-acp, R24.3) — and the tool and
// the MCP server the call goes to must be named by the agent, not by the
// model:
//   - name: the full name of the tool the agent calls, from _meta.toolName
//     (Qwen Code: "mcp__relay__relay_tool") or _meta.claudeCode.toolName
//     (Claude Code's adapter, in its tool_call update) of the request or of
//     the call's tool_call update, or the server and tool of codex-acp's
//     MCP call (agentToolName);
//   - Gemini CLI names neither in a field: its MCP confirmation is the one
//     offering the server-wide option ("proceed_always_server"), and its
//     title is then the tool's display name, which it makes of the tool's
//     and the server's names ("relay_tool (relay MCP Server)") — unless the
//     arguments hold a string "command", which it shows instead; so the
//     arguments (the request's content) must be known and hold none.
//
// Anything else — a title that merely mentions relay_tool, another kind,
// another server — is a card.
func relayToolCall(req acp.RequestPermissionRequest, kind acp.ToolKind, name string) bool {
	if kind != acp.ToolKindOther && (kind != acp.ToolKindExecute || !mcpApproval(req)) {
		return false
	}
	if name != "" {
		return name == "mcp__"+relayMCPServer+"__"+relayToolName || name == "mcp_"+relayMCPServer+"_"+relayToolName
	}
	mcpAsk := false
	for _, o := range req.Options {
		if o.OptionId == "proceed_always_server" {
			mcpAsk = true
		}
	}
	if !mcpAsk || req.ToolCall.Title == nil || *req.ToolCall.Title != relayToolName+" ("+relayMCPServer+" MCP Server)" {
		return false
	}
	keys, ok := geminiArgKeys(req.ToolCall.RawInput, req.ToolCall.Content)
	if !ok {
		return false
	}
	for _, k := range keys {
		if k == "command" {
			return false
		}
	}
	return true
}

// mcpApproval reports whether the agent marks the request as the approval
// of an MCP tool call (codex-acp's _meta.is_mcp_tool_approval; it gives
// every MCP call the kind execute).
func mcpApproval(req acp.RequestPermissionRequest) bool {
	v, _ := req.Meta["is_mcp_tool_approval"].(bool)
	return v
}

// agentToolName is the agent's name of a tool call: metaToolName, or for
// an MCP call codex-acp marks (_meta.is_mcp_tool_call) the server and tool
// its rawInput names beside the model's arguments, as
// mcp__SERVER__TOOL.
func agentToolName(meta map[string]any, raw any) string {
	if n := metaToolName(meta); n != "" {
		return n
	}
	if v, _ := meta["is_mcp_tool_call"].(bool); !v {
		return ""
	}
	m, _ := raw.(map[string]any)
	server, _ := m["server"].(string)
	tool, _ := m["tool"].(string)
	if server == "" || tool == "" {
		return ""
	}
	return "mcp__" + server + "__" + tool
}

// metaToolName is the agent's name of a tool call in _meta: toolName
// (Qwen Code) or claudeCode.toolName (Claude Code's adapter).
func metaToolName(metas ...map[string]any) string {
	for _, m := range metas {
		if s, ok := m["toolName"].(string); ok && s != "" {
			return s
		}
		if cc, ok := m["claudeCode"].(map[string]any); ok {
			if s, ok := cc["toolName"].(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
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

// geminiArgKeys are the names of a Gemini CLI MCP call's arguments: its
// rawInput, or the request's text content, which is the arguments as JSON
// or, when they are long, "[Payload omitted due to length with parameters:
// a, b, c]" (at most five named; more end with ", ...": not known).
func geminiArgKeys(raw any, content []acp.ToolCallContent) ([]string, bool) {
	var m map[string]any
	if r, ok := raw.(map[string]any); ok && len(r) > 0 {
		m = r
	}
	var texts []string
	for _, c := range content {
		if c.Content != nil && c.Content.Content.Text != nil {
			texts = append(texts, strings.TrimSpace(c.Content.Content.Text.Text))
		}
	}
	if m == nil && len(texts) == 1 {
		t := texts[0]
		const omitted = "[Payload omitted due to length with parameters: "
		if strings.HasPrefix(t, omitted) && strings.HasSuffix(t, "]") {
			list := strings.TrimSuffix(strings.TrimPrefix(t, omitted), "]")
			if strings.HasSuffix(list, ", ...") {
				return nil, false
			}
			return strings.Split(list, ", "), true
		}
		if json.Unmarshal([]byte(t), &m) != nil {
			return nil, false
		}
	}
	if m == nil {
		return nil, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys, true
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
