// Package config builds the relay's configuration from defaults, the optional
// YAML file (SPEC §14), the environment and the command-line flags (SPEC §2),
// in that order of precedence, and validates the result.
//
// Every error this package returns is one line. Problems with the YAML file
// start with "config FILE: " (FILE as given), everything else with "config: ".
package config

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/oar/relay/redisurl"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
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

// ScriptedProvider returns the built-in scripted provider (SPEC R11.1).
func ScriptedProvider() Provider {
	return Provider{
		ID:           ScriptedID,
		Name:         "Scripted",
		Type:         TypeScripted,
		Models:       []string{"scripted-1"},
		DefaultModel: "scripted-1",
		Efforts:      []string{"low", "medium", "high"},
	}
}

// Default returns the configuration with every default applied: Name is the
// host name ("relay" if it cannot be read), Folders is the user's home
// directory (empty if it cannot be determined, which Validate rejects) and
// Providers holds only the scripted provider.
func Default() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "relay"
	}
	var folders []string
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		folders = []string{filepath.Clean(home)}
	}
	c := Config{
		Addr:      DefaultAddr,
		DataDir:   DefaultDataDir(),
		Name:      name,
		Folders:   folders,
		Providers: []Provider{ScriptedProvider()},
		Settings: Settings{
			AgentSessions:      false,
			AcceptAgentPrompts: true,
			MaxWaitSeconds:     600,
			QuietTaskMinutes:   10,
			MaxTurnSeconds:     3600,
		},
		Timing: Timing{
			Coalesce:         30 * time.Second,
			WakeLimitPerHour: 20,
			WakeSummaryEvery: 10 * time.Minute,
			StalledDefault:   15 * time.Minute,
			PeerPoll:         3 * time.Second,
			AskPoll:          5 * time.Second,
			AskPollOffline:   30 * time.Second,
			TaskOutputKept:   time.Hour,
			ReplayKeep:       168 * time.Hour,
			DefaultWait:      60 * time.Second,
			PeerTimeout:      10 * time.Second,
			AgentSilence:     10 * time.Minute,
			TurnLogEvery:     5 * time.Minute,
		},
		Limits: Limits{
			ActiveSessions:               4,
			ActiveSessionsPerPeerToken:   16,
			SubscriptionsPerConversation: 20,
			AgentPromptsBeforeCard:       30,
			SchedulesIntoConversation:    20,
			SchedulesForOthers:           20,
			OpenAsksPerConversation:      20,
			OpenAsksPerSession:           20,
			ReplayEvents:                 500,
			Hops:                         2,
			DirectStarts:                 64,
		},
	}
	if len(folders) > 0 {
		c.DefaultCwd = folders[0]
	}
	return c
}

// flagEnv maps each flag name (without dashes) to its environment variable.
var flagEnv = []struct{ flag, env string }{
	{"addr", EnvAddr},
	{"redis", EnvRedis},
	{"name", EnvName},
	{"config", EnvConfig},
	{"owner-token", EnvOwnerToken},
	{"owner-token-file", EnvOwnerTokenFile},
	{"redis-password-file", EnvRedisPasswordFile},
	{"metrics-addr", EnvMetricsAddr},
	{"public-url", EnvPublicURL},
	{"data-dir", EnvDataDir},
}

