package provider

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Agent CLI provider types (R17.1).
const (
	TypeClaudeCode = "claude-code"
	TypeCodex      = "codex"
	TypeGeminiCLI  = "gemini-cli"
)

// CLITypes lists the agent CLI provider types.
var CLITypes = []string{TypeClaudeCode, TypeCodex, TypeGeminiCLI}

// Watchdog defaults (R17.5).
const (
	DefaultAgentSilence = 10 * time.Minute
	DefaultResultGrace  = 10 * time.Second
	// maxEventLine bounds one line of the CLI's JSON stream kept in memory;
	// the rest of a longer line is dropped (its start is still parsed as text).
	maxEventLine = 8 << 20
)

// CLIConfig configures an agent CLI provider (R17.1–R17.5): claude-code,
// codex or gemini-cli, run once per turn in its JSON streaming mode.
type CLIConfig struct {
	ID, Name string
	Type     string // TypeClaudeCode | TypeCodex | TypeGeminiCLI
	// Command is the binary and fixed leading arguments (default [claude],
	// [codex], [gemini], found on PATH).
	Command []string
	// Args are appended to every run (before the prompt).
	Args         []string
	Env          map[string]string // on top of AgentEnv (R18.1)
	Models       []string
	DefaultModel string
	Efforts      []string
	SwitchTo     string
	// StateDir holds generated files: MCP config files (removed after each
	// turn), Gemini CLI homes (one per session, kept for resume) and Codex
	// token totals. "" = relay/agents in the cache folder (of Env's
	// XDG_CACHE_HOME or HOME when set, else the relay's), else
	// os.TempDir()/relay-agents.
	StateDir string
	// Silence: a CLI that prints nothing this long is killed (default 10 min).
	Silence time.Duration
	// ResultGrace: a CLI still running this long after its final result is
	// killed and the turn ends normally (default 10 s).
	ResultGrace time.Duration
	// Sandbox confines the CLI (R18.31); nil = none.
	Sandbox *Sandbox
	// User runs the CLI as that OS user (R18.26); nil = the relay's own.
	// Without StateDir, the state folder of another user's CLI is in the
	// temp folder (relay-agents-<relay uid>-as-<uid>).
	User *RunAs
}

// CLI is an agent CLI provider. It is safe for concurrent turns.
type CLI struct {
	c CLIConfig
	d dialect

	cmd cmdCheck
}

var _ Provider = (*CLI)(nil)

// cliDialects are the agent CLIs' dialects, by provider type.
var cliDialects = map[string]dialect{
	TypeClaudeCode: claudeDialect{},
	TypeCodex:      codexDialect{},
	TypeGeminiCLI:  geminiDialect{},
}

// NewCLI returns the provider for c; an unknown type is an error. A binary
// that cannot be found is not: Info reports the provider unavailable.
func NewCLI(c CLIConfig) (*CLI, error) {
	d, ok := cliDialects[c.Type]
	if !ok {
		return nil, fmt.Errorf("provider %q: unknown agent CLI type %q", c.ID, c.Type)
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		c.Command = d.defaultCommand()
	}
	c.Command = append([]string(nil), c.Command...)
	c.Args = append([]string(nil), c.Args...)
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
	if c.StateDir == "" {
		c.StateDir = c.User.stateDir() // another user's: in the temp folder
	}
	c.Env = c.User.withEnv(c.Env)
	if c.ResultGrace <= 0 {
		c.ResultGrace = DefaultResultGrace
	}
	if c.StateDir == "" {
		c.StateDir = cliCacheDir(c.Env)
	}
	p := &CLI{c: c, d: d}
	p.availability()
	return p, nil
}

// cliCacheDir is the agent's cache folder for its state: its env's
// XDG_CACHE_HOME or HOME when the provider sets them, else the relay's,
// else the temp folder.
func cliCacheDir(env map[string]string) string {
	if x := env["XDG_CACHE_HOME"]; x != "" {
		return filepath.Join(x, "relay", "agents")
	}
	if h := env["HOME"]; h != "" {
		return filepath.Join(h, ".cache", "relay", "agents")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "relay", "agents")
	}
	return filepath.Join(os.TempDir(), "relay-agents")
}

