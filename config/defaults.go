package config

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

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
			p.fillScripted()
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

// fillScripted fills a configured scripted provider: it keeps what it sets
// and takes the rest from the built-in one.
func (p *Provider) fillScripted() {
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