// Load builds the configuration with precedence defaults < YAML file <
// environment < flags, fills derived defaults and validates the result.
//
// flags holds only the flags the user set explicitly, keyed by flag name
// without dashes ("addr", "redis", "name", "config", "owner-token",
// "metrics-addr"); an explicitly set flag wins even when it is empty. env is
// a lookup such as os.LookupEnv; an environment variable set to "" counts as
// unset. The YAML file is flags["config"], else RELAY_CONFIG, else none.
// The owner token and the Redis password may come from files
// (owner-token-file, redis-password-file and their variables: readSecrets).
func Load(flags map[string]string, env func(string) (string, bool)) (Config, error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	for k := range flags {
		if !knownFlag(k) {
			return Config{}, fmt.Errorf("config: unknown flag %q", k)
		}
	}
	c := Default()

	// The file path itself: flag, else environment.
	if v, ok := flags["config"]; ok {
		c.ConfigPath = v
	} else if v, ok := env(EnvConfig); ok && v != "" {
		c.ConfigPath = v
	}
	if c.ConfigPath != "" {
		homeCwd := c.DefaultCwd
		if err := loadFile(&c, c.ConfigPath); err != nil {
			return Config{}, err
		}
		// folders without default_cwd: the default folder is the first of
		// them, not the home directory the defaults started from.
		if c.DefaultCwd == homeCwd && !Inside(c.Folders, c.DefaultCwd) {
			c.DefaultCwd = ""
		}
	}

	targets := map[string]*string{
		"addr":         &c.Addr,
		"redis":        &c.RedisURL,
		"name":         &c.Name,
		"owner-token":  &c.OwnerToken,
		"metrics-addr": &c.MetricsAddr,
		"public-url":   &c.PublicURL,
		"data-dir":     &c.DataDir,
	}
	for _, fe := range flagEnv {
		p, ok := targets[fe.flag]
		if !ok {
			continue // config: handled above; the secret files: readSecrets
		}
		if v, ok := env(fe.env); ok && v != "" {
			*p = v
		}
		if v, ok := flags[fe.flag]; ok {
			*p = v
		}
	}
	if err := c.readSecrets(flags, env); err != nil {
		return Config{}, err
	}

	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func knownFlag(k string) bool {
	for _, fe := range flagEnv {
		if fe.flag == k {
			return true
		}
	}
	return false
}

// fillDefaults applies the defaults that depend on other values.
func (c *Config) fillDefaults() {
	c.DataDir = DataDir(c.DataDir)
	if c.DefaultCwd == "" && len(c.Folders) > 0 {
		c.DefaultCwd = c.Folders[0]
	}
	hasScripted := false
	for i := range c.Providers {
		p := &c.Providers[i]
		if p.ID == ScriptedID {
			hasScripted = true
			// A configured scripted provider keeps what it sets and takes
			// the rest from the built-in one.
			b := ScriptedProvider()
			if p.Type == "" {
				p.Type = b.Type
			}
			if p.Name == "" {
				p.Name = b.Name
			}
			if len(p.Models) == 0 {
				p.Models = b.Models
				if p.DefaultModel == "" {
					p.DefaultModel = b.DefaultModel
				}
			}
			if len(p.Efforts) == 0 {
				p.Efforts = b.Efforts
			}
		}
		if p.Name == "" {
			p.Name = p.ID
		}
		if p.DefaultModel == "" && len(p.Models) > 0 {
			p.DefaultModel = p.Models[0]
		}
	}
	if !hasScripted {
		c.Providers = append(c.Providers, ScriptedProvider())
	}
}

// Provider returns the provider with the given id.
func (c Config) Provider(id string) (Provider, bool) {
	for _, p := range c.Providers {
		if p.ID == id {
			return p, true
		}
	}
	return Provider{}, false
}

// InsideResolved is Inside after resolving symbolic links on both sides
// (R18.3): it returns dir resolved, or an error when dir cannot be resolved
// (it does not exist). A folder that cannot be resolved is compared as given.
func InsideResolved(folders []string, dir string) (string, bool, error) {
	return InsideReal(ResolveFolders(folders), dir)
}

// ResolveFolders resolves the symbolic links of folders (InsideResolved); a
// folder that cannot be resolved stays as given, cleaned; empty ones are left out.
func ResolveFolders(folders []string) []string {
	real := make([]string, 0, len(folders))
	for _, f := range folders {
		if f == "" {
			continue
		}
		if rf, err := filepath.EvalSymlinks(f); err == nil {
			real = append(real, rf)
		} else {
			real = append(real, filepath.Clean(f))
		}
	}
	return real
}

// InsideReal is InsideResolved with the folders resolved already (ResolveFolders).
func InsideReal(real []string, dir string) (string, bool, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false, err
	}
	return resolved, Inside(real, resolved), nil
}

