package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
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
	dir, err := termFolder(at, req)
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	placed, err := pr.termRoom()
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	defer placed()
	spec := pr.termCommand(req)
	spec.dir = dir
	task, err := at.h.StartTask(at.ctx, TaskSpec{Description: excerptLine(spec.desc(), 200), Type: "shell"})
	if err != nil {
		return acp.CreateTerminalResponse{}, acp.NewInternalError(map[string]any{"error": "the relay could not record the task: " + err.Error()})
	}
	cmd, r, err := pr.termStart(spec, task)
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	term := pr.addTerm(cmd, task, termLimit(req))
	go term.read(r, pr)
	return acp.CreateTerminalResponse{TerminalId: term.id}, nil
}

// termFolder checks a terminal request and resolves its folder through the
// turn's root (R18.25): a folder swapped for a link is not followed. A
// terminal runs what the agent likes: plan mode refuses it as it refuses
// writes (R18.26, R22.3).
func termFolder(at *acpTurn, req acp.CreateTerminalRequest) (string, error) {
	if at.t.Mode == "plan" {
		return "", acp.NewInvalidRequest(map[string]any{"error": "the session is in plan mode: it runs no commands"})
	}
	dir := at.folder.dir
	if req.Cwd != nil && *req.Cwd != "" {
		dir = *req.Cwd
	}
	dir, err := at.folder.subdir(dir)
	if err != nil {
		return "", acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if req.OutputByteLimit != nil && *req.OutputByteLimit < 0 {
		return "", acp.NewInvalidParams(map[string]any{"error": "outputByteLimit may not be negative"})
	}
	return dir, nil
}

// termLimit is how much output the terminal keeps for the agent: its
// outputByteLimit, at most acpTermMax.
func termLimit(req acp.CreateTerminalRequest) int {
	limit := acpTermMax
	if req.OutputByteLimit != nil && *req.OutputByteLimit > 0 && *req.OutputByteLimit < limit {
		limit = *req.OutputByteLimit
	}
	return limit
}

// termSpec is a terminal's command.
type termSpec struct {
	name string // the command the agent named
	path string
	argv []string
	env  []string
	dir  string
}

// termCommand is the command of a terminal request in the provider's
// environment with the request's variables; a command line (Zed's adapters
// send one) runs with the shell.
func (pr *acpProc) termCommand(req acp.CreateTerminalRequest) termSpec {
	env := pr.p.baseEnv()
	for _, e := range req.Env {
		if e.Name != "" && !strings.ContainsAny(e.Name, "=\x00") {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	path, err := lookPath(req.Command, env)
	argv := append([]string{req.Command}, req.Args...)
	if err != nil || len(req.Args) == 0 && strings.ContainsAny(req.Command, " \t|&;<>()$`\"'*?") {
		path, argv = "/bin/sh", []string{"/bin/sh", "-c", strings.Join(append([]string{req.Command}, req.Args...), " ")}
	}
	return termSpec{name: req.Command, path: path, argv: argv, env: env}
}

// desc is the command as the task shows it (a shell's command line).
func (s termSpec) desc() string {
	if s.argv[0] == "/bin/sh" {
		return s.argv[2]
	}
	return strings.Join(s.argv, " ")
}

// termStart starts the terminal's command, confined as the agent is
// (R18.26: sandbox, user), its stdout and stderr into one pipe; r is the
// pipe's end to read. A command that cannot start ends its task.
func (pr *acpProc) termStart(spec termSpec, task Task) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		task.Finish(127)
		return nil, nil, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	cmd := &exec.Cmd{Path: spec.path, Args: spec.argv, Env: spec.env, Dir: spec.dir, Stdout: w, Stderr: w, SysProcAttr: pr.p.c.User.procAttr()}
	pr.p.c.Sandbox.wrap(cmd, pr.cwd)
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		task.Output(err.Error())
		task.Finish(127)
		return nil, nil, acp.NewInternalError(map[string]any{"error": fmt.Sprintf("cannot start %q: %v", spec.name, err)})
	}
	_ = w.Close()
	return cmd, r, nil
}

// addTerm keeps a started terminal.
func (pr *acpProc) addTerm(cmd *exec.Cmd, task Task, limit int) *acpTerm {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.nterm++
	term := &acpTerm{id: fmt.Sprintf("term-%d-%s", pr.nterm, task.ID()), seq: pr.nterm, cmd: cmd, task: task, limit: limit, done: make(chan struct{})}
	pr.terms[term.id] = term
	return term
}

// read copies the output to the agent's buffer and the task, then ends the task.
func (t *acpTerm) read(r *os.File, pr *acpProc) {
	defer pr.recovered("terminal output", nil) // the relay goes on (R18.27)
	lines := &taskLines{task: t.task}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			t.keep(buf[:n])
			lines.write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	_ = r.Close()
	lines.end()
	st, code := termExit(t.cmd.Wait())
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

// keep adds output to the agent's buffer: its last limit bytes, cut at a
// character's start.
func (t *acpTerm) keep(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out = append(t.out, b...)
	if len(t.out) > t.limit {
		cut := len(t.out) - t.limit
		for cut < len(t.out) && !utf8.RuneStart(t.out[cut]) {
			cut++
		}
		t.out = append(t.out[:0], t.out[cut:]...)
		t.truncated = true
	}
}

// taskLines writes a terminal's output to its task one line at a time; a
// line longer than 4×acpTaskLineMax is written in parts, each bounded to
// acpTaskLineMax.
type taskLines struct {
	task Task
	line []byte
}

func (l *taskLines) write(b []byte) {
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			l.line = append(l.line, b...)
			if len(l.line) > 4*acpTaskLineMax {
				l.flush()
			}
			return
		}
		l.line = append(l.line, b[:i]...)
		l.flush()
		b = b[i+1:]
	}
}

func (l *taskLines) flush() {
	s := strings.TrimRight(string(l.line), "\r")
	if len(s) > acpTaskLineMax {
		s = s[:acpTaskLineMax] + "…"
	}
	l.task.Output(s)
	l.line = l.line[:0]
}

// end writes a last line without a newline.
func (l *taskLines) end() {
	if len(l.line) > 0 {
		l.flush()
	}
}

// termExit is a terminal's exit status for the agent and its code for the
// task (128+N for signal N).
func termExit(werr error) (*acp.TerminalExitStatus, int) {
	st := &acp.TerminalExitStatus{}
	code := 0
	var xe *exec.ExitError
	switch {
	case errors.As(werr, &xe):
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal().String()
			st.Signal = &sig
			return st, 128 + int(ws.Signal())
		}
		code = xe.ExitCode()
	case werr != nil:
		code = 1
	}
	st.ExitCode = &code
	return st, code
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