// Info describes the provider; Status says whether its binary can be found.
func (p *CLI) Info() Info {
	st, why := p.availability()
	return Info{
		ID:           p.c.ID,
		Name:         p.c.Name,
		Type:         p.c.Type,
		Models:       append([]string(nil), p.c.Models...),
		DefaultModel: p.c.DefaultModel,
		Efforts:      append([]string(nil), p.c.Efforts...),
		SwitchTo:     p.c.SwitchTo,
		Status:       st,
		StatusReason: why,
	}
}

// KeepsConversation reports that the provider keeps the agent's own
// conversation between turns (R17.2): a new folder starts a fresh one.
func (p *CLI) KeepsConversation() bool { return true }

// availability looks the binary up (at most every 10 s).
func (p *CLI) availability() (string, string) {
	return p.cmd.get(fmt.Sprintf("the %s command", p.c.Type), p.c.Command[0], p.baseEnv)
}

// baseEnv is AgentEnv plus the configured extras (sorted, later wins).
func (p *CLI) baseEnv() []string {
	return withExtras(AgentEnv(os.Environ()), p.c.Env)
}

// dialect is what differs between the CLIs: their arguments, files and
// environment for a turn, and their event stream.
type dialect interface {
	defaultCommand() []string
	// prepare returns the arguments after Command (Args and the prompt
	// included) and extra environment for the turn.
	prepare(p *CLI, t Turn, model string, tf *turnFiles) (args, env []string, err error)
	// event reads one JSON line of the CLI's stream.
	event(ev map[string]any, s *stream)
	// resumeFailed reports whether a turn error says the stored
	// conversation could not be resumed (the CLI does not know it).
	resumeFailed(msg string) bool
}

// turnFiles are files a turn wrote, removed when it ends.
type turnFiles struct{ paths []string }

func (f *turnFiles) remove() {
	for _, p := range f.paths {
		_ = os.Remove(p)
	}
}

// MCPConfigDir is where the turns' MCP config files go (app removes those
// a dead relay process left behind, as for exec).
func (p *CLI) MCPConfigDir() string { return filepath.Join(p.c.StateDir, "mcp") }

// mcpConfigFile writes the turn's MCP config (R11.2 shape) to a 0600 file.
func (p *CLI) mcpConfigFile(t Turn, tf *turnFiles) (string, error) {
	if err := os.MkdirAll(p.c.StateDir, 0o700); err != nil {
		return "", err
	}
	if err := p.c.User.reach(p.c.StateDir); err != nil {
		return "", err
	}
	path, err := (&Exec{c: ExecConfig{ConfigDir: p.MCPConfigDir(), User: p.c.User}}).writeMCPConfig(t)
	if err != nil {
		return "", err
	}
	tf.paths = append(tf.paths, path)
	return path, nil
}

// newUUID is a random (v4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Run runs one turn: the CLI in its JSON streaming mode, stdin /dev/null,
// in its own process group; events are read as they come (R17.3).
func (p *CLI) Run(ctx context.Context, t Turn, h Host) (Result, error) {
	if st, why := p.availability(); st == StatusUnavailable {
		return Result{}, &TurnError{Msg: fmt.Sprintf("provider %q is unavailable: %s", p.c.ID, why)}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%s provider %q: %w", p.c.Type, p.c.ID, err)
	}
	model := t.Model
	if model == "" {
		model = p.c.DefaultModel
	}
	res, s, err := p.run(ctx, t, h, model)
	var te *TurnError
	if t.AgentSession != "" && errors.As(err, &te) && ctx.Err() == nil && s != nil && !s.started() && p.d.resumeFailed(te.Msg) {
		// The stored conversation could not be resumed (the CLI's own
		// store was cleared, another machine, …): start a fresh one once,
		// and tell the agent.
		t.Prompt = fmt.Sprintf("[relay: this session's earlier %s conversation could not be resumed (%s); this turn starts a new one]\n\n%s",
			p.c.Type, excerptLine(te.Msg, 200), t.Prompt)
		t.AgentSession = ""
		res, _, err = p.run(ctx, t, h, model)
	}
	return res, err
}

func excerptLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// run runs the CLI once; the stream is nil when nothing was started.
func (p *CLI) run(ctx context.Context, t Turn, h Host, model string) (Result, *stream, error) {
	tf := &turnFiles{}
	defer tf.remove()
	r, err := p.command(t, h, model, tf)
	if err != nil {
		return Result{}, nil, err
	}
	if err := r.start(); err != nil {
		return Result{}, nil, err
	}
	exit, res, err := r.watch(ctx)
	if err != nil {
		return res, r.s, err
	}
	res, err = r.outcome(exit)
	return res, r.s, err
}

