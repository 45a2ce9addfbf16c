package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
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

// open initializes the process on its first turn and opens the ACP session
// the turn needs: the stored one (session/load in a new process), or a new
// one (R22.2). The note is put before the prompt when a stored conversation
// could not be resumed.
func (pr *acpProc) open(t Turn, at *acpTurn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), acpStartTimeout)
	defer cancel()
	if err := pr.initialize(ctx); err != nil {
		return "", err
	}
	want := t.AgentSession
	if want != "" && want == pr.sess() {
		return "", nil
	}
	servers := pr.mcpServers(t)
	note := ""
	if want != "" {
		var loaded bool
		var err error
		if note, loaded, err = pr.load(ctx, t, at, servers); loaded || err != nil {
			return "", err
		}
	}
	if err := pr.newSession(ctx, t, at, servers); err != nil {
		return "", err
	}
	return note, nil
}

// initialize runs initialize once per process and keeps what the agent
// tells of itself: its capabilities, its name, its sign-in methods.
func (pr *acpProc) initialize(ctx context.Context) error {
	if pr.initDone {
		return nil
	}
	res, err := pr.conn.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion: acp.ProtocolVersionNumber,
		ClientCapabilities: acp.ClientCapabilities{
			Fs:       acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true},
			Terminal: true,
		},
		ClientInfo: &acp.Implementation{Name: "relay", Version: "1"},
	})
	if err != nil {
		return &TurnError{Msg: pr.startError("initialize", err)}
	}
	pr.caps = res.AgentCapabilities
	pr.info = res.AgentInfo
	pr.auth = authMethodsOf(res.AuthMethods)
	pr.initDone = true
	return nil
}

// load resumes the session's stored ACP session (session/load); loaded
// when it did. When the agent cannot load it, or refused, the note tells
// the agent a new conversation starts.
func (pr *acpProc) load(ctx context.Context, t Turn, at *acpTurn, servers []acp.McpServer) (note string, loaded bool, err error) {
	if !pr.caps.LoadSession {
		return "[relay: the agent cannot load this session's earlier conversation; this turn starts a new one]", false, nil
	}
	want := t.AgentSession
	// The agent replays the conversation as updates: no turn reads them.
	pr.mu.Lock()
	pr.cur = nil
	pr.mu.Unlock()
	_, err = pr.conn.LoadSession(ctx, acp.LoadSessionRequest{SessionId: acp.SessionId(want), Cwd: t.Cwd, McpServers: servers})
	pr.mu.Lock()
	pr.cur = at
	pr.mu.Unlock()
	if err == nil {
		pr.acpSess.Store(&want)
		return "", true, nil
	}
	if pr.gone() {
		return "", false, &TurnError{Msg: pr.crashText()}
	}
	return fmt.Sprintf("[relay: this session's earlier conversation could not be resumed (%s); this turn starts a new one]", excerptLine(reqErrText(err), 200)), false, nil
}

// newSession opens a new ACP session (session/new); the relay stores its
// id with the relay session.
func (pr *acpProc) newSession(ctx context.Context, t Turn, at *acpTurn, servers []acp.McpServer) error {
	res, err := pr.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.Cwd, McpServers: servers})
	if err != nil {
		return &TurnError{Msg: pr.startError("session/new", err)}
	}
	if res.SessionId == "" {
		return &TurnError{Msg: fmt.Sprintf("acp provider %q: the agent's session/new named no session", pr.p.c.ID)}
	}
	sid := string(res.SessionId)
	pr.acpSess.Store(&sid)
	if ah, ok := at.h.(AgentSessionHost); ok {
		ah.SetAgentSession(sid)
	}
	return nil
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
