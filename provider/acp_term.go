package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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
	at := pr.turn()
	if at == nil {
		return acp.CreateTerminalResponse{}, acp.NewInvalidRequest(map[string]any{"error": "no turn of this session is running"})
	}
	dir := pr.cwd
	if req.Cwd != nil && *req.Cwd != "" {
		d, err := pr.inside(*req.Cwd, false)
		if err != nil {
			return acp.CreateTerminalResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		dir = d
	}
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
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir, Stdout: w, Stderr: w, SysProcAttr: agentProcAttr()}
	pr.p.c.Sandbox.wrap(cmd, pr.cwd) // R18.26: the agent's own confinement
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
	term := &acpTerm{id: fmt.Sprintf("term-%d-%s", pr.nterm, task.ID()), cmd: cmd, task: task, limit: limit, done: make(chan struct{})}
	pr.terms[term.id] = term
	pr.mu.Unlock()
	go term.read(r, pr)
	return acp.CreateTerminalResponse{TerminalId: term.id}, nil
}

// read copies the output to the agent's buffer and the task, then ends the task.
func (t *acpTerm) read(r *os.File, pr *acpProc) {
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

// ---- files (R22.5) ----

// inside resolves path (absolute, links resolved) and checks that it is the
// session's folder or below it. forWrite: the file may not exist yet; its
// deepest existing parent is resolved.
func (pr *acpProc) inside(path string, forWrite bool) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("the path %q is not absolute", path)
	}
	root, err := filepath.EvalSymlinks(pr.cwd)
	if err != nil {
		return "", fmt.Errorf("the session's folder cannot be resolved: %w", err)
	}
	clean := filepath.Clean(path)
	resolved, err := filepath.EvalSymlinks(clean)
	if err != nil && forWrite && errors.Is(err, os.ErrNotExist) {
		// Resolve the deepest parent that exists; the rest is created.
		rest := []string{}
		dir := clean
		for {
			parent := filepath.Dir(dir)
			rest = append([]string{filepath.Base(dir)}, rest...)
			if parent == dir {
				break
			}
			dir = parent
			if r, perr := filepath.EvalSymlinks(dir); perr == nil {
				resolved, err = filepath.Join(append([]string{r}, rest...)...), nil
				break
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("the path %q cannot be read: %w", path, err)
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("the path %q is outside the session's folder %s", path, pr.cwd)
	}
	return resolved, nil
}

// ReadTextFile reads a file inside the session's folder.
func (pr *acpProc) ReadTextFile(_ context.Context, req acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	pr.touch()
	p, err := pr.inside(req.Path, false)
	if err != nil {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	f, err := os.Open(p)
	if err != nil {
		return acp.ReadTextFileResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	defer func() { _ = f.Close() }() // read only
	b, err := io.ReadAll(io.LimitReader(f, MaxReplyBytes*8))
	if err != nil {
		return acp.ReadTextFileResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	content := string(b)
	if req.Line != nil || req.Limit != nil {
		lines := strings.SplitAfter(content, "\n")
		start := 0
		if req.Line != nil && *req.Line > 0 {
			start = min(*req.Line-1, len(lines))
		}
		end := len(lines)
		if req.Limit != nil && *req.Limit > 0 && start+*req.Limit < end {
			end = start + *req.Limit
		}
		content = strings.Join(lines[start:end], "")
	}
	return acp.ReadTextFileResponse{Content: content}, nil
}

// WriteTextFile writes a file inside the session's folder (parents made).
func (pr *acpProc) WriteTextFile(_ context.Context, req acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	pr.touch()
	if at := pr.turn(); at != nil && at.t.Mode == "plan" {
		return acp.WriteTextFileResponse{}, acp.NewInvalidRequest(map[string]any{"error": "the session is in plan mode: it writes no files"})
	}
	p, err := pr.inside(req.Path, true)
	if err != nil {
		return acp.WriteTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return acp.WriteTextFileResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	if err := os.WriteFile(p, []byte(req.Content), 0o644); err != nil {
		return acp.WriteTextFileResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	return acp.WriteTextFileResponse{}, nil
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
