package provider

import (
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

// The agent process of an ACP provider and its JSON-RPC connection on
// stdio: start, idle stop and stop, what a crash says, the line filter
// that keeps garbage and floods out (R22.7, R18.27), stdin and stderr.

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
	wd      watchdog // the agent's silence (its stdout and stderr are signs of life)
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
	pr.wd.limit = p.c.Silence
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
	pr.connect(stdinW, stdout)
	return pr, nil
}

// connect puts the ACP connection on the started process's stdio: its
// stdout through the line filter, its stdin through acpStdin; once the
// process exits it is reaped, its terminals end, the provider and the
// proxy forget it.
func (pr *acpProc) connect(stdinW io.Writer, stdout io.Reader) {
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
		pr.p.forget(pr)
		pr.proxy.drop(pr.key)
	}()
	pr.key = pr.proxy.add()
	pr.stdin = &acpStdin{pr: pr, w: stdinW}
	pr.conn = acp.NewClientSideConnection(acpClient{pr}, pr.stdin, stdoutR)
	pr.conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil))) // garbage is reported by lineFilter
}

// sess is the ACP session open in this process, "" before the first.
func (pr *acpProc) sess() string {
	if p := pr.acpSess.Load(); p != nil {
		return *p
	}
	return ""
}

func (pr *acpProc) touch() { pr.wd.touch() }

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
