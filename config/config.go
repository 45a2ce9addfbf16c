// Package config builds the relay's configuration from defaults, the optional
// YAML file (SPEC §14), the environment and the command-line flags (SPEC §2),
// in that order of precedence, and validates the result.
//
// Every error this package returns is one line. Problems with the YAML file
// start with "config FILE: " (FILE as given), everything else with "config: ".
package config

import (
	"path/filepath"
	"time"
)

// Config is the whole configuration of one relay process.
type Config struct {
	Addr     string // --addr / RELAY_ADDR, default "127.0.0.1:7420"
	RedisURL string // --redis / REDIS_URL, default "" (embedded)
	// DataDir is where the embedded store keeps its data (--data-dir /
	// RELAY_DATA_DIR; default DefaultDataDir()); used only without RedisURL (R20.1).
	DataDir     string
	Name        string // --name / RELAY_NAME / yaml name, default os.Hostname()
	ConfigPath  string // --config / RELAY_CONFIG, "" when no file is used
	OwnerToken  string // --owner-token / RELAY_OWNER_TOKEN, or read from --owner-token-file / RELAY_OWNER_TOKEN_FILE; "" = generate
	MetricsAddr string // --metrics-addr / RELAY_METRICS_ADDR, "" = off
	// PublicURL is the base URL handed to agents and printed at start
	// (--public-url / RELAY_PUBLIC_URL); "" = the listen address, with an
	// unspecified host shown as 127.0.0.1 (R18.10).
	PublicURL string
	// RedisPassword is the Redis password read from --redis-password-file /
	// RELAY_REDIS_PASSWORD_FILE (R18.36), "" when none: the data nodes'
	// password of RedisURL, which then has none of its own.
	RedisPassword string
	// SecretFlags are the flags that carried a secret on the command line
	// (R18.36): "owner-token", "redis" (a URL with a password); each is
	// logged as a WARNING at start (CommandLineWarnings).
	SecretFlags []string
	// SecretFiles are the files the owner token and the Redis password were
	// read from (R18.36): a sandboxed agent never sees them (R18.31).
	SecretFiles []string

	Folders    []string   // yaml folders; default [home]; ~ expanded, Clean
	DefaultCwd string     // yaml default_cwd; default Folders[0]
	Providers  []Provider // yaml providers; "scripted" always present
	Repos      Repos      // yaml repos: repository sessions' clones (R24.4)
	Settings   Settings
	Timing     Timing
	Limits     Limits
	Notify     Notify // yaml notify: the owner's webhooks (R23.10)
}

// Provider is one entry of the YAML providers list (SPEC §11).
type Provider struct {
	ID           string            // id
	Name         string            // name; defaults to ID
	Type         string            // type: exec | openai | scripted | claude-code | codex | gemini-cli | acp
	Command      []string          // command (exec, acp; agent CLIs: binary and fixed leading args, default [claude] [codex] [gemini])
	Args         []string          // args (agent CLIs): extra arguments appended to every run
	Models       []string          // models
	DefaultModel string            // default_model; defaults to Models[0]
	Efforts      []string          // efforts
	BaseURL      string            // base_url (openai)
	APIKeyEnv    string            // api_key_env (openai): name of the env var holding the key
	MaxSteps     int               // max_steps (openai): model calls per turn; 0 = the provider's default (25)
	SystemPrompt string            // system_prompt (openai): optional first message of every turn
	SwitchTo     string            // switch_to: id of another provider
	MonthlyCap   float64           // monthly_cap: spending cap per calendar month (UTC) in CapUnit; 0 = none (R7.8)
	CapUnit      string            // cap_unit: usd | tokens; required with monthly_cap
	Env          map[string]string // env: extra environment for the provider
	// Claude (claude, exec and openai only): the provider's sessions are
	// Claude sessions (an exec command or an OpenAI-compatible endpoint that
	// runs Claude), so auto_compact_window and thinking_* apply to them as
	// to claude-code sessions (R7.10).
	Claude bool
	// CompactWindowZero (compact_window_zero): the provider declares its own
	// window semantics: the window takes effect and 0 means this many tokens
	// (a DeepSeek session: 400000); 0 = not declared.
	CompactWindowZero int
	// AlwaysThinks (always_thinks): the provider's model always thinks, so
	// thinking_enabled changes nothing (a DeepSeek session).
	AlwaysThinks bool
	// Sandbox (sandbox): SandboxBwrap runs each agent process and each of
	// its ACP terminals under bubblewrap (R18.31); "" or "none" = no sandbox.
	// Only for the types that run processes (RunsProcesses).
	Sandbox string
	// SandboxRW (sandbox_rw) and SandboxRO (sandbox_ro): paths mounted
	// writable and read-only inside the sandbox besides the session's folder
	// (e.g. the CLI's own config); absolute, ~ expanded; only with sandbox: bwrap.
	SandboxRW []string
	SandboxRO []string
	// User (user): the OS user (a name, or a numeric uid) every agent
	// process and every ACP terminal of the provider runs as (R18.26); ""
	// = the relay's own. Only for the types that run processes; the app
	// resolves it at start (exit 2 when it does not exist or the relay,
	// not root, cannot switch to it).
	User string
	// Billing (billing): how the provider's turns are paid, BillingSubscription
	// or BillingAPIKey; "" = not said. A send that switches to the provider
	// says it on its card (R24.6).
	Billing string
	// Repos (repos): the provider's sessions work on a repository (repo and
	// branch on create_session instead of cwd, R24.4); always for the id
	// ReposProviderID.
	Repos bool
}

