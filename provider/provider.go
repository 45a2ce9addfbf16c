// Package provider holds the agents that run a session's turns: scripted,
// exec (an agent CLI per turn) and, later, openai. A provider turns a prompt
// plus the session's history into a reply and may call relay_tool on the way
// through the Host the relay hands it. The package imports nothing of the
// relay: the relay adapts itself to Host.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
)

// Info describes a provider as relay_info shows it (R7.2).
type Info struct {
	ID           string
	Name         string
	Type         string // scripted | exec | openai | claude-code | codex | gemini-cli
	Models       []string
	DefaultModel string
	Efforts      []string
	SwitchTo     string // billing partner (R7.8), "" when none
	// ModelsDiscovered: Models is what the endpoint listed, not a configured
	// list (R17.6): a model missing from it passes unchecked with a note.
	ModelsDiscovered bool
	// Status is "" (available) or "unavailable" (R17.1: e.g. the agent CLI's
	// binary cannot be found); StatusReason says why.
	Status       string
	StatusReason string
	// WantsHistory: the provider's turns need the conversation's earlier
	// messages (Turn.History); the others keep their own conversation or
	// need none, and the relay does not read it for them.
	WantsHistory bool
}

// StatusUnavailable is Info.Status of a provider that cannot run turns now.
const StatusUnavailable = "unavailable"

// HistoryItem is one earlier message of the session, oldest first.
type HistoryItem struct {
	Role string // user | agent | assistant | event | schedule | activity
	Text string
}

// Turn is everything a provider needs to run one prompt.
type Turn struct {
	SessionID string
	TurnID    string
	Prompt    string
	Model     string
	Effort    string
	Mode      string
	Cwd       string
	History   []HistoryItem
	// Token is the session's bearer token for POST /mcp.
	Token string
	// RelayURL is the base URL of the relay's API (http://host:port), MCPURL its /mcp route,
	// set only while the relay offers relay_tool to agents (agent sessions on or a
	// relay paired, R4.2; MCPEndpoint is the route either way).
	RelayURL string
	MCPURL   string
	// Relay is this relay's name (activity lines, R17.3).
	Relay string
	// AgentSession is the agent CLI's own conversation id stored with the
	// session by an earlier turn (R17.2), "" for a fresh conversation.
	AgentSession string
	// The session's Claude settings (update_session, R7.10), set only for a
	// provider whose sessions take them (claude-code, an exec or openai
	// provider marked claude, or one that declares its window semantics):
	// AutoCompactWindow in tokens (0: the agent's own), Thinking "on",
	// "off" or "" (the agent's default), ThinkingDisplay as given.
	AutoCompactWindow int
	Thinking          string
	ThinkingDisplay   string
	// TraceEnv is TRACEPARENT (and TRACESTATE) of the turn's span for the
	// agent process's environment (R25.1), nil when traces are off.
	TraceEnv []string
}

// MCPEndpoint is the relay's /mcp URL whether or not relay_tool is offered
// to this turn: MCPURL, else RelayURL's /mcp. An exec agent always gets it
// as RELAY_MCP_URL (R25.6; relay_tool may refuse it while agent sessions are
// off, but the URL is there); "" only when the relay's URL is not known.
func (t Turn) MCPEndpoint() string {
	if t.MCPURL != "" || t.RelayURL == "" {
		return t.MCPURL
	}
	return strings.TrimRight(t.RelayURL, "/") + "/mcp"
}

// Usage is what a turn consumed, when the provider knows it.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64 // when the agent CLI reports it
}

// Result is a finished turn's reply.
type Result struct {
	Text  string
	Model string
	Usage Usage
	// Paused is set when the agent hit a rate or usage limit (R17.3): the
	// reason; the relay marks the provider paused in usage (R7.3).
	Paused string
}

// TaskSpec starts a task inside a session: a shell command, a monitor or a sub-agent.
type TaskSpec struct {
	Description string
	Type        string // shell | monitor | subagent
	// Fetch, when set, says the task's output stays in the agent's process
	// until asked for: the relay calls it when read_task_output is called
	// for the running task, and the provider then hands over what it has
	// through Task.Output, shortly after (R7.6: "call again in a few
	// seconds"). It is called on a goroutine of its own while the task
	// runs (one that comes as the task ends may find it ended).
	Fetch func()
}

// Task is a running task; Output and Finish may be called after the turn
// that started it has ended (background tasks).
type Task interface {
	ID() string
	Output(line string)
	// Finish ends the task with its exit code (0 = done, non-zero = failed).
	Finish(exitCode int)
}

// Host is the relay as a provider sees it, for the turn it runs.
type Host interface {
	// CallTool runs relay_tool as this session, through the same code path as
	// the MCP route, and returns the JSON result envelope.
	CallTool(ctx context.Context, args json.RawMessage) json.RawMessage
	// AskUser raises a question card (kind ask_user) and blocks until it is answered.
	AskUser(ctx context.Context, text string, options []string) (string, error)
	// StartTask registers a task of the session.
	StartTask(ctx context.Context, spec TaskSpec) (Task, error)
	// Partial reports the reply written so far (read_session's inFlight).
	Partial(text string)
	// A Host may also implement ActivityHost, AgentSessionHost and OutputHost (the
	// relay's does); providers check with a type assertion.
}

// ActivityHost records a line of the agent's activity in the conversation
// (role "activity"), e.g. "🛰️ send → desk session 1a2b3c4d" (R17.3).
type ActivityHost interface {
	Activity(line string)
}

// OutputHost is told that the agent printed something (any output, stderr
// included: a sign of life), for the relay's progress lines of a long turn
// (R25.2).
type OutputHost interface {
	Output()
}

// AgentSessionHost stores the agent CLI's conversation id with the session
// (R17.2), so later turns, also after a restart, resume it.
type AgentSessionHost interface {
	SetAgentSession(id string)
}

// Provider runs turns.
type Provider interface {
	Info() Info
	// Run runs one turn. ctx is cancelled when the turn is stopped or times
	// out; Run must then return promptly (and kill what it started).
	Run(ctx context.Context, t Turn, h Host) (Result, error)
}

// Killer is a provider that keeps a session's agent process between its
// turns (acp): Kill ends it and its terminals (R23.6: the owner's Kill
// session), true when one was alive; the session's next turn starts a new
// one, which resumes the conversation where the agent can.
type Killer interface {
	Kill(sessionID string) bool
}

// TurnError is a turn that ended in an error the agent should see as is
// (the reply is not produced). Other errors are reported the same way.
type TurnError struct{ Msg string }

func (e *TurnError) Error() string { return e.Msg }

// ErrStopped is returned by providers that noticed the turn was stopped.
var ErrStopped = errors.New("turn stopped")