// cliRun is one run of the CLI: its command, the stream its stdout is
// read by, the tail of its stderr.
type cliRun struct {
	p       *CLI
	model   string
	argv0   string // the CLI's command as configured (cmd.Args may be the sandbox's)
	cmd     *exec.Cmd
	s       *stream
	errTail *tailBuffer
	pgid    int
	waitc   chan error // cmd.Wait's error
}

// cliExit is how the CLI's process ended.
type cliExit struct {
	werr        error // cmd.Wait's error
	afterResult bool  // killed by the result watchdog after its final result (R17.5)
}

// command is the turn's run of the CLI, not started: its arguments and
// files (the dialect's), its environment, stdin /dev/null, its own process
// group, in the sandbox when there is one.
func (p *CLI) command(t Turn, h Host, model string, tf *turnFiles) (*cliRun, error) {
	args, extraEnv, err := p.d.prepare(p, t, model, tf)
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("%s provider %q: %v; nothing was run", p.c.Type, p.c.ID, err)}
	}
	argv := append(append([]string(nil), p.c.Command...), args...)
	env := p.turnEnv(t, extraEnv)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("%s provider %q: command %q not found", p.c.Type, p.c.ID, argv[0])}
	}
	s := newStream(h, p.d, t)
	s.stateDir = p.c.StateDir
	s.wd.limit = p.c.Silence
	r := &cliRun{p: p, model: model, argv0: argv[0], s: s, errTail: &tailBuffer{max: defaultStderrTail}}
	r.cmd = &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Dir:         t.Cwd,
		SysProcAttr: p.c.User.procAttr(), // own process group, killed with the relay (as exec); the provider's user (R18.26)
		WaitDelay:   execPipeDelay,
		Stdout:      s,
		Stderr:      &touchWriter{w: r.errTail, s: s},
	} // Stdin nil: /dev/null
	p.c.Sandbox.wrap(r.cmd, t.Cwd, p.sandboxBinds(t, tf)...)
	return r, nil
}

// turnEnv is the CLI's environment for the turn: the provider's, the
// turn's RELAY_* variables, its trace parent and the dialect's extras.
func (p *CLI) turnEnv(t Turn, extraEnv []string) []string {
	env := append(p.baseEnv(),
		"RELAY_URL="+t.RelayURL,
		"RELAY_MCP_URL="+t.MCPURL,
		"RELAY_SESSION_ID="+t.SessionID,
		"RELAY_TOKEN="+t.Token,
	)
	env = append(env, t.TraceEnv...) // R25.1: TRACEPARENT of the turn's span
	return append(env, extraEnv...)
}

// start starts the CLI; waitc delivers its end.
func (r *cliRun) start() error {
	if err := r.cmd.Start(); err != nil {
		return &TurnError{Msg: fmt.Sprintf("%s provider %q: cannot start %q: %v", r.p.c.Type, r.p.c.ID, r.argv0, err)}
	}
	r.s.touch()
	r.pgid = r.cmd.Process.Pid
	r.waitc = make(chan error, 1)
	go func() { r.waitc <- r.cmd.Wait() }()
	return nil
}

// watch waits for the CLI's end under its watchdogs (R17.5): a stop or
// the CLI's silence ends the run early (the error says which, the result
// is what the turn keeps); a CLI still running ResultGrace after its
// final result is killed.
func (r *cliRun) watch(ctx context.Context) (cliExit, Result, error) {
	ticker := r.s.wd.ticker()
	defer ticker.Stop()
	var grace <-chan time.Time
	resultCh := r.s.resultCh
	for {
		select {
		case werr := <-r.waitc:
			return cliExit{werr: werr}, Result{}, nil
		case <-ctx.Done():
			killGroup(r.pgid, r.waitc)
			return cliExit{}, Result{Text: r.s.replySoFar(), Model: r.model}, fmt.Errorf("%s provider %q: %w", r.p.c.Type, r.p.c.ID, ctx.Err())
		case <-resultCh:
			resultCh = nil
			timer := time.NewTimer(r.p.c.ResultGrace)
			defer timer.Stop()
			grace = timer.C
		case <-grace:
			killGroup(r.pgid, r.waitc)
			return cliExit{afterResult: true}, Result{}, nil
		case <-ticker.C:
			if r.s.wd.silent(r.s.waiting()) {
				killGroup(r.pgid, r.waitc)
				return cliExit{}, Result{Model: r.model}, &TurnError{Msg: fmt.Sprintf("The agent (%s) printed nothing for %s and was stopped (timing.agent_silence).", r.p.c.Type, r.p.c.Silence)}
			}
		}
	}
}