// HasDotDot reports whether a path names a ".." element.
func HasDotDot(p string) bool {
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// Inside reports whether dir equals or lies below one of folders. Both sides
// are compared lexically after filepath.Clean (no symlinks are resolved);
// "/a/bc" is not inside "/a/b". Empty strings never match.
func Inside(folders []string, dir string) bool {
	if dir == "" {
		return false
	}
	d := filepath.Clean(dir)
	for _, f := range folders {
		if f == "" {
			continue
		}
		f = filepath.Clean(f)
		if d == f {
			return true
		}
		prefix := f
		if !strings.HasSuffix(prefix, string(filepath.Separator)) {
			prefix += string(filepath.Separator)
		}
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}

var providerIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// envNameRe is a portable environment variable name (api_key_env).
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the configuration and returns the first problem as a
// one-line error starting with "config: " that names the bad field.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Name) == "" {
		return errors.New("config: name must not be empty")
	}
	if err := checkHostPort("addr", c.Addr); err != nil {
		return err
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("config: public-url must be a base URL like https://relay.example.com or http://10.0.0.5:7420 (got %q)", c.PublicURL)
		}
	}
	if c.MetricsAddr != "" {
		if err := checkHostPort("metrics-addr", c.MetricsAddr); err != nil {
			return err
		}
	}
	if c.OwnerToken != "" && len(c.OwnerToken) < MinOwnerTokenLen {
		return fmt.Errorf("config: the owner token must have at least %d characters (got %d); leave it unset to have one generated", MinOwnerTokenLen, len(c.OwnerToken))
	}
	if c.RedisURL != "" {
		if _, err := redisurl.Parse(c.RedisURL); err != nil {
			return fmt.Errorf("config: redis: %w", err)
		}
	}

	if c.Repos.Dir != "" && !filepath.IsAbs(c.Repos.Dir) {
		return fmt.Errorf("config: repos.dir must be an absolute path (got %q)", c.Repos.Dir)
	}
	if len(c.Folders) == 0 {
		return errors.New("config: folders must name at least one folder")
	}
	for i, f := range c.Folders {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("config: folders[%d] must be an absolute path (got %q)", i, f)
		}
	}
	if !filepath.IsAbs(c.DefaultCwd) {
		return fmt.Errorf("config: default_cwd must be an absolute path (got %q)", c.DefaultCwd)
	}
	if !Inside(c.Folders, c.DefaultCwd) {
		return fmt.Errorf("config: default_cwd must lie inside one of the folders (got %q)", c.DefaultCwd)
	}

	if err := c.validateProviders(); err != nil {
		return err
	}

	s := c.Settings
	if s.MaxWaitSeconds < 120 || s.MaxWaitSeconds > 3600 {
		return fmt.Errorf("config: settings.max_wait_seconds must be between 120 and 3600 (got %d)", s.MaxWaitSeconds)
	}
	if s.QuietTaskMinutes > 1440 {
		return fmt.Errorf("config: settings.quiet_task_minutes must be between 1 and 1440 (got %d)", s.QuietTaskMinutes)
	}
	if err := atLeastOne("settings.quiet_task_minutes", s.QuietTaskMinutes); err != nil {
		return err
	}
	if s.MaxTurnSeconds > 86400 {
		return fmt.Errorf("config: settings.max_turn_seconds must be between 1 and 86400 (got %d)", s.MaxTurnSeconds)
	}
	if err := atLeastOne("settings.max_turn_seconds", s.MaxTurnSeconds); err != nil {
		return err
	}

	t := c.Timing
	if t.Coalesce < 0 {
		return fmt.Errorf("config: timing.coalesce must not be negative (got %s)", t.Coalesce)
	}
	if err := atLeastOne("timing.wake_limit_per_hour", t.WakeLimitPerHour); err != nil {
		return err
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"timing.wake_summary_every", t.WakeSummaryEvery},
		{"timing.stalled_default", t.StalledDefault},
		{"timing.peer_poll", t.PeerPoll},
		{"timing.ask_poll", t.AskPoll},
		{"timing.ask_poll_offline", t.AskPollOffline},
		{"timing.task_output_kept", t.TaskOutputKept},
		{"timing.replay_keep", t.ReplayKeep},
		{"timing.default_wait", t.DefaultWait},
		{"timing.peer_timeout", t.PeerTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("config: %s must be greater than 0 (got %s)", d.key, d.v)
		}
	}

	if t.AgentSilence < 0 { // 0 = the default (10 min)
		return fmt.Errorf("config: timing.agent_silence must not be negative (got %s)", t.AgentSilence)
	}
	if t.ACPIdle < 0 { // 0 = the default (10 min)
		return fmt.Errorf("config: timing.acp_idle must not be negative (got %s)", t.ACPIdle)
	}
	if t.TurnLogEvery != 0 && t.TurnLogEvery < time.Second { // 0 = the default (5 min)
		return fmt.Errorf("config: timing.turn_log_every must be at least 1s (got %s)", t.TurnLogEvery)
	}

	l := c.Limits
	for _, n := range []struct {
		key string
		v   int
	}{
		{"limits.active_sessions", l.ActiveSessions},
		{"limits.active_sessions_per_peer_token", l.ActiveSessionsPerPeerToken},
		{"limits.subscriptions_per_conversation", l.SubscriptionsPerConversation},
		{"limits.agent_prompts_before_card", l.AgentPromptsBeforeCard},
		{"limits.schedules_into_conversation", l.SchedulesIntoConversation},
		{"limits.schedules_for_others", l.SchedulesForOthers},
		{"limits.open_asks_per_conversation", l.OpenAsksPerConversation},
		{"limits.open_asks_per_session", l.OpenAsksPerSession},
		{"limits.replay_events", l.ReplayEvents},
		{"limits.hops", l.Hops},
	} {
		if err := atLeastOne(n.key, n.v); err != nil {
			return err
		}
	}
	if l.DirectStarts < 0 {
		return fmt.Errorf("config: limits.direct_starts must be 0 (off) or more (got %d)", l.DirectStarts)
	}
	return c.Notify.validate()
}

