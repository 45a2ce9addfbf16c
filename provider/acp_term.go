package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"
)

// Terminals (R22.4): each terminal/create runs a command in the session's
// folder as a task of the session; its output goes to the task (one line at
// a time, so read_task_output, counts, stalls and masking are the seed's)
// and, bounded, back to the agent.

// acpTermMax bounds the output a terminal keeps for the agent (R18.4) when
// it asks for no smaller outputByteLimit.
const acpTermMax = 1 << 20

// acpTaskLineMax bounds one line written to the task.
const acpTaskLineMax = 8 << 10

type acpTerm struct {
	id    string
	seq   int
	cmd   *exec.Cmd
	task  Task
	limit int

	mu        sync.Mutex
	out       []byte
	truncated bool
	exit      *acp.TerminalExitStatus
	killed    bool
	done      chan struct{}
}

// acpTermKeep bounds the terminals an agent process keeps (R18.26, as
// R18.4 bounds output): each keeps up to acpTermMax of output for the agent.
const acpTermKeep = 16

// termRoom makes room for one more terminal: at acpTermKeep kept ones the
// oldest that ended is forgotten (its output stays in its task); when all
// still run, the request is refused. The place is reserved until done is
// called (the terminal is kept, or did not start).
func (pr *acpProc) termRoom() (done func(), err error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	done = func() {
		pr.mu.Lock()
		pr.termStarting--
		pr.mu.Unlock()
	}
	if len(pr.terms)+pr.termStarting < acpTermKeep {
		pr.termStarting++
		return done, nil
	}
	var oldest *acpTerm
	for _, t := range pr.terms {
		select {
		case <-t.done:
			if oldest == nil || t.seq < oldest.seq {
				oldest = t
			}
		default:
		}
	}
	if oldest == nil {
		return nil, acp.NewInvalidRequest(map[string]any{"error": fmt.Sprintf("the agent has %d terminals running, the most the relay keeps: release or kill one first", acpTermKeep)})
	}
	delete(pr.terms, oldest.id)
	pr.termStarting++
	return done, nil
}

func (pr *acpProc) runningTerms() int {
	n := 0
	for _, t := range pr.terms {
		select {
		case <-t.done:
		default:
			n++
		}
	}
	return n
}

// CreateTerminal starts the command (R22.4).
func (pr *acpProc) CreateTerminal(ctx context.Context, req acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	pr.touch()
	at, err := pr.fileTurn()
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	if at.t.Mode == "plan" {
		// A terminal runs what the agent likes: plan mode refuses it as it
		// refuses writes (R18.26, R22.3).
		return acp.CreateTerminalResponse{}, acp.NewInvalidRequest(map[string]any{"error": "the session is in plan mode: it runs no commands"})
	}
	// The terminal's folder, resolved through the turn's root (R18.25): a
	// folder swapped for a link is not followed.
	dir := at.folder.dir
	if req.Cwd != nil && *req.Cwd != "" {
		dir = *req.Cwd
	}
	dir, err = at.folder.subdir(dir)
	if err != nil {
		return acp.CreateTerminalResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if req.OutputByteLimit != nil && *req.OutputByteLimit < 0 {
		return acp.CreateTerminalResponse{}, acp.NewInvalidParams(map[string]any{"error": "outputByteLimit may not be negative"})
	}
	placed, err := pr.termRoom()
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	defer placed()
	env := pr.p.baseEnv()
	for _, e := range req.Env {
		if e.Name != "" && !strings.ContainsAny(e.Name, "=\x00") {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	path, err := lookPath(req.Command, env)
	argv := append([]string{req.Command}, req.Args...)
	if err != nil || len(req.Args) == 0 && strings.ContainsAny(req.Command, " \t|&;<>()$`\"'*?") {
		// A command line (Zed's adapters send one): run it with the shell.
		path, argv = "/bin/sh", []string{"/bin/sh", "-c", strings.Join(append([]string{req.Command}, req.Args...), " ")}
	}
	limit := acpTermMax
	if req.OutputByteLimit != nil && *req.OutputByteLimit > 0 && *req.OutputByteLimit < limit {
		limit = *req.OutputByteLimit
	}
	desc := strings.Join(argv, " ")
	if argv[0] == "/bin/sh" {
		desc = argv[2]
	}
	task, err := at.h.StartTask(at.ctx, TaskSpec{Description: excerptLine(desc, 200), Type: "shell"})
	if err != nil {
		return acp.CreateTerminalResponse{}, acp.NewInternalError(map[string]any{"error": "the relay could not record the task: " + err.Error()})
	}
	r, w, err := os.Pipe()
	if err != nil {
		task.Finish(127)
		return acp.CreateTerminalResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir, Stdout: w, Stderr: w, SysProcAttr: pr.p.c.User.procAttr()}
	pr.p.c.Sandbox.wrap(cmd, pr.cwd) // R18.26: the agent's own confinement (sandbox, user)
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		task.Output(err.Error())
		task.Finish(127)
		return acp.CreateTerminalResponse{}, acp.NewInternalError(map[string]any{"error": fmt.Sprintf("cannot start %q: %v", req.Command, err)})
	}
	_ = w.Close()
	pr.mu.Lock()
	pr.nterm++
	term := &acpTerm{id: fmt.Sprintf("term-%d-%s", pr.nterm, task.ID()), seq: pr.nterm, cmd: cmd, task: task, limit: limit, done: make(chan struct{})}
	pr.terms[term.id] = term
	pr.mu.Unlock()
	go term.read(r, pr)
	return acp.CreateTerminalResponse{TerminalId: term.id}, nil
}

// read copies the output to the agent's buffer and the task, then ends the task.
func (t *acpTerm) read(r *os.File, pr *acpProc) {
	defer pr.recovered("terminal output", nil) // the relay goes on (R18.27)
	var line []byte
	flush := func() {
		l := strings.TrimRight(string(line), "\r")
		if len(l) > acpTaskLineMax {
			l = l[:acpTaskLineMax] + "…"
		}
		t.task.Output(l)
		line = line[:0]
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b := buf[:n]
			t.mu.Lock()
			t.out = append(t.out, b...)
			if len(t.out) > t.limit {
				cut := len(t.out) - t.limit
				for cut < len(t.out) && !utf8.RuneStart(t.out[cut]) {
					cut++
				}
				t.out = append(t.out[:0], t.out[cut:]...)
				t.truncated = true
			}
			t.mu.Unlock()
			for len(b) > 0 {
				i := strings.IndexByte(string(b), '\n')
				if i < 0 {
					line = append(line, b...)
					if len(line) > 4*acpTaskLineMax {
						flush()
					}
					break
				}
				line = append(line, b[:i]...)
				flush()
				b = b[i+1:]
			}
		}
		if err != nil {
			break
		}
	}
	_ = r.Close()
	if len(line) > 0 {
		flush()
	}
	werr := t.cmd.Wait()
	st := &acp.TerminalExitStatus{}
	code := 0
	var xe *exec.ExitError
	if errors.As(werr, &xe) {
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal().String()
			st.Signal = &sig
			code = 128 + int(ws.Signal())
		} else {
			code = xe.ExitCode()
			st.ExitCode = &code
		}
	} else if werr != nil {
		code = 1
		st.ExitCode = &code
	} else {
		st.ExitCode = &code
	}
	t.mu.Lock()
	t.exit = st
	killed := t.killed
	t.mu.Unlock()
	if killed {
		kill(t.task)
	} else {
		t.task.Finish(code)
	}
	close(t.done)
	pr.touch()
}

