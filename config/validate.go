package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/oar/relay/redisurl"
)

// validators are the checks Validate runs, one per section of the
// configuration, in the order their problems are reported.
var validators = []func(Config) error{
	Config.validateServer,
	Config.validateFolders,
	Config.validateProviders,
	Config.validateSettings,
	Config.validateTiming,
	Config.validateLimits,
	func(c Config) error { return c.Notify.validate() },
}

// Validate checks the configuration and returns the first problem as a
// one-line error starting with "config: " that names the bad field.
func (c Config) Validate() error {
	for _, v := range validators {
		if err := v(c); err != nil {
			return err
		}
	}
	return nil
}

// validateServer checks what the process listens on and connects to: name,
// addr, public-url, metrics-addr, the owner token and redis.
func (c Config) validateServer() error {
	if strings.TrimSpace(c.Name) == "" {
		return errors.New("config: name must not be empty")
	}
	if err := checkHostPort("addr", c.Addr); err != nil {
		return err
	}
	if err := checkPublicURL(c.PublicURL); err != nil {
		return err
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
	return nil
}

// checkPublicURL checks public-url: "" or a base URL (R18.10).
func checkPublicURL(v string) error {
	if v == "" {
		return nil
	}
	u, ok := httpURL(v)
	if !ok || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return fmt.Errorf("config: public-url must be a base URL like https://relay.example.com or http://10.0.0.5:7420 (got %q)", v)
	}
	return nil
}

// validateFolders checks repos.dir, folders and default_cwd.
func (c Config) validateFolders() error {
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
	return nil
}

// validateSettings checks settings: their ranges.
func (c Config) validateSettings() error {
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
	return atLeastOne("settings.max_turn_seconds", s.MaxTurnSeconds)
}

// validateTiming checks timing: the durations that must be positive, and
// those where 0 means the default.
func (c Config) validateTiming() error {
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
	return t.validateDefaulted()
}

// validateDefaulted checks the timings where 0 stands for the default.
func (t Timing) validateDefaulted() error {
	if t.AgentSilence < 0 { // 0 = the default (10 min)
		return fmt.Errorf("config: timing.agent_silence must not be negative (got %s)", t.AgentSilence)
	}
	if t.ACPIdle < 0 { // 0 = the default (10 min)
		return fmt.Errorf("config: timing.acp_idle must not be negative (got %s)", t.ACPIdle)
	}
	if t.TurnLogEvery != 0 && t.TurnLogEvery < time.Second { // 0 = the default (5 min)
		return fmt.Errorf("config: timing.turn_log_every must be at least 1s (got %s)", t.TurnLogEvery)
	}
	return nil
}

// validateLimits checks limits: each at least 1, direct_starts 0 or more.
func (c Config) validateLimits() error {
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
	return nil
}

// httpURL parses raw as an http or https URL with a host; ok is false for
// anything else.
func httpURL(raw string) (u *url.URL, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false
	}
	return u, true
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