func (c Config) validateProviders() error {
	seen := map[string]int{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		if p.ID == "" {
			return fmt.Errorf("config: %s.id must not be empty", at)
		}
		if !providerIDRe.MatchString(p.ID) {
			return fmt.Errorf("config: %s.id must match %s (got %q)", at, providerIDRe, p.ID)
		}
		if j, dup := seen[p.ID]; dup {
			return fmt.Errorf("config: %s.id %q is already used by providers[%d]", at, p.ID, j)
		}
		seen[p.ID] = i
	}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		switch p.Type {
		case TypeExec, TypeOpenAI, TypeScripted, TypeClaudeCode, TypeCodex, TypeGeminiCLI, TypeACP:
		default:
			return fmt.Errorf("config: %s.type must be one of exec, openai, scripted, claude-code, codex, gemini-cli, acp (got %q)", at, p.Type)
		}
		if p.Type == TypeACP && (len(p.Command) == 0 || p.Command[0] == "") {
			return fmt.Errorf("config: %s.command must name the ACP agent's binary and its arguments for type acp (e.g. [gemini, --acp])", at)
		}
		if len(p.Args) > 0 && !IsAgentCLI(p.Type) {
			return fmt.Errorf("config: %s.args is only for the agent CLI types claude-code, codex, gemini-cli (got type %q)", at, p.Type)
		}
		if IsAgentCLI(p.Type) && len(p.Command) > 0 && p.Command[0] == "" {
			return fmt.Errorf("config: %s.command[0] must name the %s binary (or leave command out for the default)", at, p.Type)
		}
		if p.ID == ScriptedID && p.Type != TypeScripted {
			return fmt.Errorf("config: %s.type must be \"scripted\" for id \"scripted\" (got %q)", at, p.Type)
		}
		if p.Type == TypeExec && (len(p.Command) == 0 || p.Command[0] == "") {
			return fmt.Errorf("config: %s.command must not be empty for type exec", at)
		}
		if p.Type == TypeOpenAI {
			if p.BaseURL == "" {
				return fmt.Errorf("config: %s.base_url is required for type openai", at)
			}
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("config: %s.base_url must be an http or https URL (got %q)", at, p.BaseURL)
			}
			if u.User != nil {
				return fmt.Errorf("config: %s.base_url must not carry a user or password; put the key in the environment variable named by api_key_env", at)
			}
			if p.APIKeyEnv != "" && !envNameRe.MatchString(p.APIKeyEnv) {
				return fmt.Errorf("config: %s.api_key_env must be the name of an environment variable, like OPENAI_API_KEY (got %q; the key itself belongs in that variable, never in the file)", at, p.APIKeyEnv)
			}
			if p.MaxSteps < 0 || p.MaxSteps > 1000 {
				return fmt.Errorf("config: %s.max_steps must be between 1 and 1000 (got %d; leave it out for 25)", at, p.MaxSteps)
			}
		} else {
			for _, k := range []struct {
				key string
				set bool
			}{{"base_url", p.BaseURL != ""}, {"api_key_env", p.APIKeyEnv != ""}, {"max_steps", p.MaxSteps != 0}, {"system_prompt", p.SystemPrompt != ""}} {
				if k.set {
					return fmt.Errorf("config: %s.%s applies only to type openai (this provider is type %s)", at, k.key, p.Type)
				}
			}
		}
		for j, m := range p.Models {
			if m == "" {
				return fmt.Errorf("config: %s.models[%d] must not be empty", at, j)
			}
		}
		if p.DefaultModel != "" && len(p.Models) > 0 && !contains(p.Models, p.DefaultModel) {
			return fmt.Errorf("config: %s.default_model must be one of %s (got %q)", at, strings.Join(p.Models, ", "), p.DefaultModel)
		}
		if p.SwitchTo != "" {
			if _, ok := seen[p.SwitchTo]; !ok || p.SwitchTo == p.ID {
				return fmt.Errorf("config: %s.switch_to must name another configured provider (got %q)", at, p.SwitchTo)
			}
		}
		if err := checkCap(at, p); err != nil {
			return err
		}
		if p.Billing != "" && p.Billing != BillingSubscription && p.Billing != BillingAPIKey {
			return fmt.Errorf("config: %s.billing must be subscription or api_key (got %q)", at, p.Billing)
		}
		if p.Claude && p.Type != TypeExec && p.Type != TypeOpenAI {
			return fmt.Errorf("config: %s.claude applies only to types exec and openai (this provider is type %s)", at, p.Type)
		}
		if p.CompactWindowZero < 0 {
			return fmt.Errorf("config: %s.compact_window_zero must be a number of tokens above 0 (got %d; leave it out when the provider declares none)", at, p.CompactWindowZero)
		}
		if p.ClaudeSessions() && (p.CompactWindowZero > 0 || p.AlwaysThinks) {
			return fmt.Errorf("config: %s.compact_window_zero and always_thinks are for providers whose sessions are not Claude sessions (this one's are)", at)
		}
		for k := range p.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return fmt.Errorf("config: %s.env has an invalid variable name %q", at, k)
			}
		}
		if err := checkSandbox(at, p); err != nil {
			return err
		}
		if err := checkUser(at, p); err != nil {
			return err
		}
	}
	return nil
}