func (pr *acpProc) term(id string) (*acpTerm, error) {
	pr.touch()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	t := pr.terms[id]
	if t == nil {
		return nil, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("no terminal %q", id)})
	}
	return t, nil
}

// TerminalOutput is the output so far (bounded) and the exit status.
func (pr *acpProc) TerminalOutput(_ context.Context, req acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	t, err := pr.term(req.TerminalId)
	if err != nil {
		return acp.TerminalOutputResponse{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return acp.TerminalOutputResponse{Output: string(t.out), Truncated: t.truncated, ExitStatus: t.exit}, nil
}

// WaitForTerminalExit waits for the command (the silence watchdog waits too).
func (pr *acpProc) WaitForTerminalExit(ctx context.Context, req acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	t, err := pr.term(req.TerminalId)
	if err != nil {
		return acp.WaitForTerminalExitResponse{}, err
	}
	if at := pr.turn(); at != nil {
		at.wait(1)
		defer at.wait(-1)
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return acp.WaitForTerminalExitResponse{}, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return acp.WaitForTerminalExitResponse{ExitCode: t.exit.ExitCode, Signal: t.exit.Signal}, nil
}

// KillTerminal kills the command; the terminal stays until released.
func (pr *acpProc) KillTerminal(_ context.Context, req acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	t, err := pr.term(req.TerminalId)
	if err != nil {
		return acp.KillTerminalResponse{}, err
	}
	t.kill()
	return acp.KillTerminalResponse{}, nil
}

// ReleaseTerminal kills a command still running and forgets the terminal.
func (pr *acpProc) ReleaseTerminal(_ context.Context, req acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	t, err := pr.term(req.TerminalId)
	if err != nil {
		return acp.ReleaseTerminalResponse{}, err
	}
	t.kill()
	pr.mu.Lock()
	delete(pr.terms, req.TerminalId)
	pr.mu.Unlock()
	return acp.ReleaseTerminalResponse{}, nil
}

func (t *acpTerm) kill() {
	select {
	case <-t.done:
		return
	default:
	}
	t.mu.Lock()
	t.killed = true
	t.mu.Unlock()
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
}

// endTerminals kills every terminal of a process that stops.
func (pr *acpProc) endTerminals() {
	pr.mu.Lock()
	terms := make([]*acpTerm, 0, len(pr.terms))
	for _, t := range pr.terms {
		terms = append(terms, t)
	}
	pr.mu.Unlock()
	for _, t := range terms {
		t.kill()
	}
}

// ---- relay_tool for a kept process ----

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