// Billing words a provider may set (R24.6).
const (
	BillingSubscription = "subscription"
	BillingAPIKey       = "api_key"
)

// ReposProviderID is the seed's repository sessions' provider (Claude
// Cloud): it takes repositories whether or not it says repos (R24.4).
const ReposProviderID = "claude-cloud"

// Repos is where repository sessions' clones live (yaml repos:, R24.4).
type Repos struct {
	// BaseURL (base_url) resolves a repo given as owner/name: BaseURL/owner/name
	// (a URL or a local directory); "" = https://github.com.
	BaseURL string
	// Dir (dir) holds one clone per repository and the sessions' worktrees;
	// "" = DATA_DIR/repos.
	Dir string
}

// TakesRepos reports whether the provider's sessions work on a repository
// (R24.4): repos: true, or the id ReposProviderID.
func (p Provider) TakesRepos() bool { return p.Repos || p.ID == ReposProviderID }

// ReposDir is the folder of repository sessions' clones and worktrees:
// repos.dir, else "repos" in the data directory (R24.4).
func (c Config) ReposDir() string {
	if c.Repos.Dir != "" {
		return c.Repos.Dir
	}
	return filepath.Join(DataDir(c.DataDir), "repos")
}

// SandboxBwrap is the one sandbox a provider may set (R18.31): Debian's
// bubblewrap, found as bwrap on PATH.
const SandboxBwrap = "bwrap"

// Sandboxed reports whether the provider's processes run in the sandbox.
func (p Provider) Sandboxed() bool { return p.Sandbox == SandboxBwrap }

// RunsProcesses reports whether a provider type runs agent processes (exec,
// the agent CLIs, acp): the types a sandbox applies to.
func RunsProcesses(typ string) bool {
	return typ == TypeExec || typ == TypeACP || IsAgentCLI(typ)
}

// ClaudeSessions reports whether a provider's sessions are Claude sessions,
// to which auto_compact_window and thinking_* apply (R7.10): claude-code,
// and exec or openai providers marked claude.
func (p Provider) ClaudeSessions() bool { return p.Type == TypeClaudeCode || p.Claude }

// Settings are the owner's settings (yaml settings:), changeable at run time.
type Settings struct {
	AgentSessions      bool // agent_sessions, default false
	AcceptAgentPrompts bool // accept_agent_prompts, default true
	MaxWaitSeconds     int  // max_wait_seconds, default 600, 120–3600
	QuietTaskMinutes   int  // quiet_task_minutes, default 10, >= 1
	MaxTurnSeconds     int  // max_turn_seconds, default 3600, 1–86400
}