// outcome is the turn's result once the CLI ended: its stream's, or a
// failed exit with the end of its stderr.
func (r *cliRun) outcome(exit cliExit) (Result, error) {
	r.s.flush()
	res, ok, terr := r.s.outcome(r.model)
	switch {
	case terr != nil:
		return res, terr
	case ok || exit.afterResult:
		return res, nil
	}
	if exit.werr != nil && !errors.Is(exit.werr, exec.ErrWaitDelay) {
		return res, &TurnError{Msg: fmt.Sprintf("The agent (%s) ended with %s", r.p.c.Type, r.exitText(exit.werr))}
	}
	return res, nil
}

// exitText is the CLI's failed exit and the end of its stderr (without
// codex's stack backtrace).
func (r *cliRun) exitText(werr error) string {
	msg := werr.Error()
	var xe *exec.ExitError
	if errors.As(werr, &xe) {
		msg = xe.Error()
	}
	if tail := r.errTail.String(); tail != "" {
		if i := strings.Index(tail, "Stack backtrace:"); i >= 0 { // codex's error tail
			tail = strings.TrimSpace(tail[:i])
		}
		msg += ": " + tail
	}
	return msg
}

// touchWriter counts stderr output as a sign of life (silence watchdog).
type touchWriter struct {
	w *tailBuffer
	s *stream
}

func (t *touchWriter) Write(b []byte) (int, error) {
	t.s.touch()
	return t.w.Write(b)
}

// stream reads a CLI's stdout line by line (an io.Writer for os/exec) and
// keeps what the turn produced. Its state is touched only by the one
// goroutine os/exec copies stdout with, and read after Wait.
type stream struct {
	h        Host
	d        dialect
	t        Turn
	stateDir string
	wd       watchdog // the CLI's silence (its stdout and stderr are signs of life)
	buf      []byte
	dropped  bool // the current line is longer than maxEventLine

	resultCh chan struct{}
	once     sync.Once

	mu        sync.Mutex
	text      []byte // assistant text so far (bounded, the partial reply)
	segment   []byte // text of the current assistant message segment
	final     string
	haveFinal bool
	failure   string
	lastErr   string // an error event the CLI may still recover from (a retry)
	limit     string
	usage     Usage
	plain     []string
	agentSess string
	noted     map[string]bool // tool call ids already reported
	pending   map[string]bool // relay_tool calls not answered yet (a card may take long)
	deltas    bool            // text arrived as deltas (Claude Code partial messages)
	model     string          // the model the CLI says it runs (R7.13 modelNote when it differs)
}

func newStream(h Host, d dialect, t Turn) *stream {
	s := &stream{h: h, d: d, t: t, resultCh: make(chan struct{}), noted: map[string]bool{}, pending: map[string]bool{}}
	s.wd.onTouch = s.output
	s.touch()
	return s
}

func (s *stream) touch() { s.wd.touch() }

// output tells the host of the CLI's output: the relay's progress lines
// say how long ago (R25.2).
func (s *stream) output() {
	if o, ok := s.h.(OutputHost); ok {
		o.Output()
	}
}

func (s *stream) Write(b []byte) (int, error) {
	s.touch()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			break
		}
		s.add(b[:i])
		s.line()
		b = b[i+1:]
	}
	return n, nil
}

func (s *stream) add(b []byte) {
	if s.dropped {
		return
	}
	if len(s.buf)+len(b) > maxEventLine {
		b = b[:maxEventLine-len(s.buf)]
		s.dropped = true
	}
	s.buf = append(s.buf, b...)
}

// flush reads a last line without a newline.
func (s *stream) flush() {
	if len(s.buf) > 0 || s.dropped {
		s.line()
	}
}