// checkSandbox validates sandbox, sandbox_rw and sandbox_ro (R18.31).
func checkSandbox(at string, p Provider) error {
	switch p.Sandbox {
	case "", "none":
		if len(p.SandboxRW) > 0 || len(p.SandboxRO) > 0 {
			return fmt.Errorf("config: %s.sandbox_rw and sandbox_ro apply only with sandbox: bwrap", at)
		}
		return nil
	case SandboxBwrap:
	default:
		return fmt.Errorf("config: %s.sandbox must be bwrap or none (got %q)", at, p.Sandbox)
	}
	if !RunsProcesses(p.Type) {
		return fmt.Errorf("config: %s.sandbox applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type %s runs none", at, p.Type)
	}
	for _, l := range []struct {
		key   string
		paths []string
	}{{"sandbox_rw", p.SandboxRW}, {"sandbox_ro", p.SandboxRO}} {
		for j, path := range l.paths {
			if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
				return fmt.Errorf("config: %s.%s[%d] must be an absolute path (got %q)", at, l.key, j, path)
			}
			if filepath.Clean(path) == "/" {
				return fmt.Errorf("config: %s.%s[%d] must not be / (the whole file system is already read-only in the sandbox; name the paths the agent needs)", at, l.key, j)
			}
		}
	}
	return nil
}

// checkUser validates user (R18.26): a user name or a numeric uid, only on
// the types that run processes. Whether it exists is checked at start.
func checkUser(at string, p Provider) error {
	if p.User == "" {
		return nil
	}
	if !RunsProcesses(p.Type) {
		return fmt.Errorf("config: %s.user applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type %s runs none", at, p.Type)
	}
	if !userRe.MatchString(p.User) {
		return fmt.Errorf("config: %s.user must be a user name or a numeric uid (got %q)", at, p.User)
	}
	return nil
}