// Timing holds the timing constants (yaml timing:).
type Timing struct {
	Coalesce         time.Duration // coalesce, default 30s, >= 0
	WakeLimitPerHour int           // wake_limit_per_hour, default 20, >= 1
	WakeSummaryEvery time.Duration // wake_summary_every, default 10m
	StalledDefault   time.Duration // stalled_default, default 15m
	PeerPoll         time.Duration // peer_poll, default 3s
	AskPoll          time.Duration // ask_poll, default 5s
	AskPollOffline   time.Duration // ask_poll_offline, default 30s
	TaskOutputKept   time.Duration // task_output_kept, default 1h
	ReplayKeep       time.Duration // replay_keep, default 168h
	DefaultWait      time.Duration // default_wait, default 60s
	PeerTimeout      time.Duration // peer_timeout, default 10s
	AgentSilence     time.Duration // agent_silence, default 10m: an agent CLI silent this long is stopped (R17.5)
	// ACPIdle: an ACP agent's process is stopped when its session was idle
	// this long (acp_idle; 0 = the default, 10 min; R22.1).
	ACPIdle time.Duration
	// TurnLogEvery: a turn still running logs one INFO line this often
	// (turn_log_every, default 5m; 0 = the default; at least 1s; R25.2).
	TurnLogEvery time.Duration
}

// Limits holds the counting limits (yaml limits:); each is >= 1.
type Limits struct {
	ActiveSessions               int // active_sessions, default 4
	SubscriptionsPerConversation int // subscriptions_per_conversation, default 20
	AgentPromptsBeforeCard       int // agent_prompts_before_card, default 30
	SchedulesIntoConversation    int // schedules_into_conversation, default 20
	SchedulesForOthers           int // schedules_for_others, default 20
	OpenAsksPerConversation      int // open_asks_per_conversation, default 20
	OpenAsksPerSession           int // open_asks_per_session, default 20
	ReplayEvents                 int // replay_events, default 500
	Hops                         int // hops, default 2
	// DirectStarts is how many drains a serve process starts itself at once
	// for prompts whose caller waits (direct_starts, default 64; 0: every
	// prompt goes through the queue, so agents run only where queue workers
	// take it).
	DirectStarts int
	// ActiveSessionsPerPeerToken: the sessions one paired relay's
	// conversations started here (all of them together, per peer token) that
	// may be at work at once (active_sessions_per_peer_token, default 16, R18.21).
	ActiveSessionsPerPeerToken int
}

// Environment variable names (SPEC §2).
const (
	EnvAddr       = "RELAY_ADDR"
	EnvRedis      = "REDIS_URL"
	EnvName       = "RELAY_NAME"
	EnvConfig     = "RELAY_CONFIG"
	EnvOwnerToken = "RELAY_OWNER_TOKEN"
	// MinOwnerTokenLen is the shortest owner token the relay accepts (R18.8).
	MinOwnerTokenLen = 16
	EnvMetricsAddr   = "RELAY_METRICS_ADDR"
	EnvPublicURL     = "RELAY_PUBLIC_URL"
	EnvDataDir       = "RELAY_DATA_DIR"
	// EnvOwnerTokenFile and EnvRedisPasswordFile name files holding the
	// owner token and the Redis password, which keeps them off the command
	// line (R18.36).
	EnvOwnerTokenFile    = "RELAY_OWNER_TOKEN_FILE"
	EnvRedisPasswordFile = "RELAY_REDIS_PASSWORD_FILE"
)

// DefaultAddr is the default listen address.
const DefaultAddr = "127.0.0.1:7420"

// Provider types.
const (
	TypeExec     = "exec"
	TypeOpenAI   = "openai"
	TypeScripted = "scripted"
	// Agent CLIs (R17.1).
	TypeClaudeCode = "claude-code"
	TypeCodex      = "codex"
	TypeGeminiCLI  = "gemini-cli"
	// TypeACP is any agent speaking the Agent Client Protocol on stdio (R22.1).
	TypeACP = "acp"
)

// IsAgentCLI reports whether a provider type is an agent CLI (R17.1).
func IsAgentCLI(typ string) bool {
	return typ == TypeClaudeCode || typ == TypeCodex || typ == TypeGeminiCLI
}

// ScriptedID is the id of the always-present scripted provider.
const ScriptedID = "scripted"

// Units of a provider's monthly_cap (R7.8).
const (
	CapUSD    = "usd"
	CapTokens = "tokens"
)

// Provider returns the provider with the given id.
func (c Config) Provider(id string) (Provider, bool) {
	for _, p := range c.Providers {
		if p.ID == id {
			return p, true
		}
	}
	return Provider{}, false
}