func (s *stream) line() {
	raw := bytes.TrimRight(s.buf, "\r")
	s.buf, s.dropped = s.buf[:0], false
	if len(bytes.TrimSpace(raw)) == 0 {
		return
	}
	var ev map[string]any
	if raw[0] == '{' && json.Unmarshal(raw, &ev) == nil {
		s.d.event(ev, s)
		return
	}
	// Not JSON: kept as text (R17.3).
	line := string(raw)
	s.mu.Lock()
	if len(s.plain) < 1000 {
		s.plain = append(s.plain, line)
	}
	s.mu.Unlock()
	s.appendText(line + "\n")
}

// appendText adds assistant text to the partial reply and the current segment.
func (s *stream) appendText(txt string) {
	if txt == "" {
		return
	}
	s.mu.Lock()
	s.text = appendBounded(s.text, txt, MaxReplyBytes)
	s.segment = appendBounded(s.segment, txt, MaxReplyBytes)
	out := tailText(s.text, MaxPartialBytes) // only the tail is copied (R18.4)
	s.mu.Unlock()
	if s.h != nil && out != "" {
		s.h.Partial(out)
	}
}

// newSegment starts a new assistant message: the reply is the last one's text.
func (s *stream) newSegment() {
	s.mu.Lock()
	if len(s.text) > 0 && !bytes.HasSuffix(s.text, []byte("\n\n")) {
		if bytes.HasSuffix(s.text, []byte("\n")) {
			s.text = append(s.text, '\n')
		} else {
			s.text = append(s.text, '\n', '\n')
		}
	}
	s.segment = s.segment[:0]
	s.mu.Unlock()
}

func appendBounded(b []byte, s string, max int) []byte {
	b = append(b, s...)
	if len(b) > 2*max {
		b = append(b[:0], b[len(b)-max:]...)
	}
	return b
}

func (s *stream) segmentText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(string(s.segment))
}

// result records the CLI's final result (R17.5 starts its exit watchdog).
func (s *stream) result(text string) {
	s.mu.Lock()
	s.final, s.haveFinal = text, true
	s.mu.Unlock()
	s.once.Do(func() { close(s.resultCh) })
}

func (s *stream) fail(msg string) {
	s.mu.Lock()
	if s.failure == "" {
		s.failure = msg
	}
	s.mu.Unlock()
}

// limited ends the turn with a usage or rate limit: a CLI that goes on
// after it is stopped by the result watchdog.
func (s *stream) limited(reason string) {
	s.mu.Lock()
	if s.limit == "" {
		s.limit = reason
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.resultCh) })
}

// failOrLimit ends the turn with the CLI's error: a usage or rate limit
// when its text says so.
func (s *stream) failOrLimit(msg string) {
	if limitText(msg) {
		s.limited(msg)
	} else {
		s.fail(msg)
	}
}

// softError notes an error event; it ends the turn only when no result
// follows (the CLI may retry and succeed).
func (s *stream) softError(msg string) {
	if msg == "" {
		return
	}
	s.mu.Lock()
	s.lastErr = msg
	s.mu.Unlock()
}

func (s *stream) addUsage(in, out int64, cost float64) {
	s.mu.Lock()
	s.usage.InputTokens += in
	s.usage.OutputTokens += out
	s.usage.CostUSD += cost
	s.mu.Unlock()
}

func (s *stream) setUsage(in, out int64, cost float64) {
	s.mu.Lock()
	s.usage = Usage{InputTokens: in, OutputTokens: out, CostUSD: cost}
	s.mu.Unlock()
}

// agentSession records the CLI's conversation id (R17.2).
func (s *stream) agentSession(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	changed := s.agentSess != id
	s.agentSess = id
	s.mu.Unlock()
	if !changed || id == s.t.AgentSession {
		return
	}
	if ah, ok := s.h.(AgentSessionHost); ok {
		ah.SetAgentSession(id)
	}
}

// toolCall notes a relay_tool call of the agent: it is pending until its
// result comes (waiting). Its 🛰️ activity line (R17.3) is the relay's: the
// relay sees the call itself and writes the line once.
func (s *stream) toolCall(callID, tool string, _ any) {
	if !isRelayTool(tool) {
		return
	}
	s.mu.Lock()
	if callID != "" && s.noted[callID] {
		s.mu.Unlock()
		return
	}
	if callID != "" {
		s.noted[callID] = true
		s.pending[callID] = true
	}
	s.mu.Unlock()
}

// toolDone marks a tool call answered.
func (s *stream) toolDone(callID string) {
	s.mu.Lock()
	delete(s.pending, callID)
	s.mu.Unlock()
}