// userRe is a user name (POSIX portable characters, as useradd takes them)
// or a uid.
var userRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?$`)

// Units of a provider's monthly_cap (R7.8).
const (
	CapUSD    = "usd"
	CapTokens = "tokens"
)

// checkCap validates monthly_cap and cap_unit (R7.8): a cap needs its unit;
// a cost in USD is only reported by the agent CLIs.
func checkCap(at string, p Provider) error {
	if p.MonthlyCap == 0 && p.CapUnit == "" {
		return nil
	}
	if p.MonthlyCap <= 0 || math.IsNaN(p.MonthlyCap) || math.IsInf(p.MonthlyCap, 0) {
		return fmt.Errorf("config: %s.monthly_cap must be a number above 0 (got %v; leave it out for no cap)", at, p.MonthlyCap)
	}
	switch p.CapUnit {
	case CapTokens:
	case CapUSD:
		if !IsAgentCLI(p.Type) {
			return fmt.Errorf("config: %s.cap_unit usd needs a provider that reports its cost (claude-code, codex, gemini-cli); type %s counts tokens only: use cap_unit: tokens", at, p.Type)
		}
	default:
		return fmt.Errorf("config: %s.cap_unit must be usd or tokens with monthly_cap (got %q)", at, p.CapUnit)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func atLeastOne(key string, v int) error {
	if v < 1 {
		return fmt.Errorf("config: %s must be at least 1 (got %d)", key, v)
	}
	return nil
}

func checkHostPort(key, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("config: %s must be host:port (got %q)", key, addr)
	}
	return nil
}

// ---- the YAML file ----

// fileDecoder reads one YAML file into a Config, walking the yaml.Node tree so
// that unknown keys, duplicates and wrong types are reported with their path
// and line.
type fileDecoder struct {
	path string // the file as given, for messages
	home string // for ~ expansion, "" when unknown
	// offered, when set, collects the key of every field table mapping() is
	// given, as a path (Keys lists the file's keys this way).
	offered *[]string
}

type field struct {
	key string
	set func(path string, v *yaml.Node) error
}

func loadFile(c *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("config %s: file not found", path)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("config %s: cannot read: %w", path, err)
	}
	d := &fileDecoder{path: path}
	if home, err := os.UserHomeDir(); err == nil {
		d.home = home
	}
	return d.decode(c, data)
}

func (d *fileDecoder) decode(c *Config, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: all defaults
		}
		return d.syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("config %s: more than one YAML document (line %d)", d.path, extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return d.syntax(err)
	}

	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: the file must be a mapping of keys (line %d, got %s)", d.path, root.Line, describe(root))
	}
	return d.mapping(root, "", []field{
		{"name", d.str(&c.Name)},
		{"folders", d.paths(&c.Folders)},
		{"default_cwd", d.path1(&c.DefaultCwd)},
		{"providers", d.providers(&c.Providers)},
		{"repos", d.section([]field{
			{"base_url", d.str(&c.Repos.BaseURL)},
			{"dir", d.path1(&c.Repos.Dir)},
		})},
		{"settings", d.section([]field{
			{"agent_sessions", d.boolean(&c.Settings.AgentSessions)},
			{"accept_agent_prompts", d.boolean(&c.Settings.AcceptAgentPrompts)},
			{"max_wait_seconds", d.integer(&c.Settings.MaxWaitSeconds)},
			{"quiet_task_minutes", d.integer(&c.Settings.QuietTaskMinutes)},
			{"max_turn_seconds", d.integer(&c.Settings.MaxTurnSeconds)},
		})},
		{"timing", d.section([]field{
			{"coalesce", d.duration(&c.Timing.Coalesce)},
			{"wake_limit_per_hour", d.integer(&c.Timing.WakeLimitPerHour)},
			{"wake_summary_every", d.duration(&c.Timing.WakeSummaryEvery)},
			{"stalled_default", d.duration(&c.Timing.StalledDefault)},
			{"peer_poll", d.duration(&c.Timing.PeerPoll)},
			{"ask_poll", d.duration(&c.Timing.AskPoll)},
			{"ask_poll_offline", d.duration(&c.Timing.AskPollOffline)},
			{"task_output_kept", d.duration(&c.Timing.TaskOutputKept)},
			{"replay_keep", d.duration(&c.Timing.ReplayKeep)},
			{"default_wait", d.duration(&c.Timing.DefaultWait)},
			{"peer_timeout", d.duration(&c.Timing.PeerTimeout)},
			{"agent_silence", d.duration(&c.Timing.AgentSilence)},
			{"acp_idle", d.duration(&c.Timing.ACPIdle)},
			{"turn_log_every", d.duration(&c.Timing.TurnLogEvery)},
		})},
		{"limits", d.section([]field{
			{"active_sessions", d.integer(&c.Limits.ActiveSessions)},
			{"active_sessions_per_peer_token", d.integer(&c.Limits.ActiveSessionsPerPeerToken)},
			{"subscriptions_per_conversation", d.integer(&c.Limits.SubscriptionsPerConversation)},
			{"agent_prompts_before_card", d.integer(&c.Limits.AgentPromptsBeforeCard)},
			{"schedules_into_conversation", d.integer(&c.Limits.SchedulesIntoConversation)},
			{"schedules_for_others", d.integer(&c.Limits.SchedulesForOthers)},
			{"open_asks_per_conversation", d.integer(&c.Limits.OpenAsksPerConversation)},
			{"open_asks_per_session", d.integer(&c.Limits.OpenAsksPerSession)},
			{"replay_events", d.integer(&c.Limits.ReplayEvents)},
			{"hops", d.integer(&c.Limits.Hops)},
			{"direct_starts", d.integer(&c.Limits.DirectStarts)},
		})},
		{"notify", d.section([]field{
			{"webhooks", d.webhooks(&c.Notify.Webhooks)},
		})},
	})
}

func (d *fileDecoder) syntax(err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return fmt.Errorf("config %s: %s", d.path, msg)
}

// mapping walks a mapping node: every key must be one of fields, at most once.
// Keys whose value is null are treated as absent.
func (d *fileDecoder) mapping(n *yaml.Node, prefix string, fields []field) error {
	if d.offered != nil {
		for _, f := range fields {
			*d.offered = append(*d.offered, strings.TrimPrefix(prefix+"."+f.key, "."))
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		var f *field
		for j := range fields {
			if fields[j].key == k.Value {
				f = &fields[j]
				break
			}
		}
		if f == nil {
			return fmt.Errorf("config %s: unknown key %q (line %d); did you mean %q?", d.path, path, k.Line, nearest(k.Value, fields))
		}
		if line, dup := seen[k.Value]; dup {
			return fmt.Errorf("config %s: duplicate key %q (line %d, first at line %d)", d.path, path, k.Line, line)
		}
		seen[k.Value] = k.Line
		if isNull(v) {
			continue
		}
		if err := f.set(path, v); err != nil {
			return err
		}
	}
	return nil
}

// nearest returns the known key closest to key by Levenshtein distance
// (case-insensitive); ties go to the key listed first.
func nearest(key string, fields []field) string {
	best, bestD := "", -1
	lk := strings.ToLower(key)
	for _, f := range fields {
		dist := levenshtein.ComputeDistance(lk, f.key)
		if bestD < 0 || dist < bestD {
			best, bestD = f.key, dist
		}
	}
	return best
}

func (d *fileDecoder) typeErr(path string, v *yaml.Node, want string) error {
	return fmt.Errorf("config %s: %s must be %s (line %d, got %s)", d.path, path, want, v.Line, describe(v))
}

func (d *fileDecoder) section(fields []field) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		if v.Kind != yaml.MappingNode {
			return d.typeErr(path, v, "a mapping")
		}
		return d.mapping(v, path, fields)
	}
}

func (d *fileDecoder) str(p *string) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		s, err := d.scalar(path, v)
		if err != nil {
			return err
		}
		*p = s
		return nil
	}
}

func (d *fileDecoder) scalar(path string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode || isNull(v) || v.Tag == "!!binary" {
		return "", d.typeErr(path, v, "a string")
	}
	return v.Value, nil
}

func (d *fileDecoder) strList(path string, v *yaml.Node) ([]string, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, d.typeErr(path, v, "a list of strings")
	}
	out := make([]string, 0, len(v.Content))
	for i, item := range v.Content {
		s, err := d.scalar(fmt.Sprintf("%s[%d]", path, i), resolve(item))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (d *fileDecoder) strs(p *[]string) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		l, err := d.strList(path, v)
		if err != nil {
			return err
		}
		*p = l
		return nil
	}
}

// expand turns a leading "~" or "~/" into the home directory and cleans the
// path. Relative paths stay relative (Validate rejects them).
func (d *fileDecoder) expand(path string, v *yaml.Node, s string) (string, error) {
	if s == "~" || strings.HasPrefix(s, "~/") {
		if d.home == "" {
			return "", fmt.Errorf("config %s: %s cannot expand \"~\": home directory unknown (line %d)", d.path, path, v.Line)
		}
		s = filepath.Join(d.home, s[1:])
	}
	if s == "" {
		return s, nil
	}
	return filepath.Clean(s), nil
}

func (d *fileDecoder) paths(p *[]string) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		if v.Kind == yaml.SequenceNode {
			for i, item := range v.Content {
				if item = resolve(item); isNull(item) && item.Value == "~" {
					return fmt.Errorf("config %s: %s[%d] must be a string (line %d, got null; write \"~\" in quotes for the home directory)", d.path, path, i, item.Line)
				}
			}
		}
		l, err := d.strList(path, v)
		if err != nil {
			return err
		}
		for i := range l {
			if l[i], err = d.expand(fmt.Sprintf("%s[%d]", path, i), resolve(v.Content[i]), l[i]); err != nil {
				return err
			}
		}
		*p = l
		return nil
	}
}

func (d *fileDecoder) path1(p *string) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		s, err := d.scalar(path, v)
		if err != nil {
			return err
		}
		if s, err = d.expand(path, v, s); err != nil {
			return err
		}
		*p = s
		return nil
	}
}

func (d *fileDecoder) integer(p *int) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		var n int
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&n) != nil {
			return d.typeErr(path, v, "an integer")
		}
		*p = n
		return nil
	}
}

func (d *fileDecoder) number(p *float64) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		var n float64
		if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || v.Decode(&n) != nil {
			return d.typeErr(path, v, "a number")
		}
		*p = n
		return nil
	}
}

func (d *fileDecoder) boolean(p *bool) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		var b bool
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
			return d.typeErr(path, v, "true or false")
		}
		*p = b
		return nil
	}
}

func (d *fileDecoder) duration(p *time.Duration) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		if v.Kind != yaml.ScalarNode {
			return d.typeErr(path, v, `a duration like "30s"`)
		}
		dur, err := time.ParseDuration(v.Value)
		if err != nil {
			return d.typeErr(path, v, `a duration like "30s"`)
		}
		*p = dur
		return nil
	}
}

func (d *fileDecoder) strMap(p *map[string]string) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		if v.Kind != yaml.MappingNode {
			return d.typeErr(path, v, "a mapping of strings")
		}
		m := make(map[string]string, len(v.Content)/2)
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], resolve(v.Content[i+1])
			kp := path + "." + k.Value
			if _, dup := m[k.Value]; dup {
				return fmt.Errorf("config %s: duplicate key %q (line %d)", d.path, kp, k.Line)
			}
			s, err := d.scalar(kp, val)
			if err != nil {
				return err
			}
			m[k.Value] = s
		}
		*p = m
		return nil
	}
}

// mappings decodes a list of mappings into *p, each by fields (what the
// list is, for errors: "a list of providers").
func mappings[T any](d *fileDecoder, p *[]T, what string, fields func(*T) []field) func(string, *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		if v.Kind != yaml.SequenceNode {
			return d.typeErr(path, v, what)
		}
		out := make([]T, len(v.Content))
		for i, item := range v.Content {
			item = resolve(item)
			at := fmt.Sprintf("%s[%d]", path, i)
			if item.Kind != yaml.MappingNode {
				return d.typeErr(at, item, "a mapping")
			}
			if err := d.mapping(item, at, fields(&out[i])); err != nil {
				return err
			}
		}
		*p = out
		return nil
	}
}

func (d *fileDecoder) providers(p *[]Provider) func(string, *yaml.Node) error {
	return mappings(d, p, "a list of providers", func(pr *Provider) []field {
		return []field{
			{"id", d.str(&pr.ID)},
			{"name", d.str(&pr.Name)},
			{"type", d.str(&pr.Type)},
			{"command", d.strs(&pr.Command)},
			{"args", d.strs(&pr.Args)},
			{"models", d.strs(&pr.Models)},
			{"default_model", d.str(&pr.DefaultModel)},
			{"efforts", d.strs(&pr.Efforts)},
			{"base_url", d.str(&pr.BaseURL)},
			{"api_key_env", d.str(&pr.APIKeyEnv)},
			{"max_steps", d.integer(&pr.MaxSteps)},
			{"system_prompt", d.str(&pr.SystemPrompt)},
			{"switch_to", d.str(&pr.SwitchTo)},
			{"billing", d.str(&pr.Billing)},
			{"repos", d.boolean(&pr.Repos)},
			{"monthly_cap", d.number(&pr.MonthlyCap)},
			{"cap_unit", d.str(&pr.CapUnit)},
			{"env", d.strMap(&pr.Env)},
			{"claude", d.boolean(&pr.Claude)},
			{"compact_window_zero", d.integer(&pr.CompactWindowZero)},
			{"always_thinks", d.boolean(&pr.AlwaysThinks)},
			{"sandbox", d.str(&pr.Sandbox)},
			{"sandbox_rw", d.paths(&pr.SandboxRW)},
			{"sandbox_ro", d.paths(&pr.SandboxRO)},
			{"user", d.str(&pr.User)},
		}
	})
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}

// DataDir is the data directory v names: DefaultDataDir() for "", a leading
// "~" expanded to the home directory (serve and `relay export` alike).
func DataDir(v string) string {
	if v == "" {
		return DefaultDataDir()
	}
	if v == "~" || strings.HasPrefix(v, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, v[1:])
		}
	}
	return v
}

// DefaultDataDir is the embedded store's data directory when none is given
// (R20.1): $XDG_DATA_HOME/relay, else ~/.local/share/relay.
func DefaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "relay")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return filepath.Join(os.TempDir(), "relay-data")
	}
	return filepath.Join(home, ".local", "share", "relay")
}