// waiting reports whether a relay_tool call of the agent is still running:
// its silence then is the relay's (a card, a send waiting for its reply),
// not a hung CLI.
func (s *stream) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0
}

// isRelayTool reports whether a CLI's tool name is relay_tool (or its alias)
// of the relay's MCP server: mcp__relay__relay_tool (Claude Code),
// relay_tool (Codex), mcp_relay_relay_tool (Gemini CLI).
func isRelayTool(name string) bool {
	return strings.HasSuffix(name, "relay_tool") || strings.HasSuffix(name, "remote_relay")
}

// ActivityLine is the conversation line for one relay_tool call:
// "🛰️ ACTION → RELAY session ID8", without " session ID8" when the call
// names no session. RELAY is the call's relay argument, else this relay.
func ActivityLine(thisRelay string, args any) string {
	m, _ := args.(map[string]any)
	if m == nil {
		if s, ok := args.(string); ok { // some CLIs pass arguments as a JSON string
			_ = json.Unmarshal([]byte(s), &m)
		}
	}
	str := func(k string) string {
		v, _ := m[k].(string)
		return strings.TrimSpace(v)
	}
	action := str("action")
	if action == "" {
		action = "relay_tool"
	}
	relay := str("relay")
	if relay == "" || strings.EqualFold(relay, "this") {
		relay = thisRelay
	}
	if relay == "" {
		relay = "this relay"
	}
	line := "🛰️ " + action + " → " + relay
	sid := str("session")
	if sid == "" {
		sid = str("watcher")
	}
	if sid != "" {
		if len(sid) > 8 {
			sid = sid[:8]
		}
		line += " session " + sid
	}
	return line
}

// started reports whether the CLI got as far as the model: text, a tool
// call or tokens (a failed resume gets none of these).
func (s *stream) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.text) > 0 || len(s.noted) > 0 || s.usage.InputTokens > 0 || s.usage.OutputTokens > 0
}

// replySoFar is the text a stopped turn keeps.
func (s *stream) replySoFar() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(bytes.TrimSpace(s.text))
}

// outcome is the turn's result once the CLI ended: ok when it printed a
// final result; a *TurnError for a failure or a limit.
func (s *stream) outcome(model string) (Result, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model != "" {
		model = s.model
	}
	res := Result{Model: model, Usage: s.usage}
	if s.limit != "" {
		res.Paused = s.limit
		res.Text = ""
		return res, false, &TurnError{Msg: "The agent hit a usage or rate limit: " + s.limit}
	}
	if s.failure != "" {
		return res, false, &TurnError{Msg: "The agent reported an error: " + s.failure}
	}
	if !s.haveFinal && s.lastErr != "" {
		if limitText(s.lastErr) {
			res.Paused = s.lastErr
			return res, false, &TurnError{Msg: "The agent hit a usage or rate limit: " + s.lastErr}
		}
		return res, false, &TurnError{Msg: "The agent reported an error: " + s.lastErr}
	}
	if s.haveFinal {
		res.Text = BoundReply(s.final)
		return res, true, nil
	}
	// No structured result: what it wrote is the reply.
	res.Text = BoundReply(string(bytes.TrimSpace(s.text)))
	return res, false, nil
}

// ---- small JSON helpers ----

func jstr(m map[string]any, keys ...string) string {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[k]
	}
	s, _ := v.(string)
	return s
}

func jnum(m map[string]any, keys ...string) float64 {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = mm[k]
	}
	f, _ := v.(float64)
	return f
}

func jmap(m map[string]any, keys ...string) map[string]any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	out, _ := v.(map[string]any)
	return out
}

// limitText reports whether an error text is a rate or usage limit.
func limitText(s string) bool {
	l := strings.ToLower(s)
	for _, w := range []string{"rate limit", "rate_limit", "usage limit", "usage_limit", "quota", "resource_exhausted", "429", "too many requests"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// tomlString is s as a TOML basic string (for codex -c overrides).
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mcpOn reports whether the turn offers relay_tool (agent sessions on).
func mcpOn(t Turn) bool { return t.MCPURL != "" }

// ranModel records the model the CLI reports running (its init event).
func (s *stream) ranModel(m string) {
	if m == "" {
		return
	}
	s.mu.Lock()
	s.model = m
	s.mu.Unlock()
}
