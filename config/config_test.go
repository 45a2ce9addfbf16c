package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// withHome points $HOME at a fresh directory so the home-based defaults are
// deterministic, and returns it.
func withHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "") // the data directory's default then lies under HOME (R20.1)
	return home
}

// R20.1: the data directory's default is $XDG_DATA_HOME/relay, else
// ~/.local/share/relay; --data-dir and RELAY_DATA_DIR set it ("~" expanded).
func TestDataDir(t *testing.T) {
	home := withHome(t)
	if got := DefaultDataDir(); got != filepath.Join(home, ".local", "share", "relay") {
		t.Errorf("DefaultDataDir() = %q without XDG_DATA_HOME", got)
	}
	t.Setenv("XDG_DATA_HOME", "/srv/data")
	if got := DefaultDataDir(); got != "/srv/data/relay" {
		t.Errorf("DefaultDataDir() = %q with XDG_DATA_HOME=/srv/data", got)
	}
	c, err := Load(map[string]string{"data-dir": "~/relay-data"}, envOf(map[string]string{"RELAY_DATA_DIR": "/elsewhere"}))
	if err != nil || c.DataDir != filepath.Join(home, "relay-data") {
		t.Errorf("--data-dir ~/relay-data: %q, %v", c.DataDir, err)
	}
	if got := DataDir("~/x"); got != filepath.Join(home, "x") {
		t.Errorf(`DataDir("~/x") = %q (relay export resolves RELAY_DATA_DIR with it)`, got)
	}
	c, err = Load(nil, envOf(map[string]string{"RELAY_DATA_DIR": "/elsewhere"}))
	if err != nil || c.DataDir != "/elsewhere" {
		t.Errorf("RELAY_DATA_DIR=/elsewhere: %q, %v", c.DataDir, err)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "relay"
	}
	return h
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func defaultSettings() Settings {
	return Settings{AcceptAgentPrompts: true, MaxWaitSeconds: 600, QuietTaskMinutes: 10, MaxTurnSeconds: 3600}
}

func defaultTiming() Timing {
	return Timing{
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
	}
}

func defaultLimits() Limits {
	return Limits{
		ActiveSessions:               4,
		SubscriptionsPerConversation: 20,
		AgentPromptsBeforeCard:       30,
		SchedulesIntoConversation:    20,
		SchedulesForOthers:           20,
		OpenAsksPerConversation:      20,
		OpenAsksPerSession:           20,
		ReplayEvents:                 500,
		Hops:                         2,
		DirectStarts:                 64,
		ActiveSessionsPerPeerToken:   16,
	}
}

var scripted = Provider{
	ID:           "scripted",
	Name:         "Scripted",
	Type:         "scripted",
	Models:       []string{"scripted-1"},
	DefaultModel: "scripted-1",
	Efforts:      []string{"low", "medium", "high"},
}

func TestDefault(t *testing.T) {
	home := withHome(t)
	want := Config{
		Addr:       "127.0.0.1:7420",
		DataDir:    filepath.Join(home, ".local", "share", "relay"), // R20.1
		Name:       hostname(t),
		Folders:    []string{home},
		DefaultCwd: home,
		Providers:  []Provider{scripted},
		Settings:   defaultSettings(),
		Timing:     defaultTiming(),
		Limits:     defaultLimits(),
	}
	got := Default()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Default() mismatch (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v, want nil", err)
	}
	// Load with nothing set is Default.
	loaded, err := Load(nil, nil)
	if err != nil {
		t.Fatalf("Load(nil, nil): %v", err)
	}
	if diff := cmp.Diff(want, loaded); diff != "" {
		t.Errorf("Load(nil, nil) mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadSpecExample(t *testing.T) {
	home := withHome(t)
	got, err := Load(map[string]string{"config": "testdata/spec.yaml"}, envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Config{
		Addr:       "127.0.0.1:7420",
		DataDir:    filepath.Join(home, ".local", "share", "relay"), // R20.1
		Name:       "desk",
		ConfigPath: "testdata/spec.yaml",
		Folders:    []string{"/home/dev/projects"},
		DefaultCwd: "/home/dev/projects",
		Providers: []Provider{
			{
				ID:           "claude",
				Name:         "Claude Code",
				Type:         "exec",
				Command:      []string{"claude", "-p", "--mcp-config", "{mcp_config}", "--strict-mcp-config"},
				Models:       []string{"claude-sonnet-5-5", "claude-opus-5-5"},
				DefaultModel: "claude-sonnet-5-5",
				Efforts:      []string{"low", "medium", "high"},
			},
			{
				ID:        "local",
				Name:      "local",
				Type:      "openai",
				BaseURL:   "http://127.0.0.1:11434/v1",
				APIKeyEnv: "OPENAI_API_KEY",
			},
			scripted,
		},
		Settings: defaultSettings(),
		Timing:   defaultTiming(),
		Limits:   defaultLimits(),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadCustomFile(t *testing.T) {
	home := withHome(t)
	got, err := Load(map[string]string{"config": "testdata/custom.yaml"}, envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Config{
		Addr:       "127.0.0.1:7420",
		DataDir:    filepath.Join(home, ".local", "share", "relay"), // R20.1
		Name:       "filebox",
		ConfigPath: "testdata/custom.yaml",
		Folders:    []string{filepath.Join(home, "work"), "/srv/shared"},
		DefaultCwd: filepath.Join(home, "work", "app"),
		Providers: []Provider{
			{
				ID:           "claude",
				Name:         "claude",
				Type:         "exec",
				Command:      []string{"claude", "-p"},
				Models:       []string{"sonnet", "opus"},
				DefaultModel: "sonnet",
				Efforts:      []string{"low", "high"},
				SwitchTo:     "claude-api",
				Env:          map[string]string{"CLAUDE_HOME": "/opt/claude", "DEBUG": "1"},
			},
			{
				ID:        "claude-api",
				Name:      "Claude API",
				Type:      "openai",
				BaseURL:   "https://api.example.com/v1",
				APIKeyEnv: "EXAMPLE_KEY",
				SwitchTo:  "claude",
			},
			{
				ID:           "scripted",
				Name:         "Test bot",
				Type:         "scripted",
				Models:       []string{"scripted-1"},
				DefaultModel: "scripted-1",
				Efforts:      []string{"low", "medium", "high"},
			},
		},
		Settings: Settings{
			AgentSessions:      true,
			AcceptAgentPrompts: false,
			MaxWaitSeconds:     120,
			QuietTaskMinutes:   1,
			MaxTurnSeconds:     60,
		},
		Timing: Timing{
			Coalesce:         0,
			WakeLimitPerHour: 5,
			WakeSummaryEvery: time.Minute,
			StalledDefault:   2 * time.Minute,
			PeerPoll:         500 * time.Millisecond,
			AskPoll:          time.Second,
			AskPollOffline:   2 * time.Second,
			TaskOutputKept:   30 * time.Minute,
			ReplayKeep:       24 * time.Hour,
			DefaultWait:      10 * time.Second,
			PeerTimeout:      90 * time.Second,
			AgentSilence:     10 * time.Minute,
			TurnLogEvery:     5 * time.Minute,
		},
		Limits: Limits{
			ActiveSessions:               1,
			SubscriptionsPerConversation: 2,
			AgentPromptsBeforeCard:       3,
			SchedulesIntoConversation:    4,
			SchedulesForOthers:           5,
			OpenAsksPerConversation:      6,
			OpenAsksPerSession:           7,
			ReplayEvents:                 8,
			Hops:                         9,
			DirectStarts:                 0,
			ActiveSessionsPerPeerToken:   10,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}

	p, ok := got.Provider("claude-api")
	if !ok || p.Name != "Claude API" {
		t.Errorf(`Provider("claude-api") = %+v, %v`, p, ok)
	}
	if _, ok := got.Provider("nope"); ok {
		t.Errorf(`Provider("nope") found, want not found`)
	}
}

func TestPrecedence(t *testing.T) {
	withHome(t)
	host := hostname(t)
	file := writeFile(t, "name: filebox\nsettings:\n  max_wait_seconds: 900\n")

	type view struct {
		Name, Addr, RedisURL, OwnerToken, MetricsAddr, ConfigPath string
		MaxWait                                                   int
	}
	def := view{Name: host, Addr: "127.0.0.1:7420", MaxWait: 600}
	withFile := def
	withFile.Name, withFile.ConfigPath, withFile.MaxWait = "filebox", file, 900

	tests := []struct {
		name  string
		flags map[string]string
		env   map[string]string
		want  func(v view) view
	}{
		{"defaults", nil, nil, func(view) view { return def }},
		{"file", map[string]string{"config": file}, nil, func(view) view { return withFile }},
		{"env config path", nil, map[string]string{"RELAY_CONFIG": file}, func(view) view { return withFile }},
		{"env beats file", map[string]string{"config": file}, map[string]string{"RELAY_NAME": "envbox"},
			func(v view) view { v = withFile; v.Name = "envbox"; return v }},
		{"flag beats env", map[string]string{"config": file, "name": "flagbox"}, map[string]string{"RELAY_NAME": "envbox"},
			func(v view) view { v = withFile; v.Name = "flagbox"; return v }},
		{"flag beats file", map[string]string{"config": file, "name": "flagbox"}, nil,
			func(v view) view { v = withFile; v.Name = "flagbox"; return v }},
		{"empty env counts as unset", map[string]string{"config": file}, map[string]string{"RELAY_NAME": "", "RELAY_ADDR": ""},
			func(view) view { return withFile }},
		{"env addr", nil, map[string]string{"RELAY_ADDR": "0.0.0.0:8000"},
			func(v view) view { v = def; v.Addr = "0.0.0.0:8000"; return v }},
		{"flag addr beats env", map[string]string{"addr": ":9000"}, map[string]string{"RELAY_ADDR": "0.0.0.0:8000"},
			func(v view) view { v = def; v.Addr = ":9000"; return v }},
		{"env redis", nil, map[string]string{"REDIS_URL": "redis://db:6379/1"},
			func(v view) view { v = def; v.RedisURL = "redis://db:6379/1"; return v }},
		{"flag redis beats env", map[string]string{"redis": "redis://flag:6379/0"}, map[string]string{"REDIS_URL": "redis://db:6379/1"},
			func(v view) view { v = def; v.RedisURL = "redis://flag:6379/0"; return v }},
		{"explicit empty redis flag means embedded", map[string]string{"redis": ""}, map[string]string{"REDIS_URL": "redis://db:6379/1"},
			func(view) view { return def }},
		{"owner token and metrics addr from env", nil, map[string]string{"RELAY_OWNER_TOKEN": "tok-env-0123456789", "RELAY_METRICS_ADDR": ":9100"},
			func(v view) view { v = def; v.OwnerToken, v.MetricsAddr = "tok-env-0123456789", ":9100"; return v }},
		{"owner token and metrics addr flags beat env",
			map[string]string{"owner-token": "tok-flag-0123456789", "metrics-addr": "127.0.0.1:9200"},
			map[string]string{"RELAY_OWNER_TOKEN": "tok-env-0123456789", "RELAY_METRICS_ADDR": ":9100"},
			func(v view) view {
				v = def
				v.OwnerToken, v.MetricsAddr = "tok-flag-0123456789", "127.0.0.1:9200"
				return v
			}},
		{"config flag beats env", map[string]string{"config": file}, map[string]string{"RELAY_CONFIG": "/does/not/exist.yaml"},
			func(view) view { return withFile }},
		{"empty config flag disables env file", map[string]string{"config": ""}, map[string]string{"RELAY_CONFIG": file},
			func(view) view { return def }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.flags, envOf(tt.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := view{c.Name, c.Addr, c.RedisURL, c.OwnerToken, c.MetricsAddr, c.ConfigPath, c.Settings.MaxWaitSeconds}
			if diff := cmp.Diff(tt.want(view{}), got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEmptyFiles(t *testing.T) {
	withHome(t)
	for _, content := range []string{"", "# only a comment\n", "~\n", "---\n"} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			p := writeFile(t, content)
			got, err := Load(map[string]string{"config": p}, nil)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			want.ConfigPath = p
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNullValuesKeepDefaults(t *testing.T) {
	home := withHome(t)
	p := writeFile(t, "name:\nfolders: ~\nsettings:\n  max_wait_seconds:\ntiming:\nproviders:\n")
	got, err := Load(map[string]string{"config": p}, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.ConfigPath = p
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
	if got.Folders[0] != home {
		t.Errorf("Folders = %v, want [%s]", got.Folders, home)
	}
}

// TestFileErrors covers unknown keys (with suggestions), duplicates, wrong
// types and malformed files. %s in want is the file path.
func TestFileErrors(t *testing.T) {
	withHome(t)
	tests := []struct {
		name, yaml, want string
	}{
		// Unknown keys at every level, each with the nearest known key.
		{"top level", "nmae: desk\n", //nolint:misspell // the typo is the test
			`config %s: unknown key "nmae" (line 1); did you mean "name"?`}, //nolint:misspell // the typo is the test
		{"top level plural", "name: desk\nfolder: [/srv]\n",
			`config %s: unknown key "folder" (line 2); did you mean "folders"?`},
		{"top level far off", "zzz: 1\n",
			`config %s: unknown key "zzz" (line 1); did you mean "name"?`},
		{"settings", "settings:\n  max_wait_second: 600\n",
			`config %s: unknown key "settings.max_wait_second" (line 2); did you mean "max_wait_seconds"?`},
		{"settings other key", "settings:\n  agent_session: true\n",
			`config %s: unknown key "settings.agent_session" (line 2); did you mean "agent_sessions"?`},
		{"timing", "timing:\n  peer_poll: 3s\n  coalesec: 10s\n",
			`config %s: unknown key "timing.coalesec" (line 3); did you mean "coalesce"?`},
		{"timing case", "timing:\n  Coalesce: 10s\n",
			`config %s: unknown key "timing.Coalesce" (line 2); did you mean "coalesce"?`},
		{"limits", "limits:\n  hop: 3\n",
			`config %s: unknown key "limits.hop" (line 2); did you mean "hops"?`},
		{"limits long", "limits:\n  open_asks_per_conversations: 3\n",
			`config %s: unknown key "limits.open_asks_per_conversations" (line 2); did you mean "open_asks_per_conversation"?`},
		{"provider item", "providers:\n  - id: a\n    type: scripted\n  - id: b\n    modles: [x]\n",
			`config %s: unknown key "providers[1].modles" (line 5); did you mean "models"?`},
		{"provider camelCase", "providers:\n  - id: a\n    defaultModel: x\n",
			`config %s: unknown key "providers[0].defaultModel" (line 3); did you mean "default_model"?`},
		{"provider base url", "providers:\n  - id: a\n    baseurl: http://x\n",
			`config %s: unknown key "providers[0].baseurl" (line 3); did you mean "base_url"?`},
		{"key of another section", "coalesce: 10s\n",
			`config %s: unknown key "coalesce" (line 1); did you mean "name"?`},

		// Duplicates.
		{"duplicate top", "name: a\nname: b\n",
			`config %s: duplicate key "name" (line 2, first at line 1)`},
		{"duplicate nested", "timing:\n  coalesce: 1s\n  coalesce: 2s\n",
			`config %s: duplicate key "timing.coalesce" (line 3, first at line 2)`},

		// Wrong types.
		{"int as word", "settings:\n  max_wait_seconds: ten\n",
			`config %s: settings.max_wait_seconds must be an integer (line 2, got "ten")`},
		{"int as float", "limits:\n  hops: 2.5\n",
			`config %s: limits.hops must be an integer (line 2, got "2.5")`},
		{"int as quoted string", "limits:\n  hops: \"2\"\n",
			`config %s: limits.hops must be an integer (line 2, got "2")`},
		{"int as list", "timing:\n  wake_limit_per_hour: [1]\n",
			`config %s: timing.wake_limit_per_hour must be an integer (line 2, got a list)`},
		{"bool as yes", "settings:\n  agent_sessions: yes\n",
			`config %s: settings.agent_sessions must be true or false (line 2, got "yes")`},
		{"bad duration", "timing:\n  coalesce: thirty\n",
			`config %s: timing.coalesce must be a duration like "30s" (line 2, got "thirty")`},
		{"duration without unit", "timing:\n  peer_poll: 3\n",
			`config %s: timing.peer_poll must be a duration like "30s" (line 2, got "3")`},
		{"section not mapping", "settings: 5\n",
			`config %s: settings must be a mapping (line 1, got "5")`},
		{"folders not list", "folders: /srv\n",
			`config %s: folders must be a list of strings (line 1, got "/srv")`},
		{"folders item null", "folders: [/srv, null]\n",
			`config %s: folders[1] must be a string (line 1, got null)`},
		{"folders item bare tilde", "folders:\n  - /srv\n  - ~\n",
			`config %s: folders[1] must be a string (line 3, got null; write "~" in quotes for the home directory)`},
		{"name as list", "name: [a]\n",
			`config %s: name must be a string (line 1, got a list)`},
		{"default_cwd as mapping", "default_cwd: {a: b}\n",
			`config %s: default_cwd must be a string (line 1, got a mapping)`},
		{"providers not list", "providers:\n  id: x\n",
			`config %s: providers must be a list of providers (line 2, got a mapping)`},
		{"provider not mapping", "providers: [x]\n",
			`config %s: providers[0] must be a mapping (line 1, got "x")`},
		{"provider models item", "providers:\n  - id: a\n    models: [a, [b]]\n",
			`config %s: providers[0].models[1] must be a string (line 3, got a list)`},
		{"provider command not list", "providers:\n  - id: a\n    command: claude -p\n",
			`config %s: providers[0].command must be a list of strings (line 3, got "claude -p")`},
		{"provider env not mapping", "providers:\n  - id: a\n    env: [A]\n",
			`config %s: providers[0].env must be a mapping of strings (line 3, got a list)`},
		{"provider env value", "providers:\n  - id: a\n    env:\n      A: [1]\n",
			`config %s: providers[0].env.A must be a string (line 4, got a list)`},

		// Malformed files.
		{"top level list", "- a\n- b\n",
			`config %s: the file must be a mapping of keys (line 1, got a list)`},
		{"top level scalar", "hello\n",
			`config %s: the file must be a mapping of keys (line 1, got "hello")`},
		{"two documents", "name: a\n---\nname: b\n",
			`config %s: more than one YAML document (line 2)`},
		{"syntax", "name: [a\n",
			`config %s: yaml: line 1: did not find expected ',' or ']'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, tt.yaml)
			_, err := Load(map[string]string{"config": p}, nil)
			want := fmt.Sprintf(tt.want, p)
			if err == nil {
				t.Fatalf("Load succeeded, want error %q", want)
			}
			if diff := cmp.Diff(want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFileErrorFromTestdata(t *testing.T) {
	withHome(t)
	_, err := Load(nil, envOf(map[string]string{"RELAY_CONFIG": "testdata/typo.yaml"}))
	want := `config testdata/typo.yaml: unknown key "timing.coalesec" (line 7); did you mean "coalesce"?`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestMissingFile(t *testing.T) {
	withHome(t)
	p := filepath.Join(t.TempDir(), "nope.yaml")
	for name, flags := range map[string]map[string]string{
		"flag": {"config": p},
	} {
		_, err := Load(flags, nil)
		want := fmt.Sprintf("config %s: file not found", p)
		if err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", name, err, want)
		}
	}
	_, err := Load(nil, envOf(map[string]string{"RELAY_CONFIG": p}))
	want := fmt.Sprintf("config %s: file not found", p)
	if err == nil || err.Error() != want {
		t.Errorf("env: err = %v, want %q", err, want)
	}
	// A directory is not a readable file.
	dir := t.TempDir()
	_, err = Load(map[string]string{"config": dir}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "config "+dir+": cannot read: ") {
		t.Errorf("dir: err = %v, want a cannot read error", err)
	}
}

func TestUnknownFlag(t *testing.T) {
	_, err := Load(map[string]string{"adr": "x"}, nil)
	if err == nil || err.Error() != `config: unknown flag "adr"` {
		t.Errorf("err = %v", err)
	}
}

// TestLoadValidates checks that Load runs Validate and that ~ expansion and
// the derived defaults feed into it.
func TestLoadValidates(t *testing.T) {
	home := withHome(t)
	tests := []struct {
		name, yaml string
		flags      map[string]string
		want       string
	}{
		{"range from file", "settings:\n  max_wait_seconds: 50\n", nil,
			"config: settings.max_wait_seconds must be between 120 and 3600 (got 50)"},
		{"relative folder", "folders: [projects]\n", nil,
			`config: folders[0] must be an absolute path (got "projects")`},
		{"default_cwd outside", "folders: [~/a]\ndefault_cwd: ~/ab\n", nil,
			fmt.Sprintf(`config: default_cwd must lie inside one of the folders (got %q)`, filepath.Join(home, "ab"))},
		{"default_model from file", "providers:\n  - id: x\n    type: exec\n    command: [x]\n    models: [a]\n    default_model: b\n", nil,
			`config: providers[0].default_model must be one of a (got "b")`},
		{"bad addr flag", "", map[string]string{"addr": "7420"},
			`config: addr must be host:port (got "7420")`},
		{"empty name flag", "", map[string]string{"name": ""},
			`config: name must not be empty`},
		{"explicit empty folders", "folders: []\n", nil,
			`config: folders must name at least one folder`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags := map[string]string{"config": writeFile(t, tt.yaml)}
			for k, v := range tt.flags {
				flags[k] = v
			}
			_, err := Load(flags, nil)
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}

	// ~ expansion and default_cwd defaulting succeed.
	c, err := Load(map[string]string{"config": writeFile(t, "folders: [\"~\", ~/x/../y/]\n")}, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff([]string{home, filepath.Join(home, "y")}, c.Folders); diff != "" {
		t.Errorf("Folders mismatch (-want +got):\n%s", diff)
	}
	if c.DefaultCwd != home {
		t.Errorf("DefaultCwd = %q, want %q", c.DefaultCwd, home)
	}
}

func validConfig() Config {
	return Config{
		Addr:       "127.0.0.1:7420",
		Name:       "desk",
		Folders:    []string{"/srv", "/home/dev"},
		DefaultCwd: "/srv/app",
		Providers: []Provider{
			{ID: "claude", Name: "Claude", Type: "exec", Command: []string{"claude", "-p"},
				Models: []string{"a", "b"}, DefaultModel: "b", SwitchTo: "api"},
			{ID: "api", Name: "API", Type: "openai", BaseURL: "http://127.0.0.1:11434/v1"},
			scripted,
		},
		Settings: defaultSettings(),
		Timing:   defaultTiming(),
		Limits:   defaultLimits(),
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // "" = valid
	}{
		{"valid", func(c *Config) {}, ""},
		{"valid edges", func(c *Config) {
			c.Settings.MaxWaitSeconds = 3600
			c.Timing.Coalesce = 0
			c.Addr = ":0"
			c.MetricsAddr = "[::1]:9100"
			c.RedisURL = "rediss://user:pw@db:6380/2"
			c.DefaultCwd = "/home/dev"
			c.Providers[0].Models = nil
			c.Providers[0].DefaultModel = "anything"
		}, ""},
		{"min max_wait", func(c *Config) { c.Settings.MaxWaitSeconds = 120 }, ""},

		{"empty name", func(c *Config) { c.Name = " " }, "config: name must not be empty"},
		{"addr without port", func(c *Config) { c.Addr = "localhost" },
			`config: addr must be host:port (got "localhost")`},
		{"addr bad port", func(c *Config) { c.Addr = "localhost:http" },
			`config: addr must be host:port (got "localhost:http")`},
		{"addr port too big", func(c *Config) { c.Addr = ":70000" },
			`config: addr must be host:port (got ":70000")`},
		{"metrics addr", func(c *Config) { c.MetricsAddr = "9100" },
			`config: metrics-addr must be host:port (got "9100")`},
		{"redis scheme", func(c *Config) { c.RedisURL = "localhost:6379" },
			`config: redis: not a URL: the forms are redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://`},
		{"redis sentinel", func(c *Config) { c.RedisURL = "redis+sentinel://:pw@s1:26379,s2:26379/mymaster/2" }, ""},
		{"redis cluster", func(c *Config) { c.RedisURL = "redis+cluster://:pw@n1:7000,n2:7000/" }, ""},
		{"redis sentinel without master", func(c *Config) { c.RedisURL = "redis+sentinel://:pw@s1:26379" },
			`config: redis: redis+sentinel://:xxxxx@s1:26379: no master name: redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER_NAME[/DB]`},
		{"redis cluster with a db", func(c *Config) { c.RedisURL = "redis+cluster://n1:7000/1" },
			`config: redis: redis+cluster://n1:7000/1: a cluster URL has no path (a cluster has database 0 only)`},

		{"no folders", func(c *Config) { c.Folders = nil },
			"config: folders must name at least one folder"},
		{"relative folder", func(c *Config) { c.Folders[1] = "dev" },
			`config: folders[1] must be an absolute path (got "dev")`},
		{"tilde folder not expanded", func(c *Config) { c.Folders[0] = "~/x" },
			`config: folders[0] must be an absolute path (got "~/x")`},
		{"relative default_cwd", func(c *Config) { c.DefaultCwd = "app" },
			`config: default_cwd must be an absolute path (got "app")`},
		{"default_cwd outside", func(c *Config) { c.DefaultCwd = "/srvx" },
			`config: default_cwd must lie inside one of the folders (got "/srvx")`},

		{"empty provider id", func(c *Config) { c.Providers[1].ID = ""; c.Providers[0].SwitchTo = "" },
			"config: providers[1].id must not be empty"},
		{"provider id pattern", func(c *Config) { c.Providers[1].ID = "API" },
			`config: providers[1].id must match ^[a-z0-9][a-z0-9_-]*$ (got "API")`},
		{"provider id leading dash", func(c *Config) { c.Providers[1].ID = "-api" },
			`config: providers[1].id must match ^[a-z0-9][a-z0-9_-]*$ (got "-api")`},
		{"duplicate provider id", func(c *Config) { c.Providers[1].ID = "claude" },
			`config: providers[1].id "claude" is already used by providers[0]`},
		{"provider type", func(c *Config) { c.Providers[0].Type = "bash" },
			`config: providers[0].type must be one of exec, openai, scripted, claude-code, codex, gemini-cli, acp (got "bash")`},
		{"provider type empty", func(c *Config) { c.Providers[1].Type = "" },
			`config: providers[1].type must be one of exec, openai, scripted, claude-code, codex, gemini-cli, acp (got "")`},
		{"scripted id with other type", func(c *Config) {
			c.Providers[2].Type = "exec"
			c.Providers[2].Command = []string{"x"}
		}, `config: providers[2].type must be "scripted" for id "scripted" (got "exec")`},
		{"exec without command", func(c *Config) { c.Providers[0].Command = nil },
			"config: providers[0].command must not be empty for type exec"},
		{"exec with empty program", func(c *Config) { c.Providers[0].Command = []string{""} },
			"config: providers[0].command must not be empty for type exec"},
		{"openai without base_url", func(c *Config) { c.Providers[1].BaseURL = "" },
			"config: providers[1].base_url is required for type openai"},
		{"openai bad base_url", func(c *Config) { c.Providers[1].BaseURL = "127.0.0.1:11434/v1" },
			`config: providers[1].base_url must be an http or https URL (got "127.0.0.1:11434/v1")`},
		{"empty model", func(c *Config) { c.Providers[0].Models = []string{"a", ""} },
			"config: providers[0].models[1] must not be empty"},
		{"default_model not in models", func(c *Config) { c.Providers[0].DefaultModel = "c" },
			`config: providers[0].default_model must be one of a, b (got "c")`},
		{"switch_to unknown", func(c *Config) { c.Providers[0].SwitchTo = "nope" },
			`config: providers[0].switch_to must name another configured provider (got "nope")`},
		{"switch_to self", func(c *Config) { c.Providers[0].SwitchTo = "claude" },
			`config: providers[0].switch_to must name another configured provider (got "claude")`},
		{"monthly_cap without unit", func(c *Config) { c.Providers[0].MonthlyCap = 50 },
			`config: providers[0].cap_unit must be usd or tokens with monthly_cap (got "")`},
		{"cap_unit without cap", func(c *Config) { c.Providers[0].CapUnit = "tokens" },
			"config: providers[0].monthly_cap must be a number above 0 (got 0; leave it out for no cap)"},
		{"monthly_cap negative", func(c *Config) { c.Providers[0].MonthlyCap, c.Providers[0].CapUnit = -1, "tokens" },
			"config: providers[0].monthly_cap must be a number above 0 (got -1; leave it out for no cap)"},
		{"cap_unit usd without cost", func(c *Config) { c.Providers[0].MonthlyCap, c.Providers[0].CapUnit = 5, "usd" },
			"config: providers[0].cap_unit usd needs a provider that reports its cost (claude-code, codex, gemini-cli); type exec counts tokens only: use cap_unit: tokens"},
		{"env name", func(c *Config) { c.Providers[0].Env = map[string]string{"A=B": "x"} },
			`config: providers[0].env has an invalid variable name "A=B"`},

		{"max_wait low", func(c *Config) { c.Settings.MaxWaitSeconds = 50 },
			"config: settings.max_wait_seconds must be between 120 and 3600 (got 50)"},
		{"max_wait high", func(c *Config) { c.Settings.MaxWaitSeconds = 3601 },
			"config: settings.max_wait_seconds must be between 120 and 3600 (got 3601)"},
		{"quiet_task_minutes", func(c *Config) { c.Settings.QuietTaskMinutes = 0 },
			"config: settings.quiet_task_minutes must be at least 1 (got 0)"},
		{"max_turn_seconds", func(c *Config) { c.Settings.MaxTurnSeconds = -5 },
			"config: settings.max_turn_seconds must be at least 1 (got -5)"},

		{"coalesce negative", func(c *Config) { c.Timing.Coalesce = -time.Second },
			"config: timing.coalesce must not be negative (got -1s)"},
		{"wake_limit_per_hour", func(c *Config) { c.Timing.WakeLimitPerHour = 0 },
			"config: timing.wake_limit_per_hour must be at least 1 (got 0)"},
		{"wake_summary_every", func(c *Config) { c.Timing.WakeSummaryEvery = 0 },
			"config: timing.wake_summary_every must be greater than 0 (got 0s)"},
		{"stalled_default", func(c *Config) { c.Timing.StalledDefault = 0 },
			"config: timing.stalled_default must be greater than 0 (got 0s)"},
		{"peer_poll", func(c *Config) { c.Timing.PeerPoll = 0 },
			"config: timing.peer_poll must be greater than 0 (got 0s)"},
		{"ask_poll", func(c *Config) { c.Timing.AskPoll = -time.Millisecond },
			"config: timing.ask_poll must be greater than 0 (got -1ms)"},
		{"ask_poll_offline", func(c *Config) { c.Timing.AskPollOffline = 0 },
			"config: timing.ask_poll_offline must be greater than 0 (got 0s)"},
		{"task_output_kept", func(c *Config) { c.Timing.TaskOutputKept = 0 },
			"config: timing.task_output_kept must be greater than 0 (got 0s)"},
		{"replay_keep", func(c *Config) { c.Timing.ReplayKeep = 0 },
			"config: timing.replay_keep must be greater than 0 (got 0s)"},
		{"default_wait", func(c *Config) { c.Timing.DefaultWait = 0 },
			"config: timing.default_wait must be greater than 0 (got 0s)"},
		{"peer_timeout", func(c *Config) { c.Timing.PeerTimeout = 0 },
			"config: timing.peer_timeout must be greater than 0 (got 0s)"},

		{"active_sessions", func(c *Config) { c.Limits.ActiveSessions = 0 },
			"config: limits.active_sessions must be at least 1 (got 0)"},
		{"subscriptions_per_conversation", func(c *Config) { c.Limits.SubscriptionsPerConversation = 0 },
			"config: limits.subscriptions_per_conversation must be at least 1 (got 0)"},
		{"agent_prompts_before_card", func(c *Config) { c.Limits.AgentPromptsBeforeCard = 0 },
			"config: limits.agent_prompts_before_card must be at least 1 (got 0)"},
		{"schedules_into_conversation", func(c *Config) { c.Limits.SchedulesIntoConversation = 0 },
			"config: limits.schedules_into_conversation must be at least 1 (got 0)"},
		{"schedules_for_others", func(c *Config) { c.Limits.SchedulesForOthers = 0 },
			"config: limits.schedules_for_others must be at least 1 (got 0)"},
		{"open_asks_per_conversation", func(c *Config) { c.Limits.OpenAsksPerConversation = 0 },
			"config: limits.open_asks_per_conversation must be at least 1 (got 0)"},
		{"open_asks_per_session", func(c *Config) { c.Limits.OpenAsksPerSession = 0 },
			"config: limits.open_asks_per_session must be at least 1 (got 0)"},
		{"replay_events", func(c *Config) { c.Limits.ReplayEvents = 0 },
			"config: limits.replay_events must be at least 1 (got 0)"},
		{"hops", func(c *Config) { c.Limits.Hops = -1 },
			"config: limits.hops must be at least 1 (got -1)"},
		{"direct starts", func(c *Config) { c.Limits.DirectStarts = -1 },
			"config: limits.direct_starts must be 0 (off) or more (got -1)"},
		{"active_sessions_per_peer_token", func(c *Config) { c.Limits.ActiveSessionsPerPeerToken = 0 },
			"config: limits.active_sessions_per_peer_token must be at least 1 (got 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				if strings.Contains(got, "\n") {
					t.Errorf("error is not one line: %q", got)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInside(t *testing.T) {
	tests := []struct {
		name    string
		folders []string
		dir     string
		want    bool
	}{
		{"equal", []string{"/a/b"}, "/a/b", true},
		{"below", []string{"/a/b"}, "/a/b/c/d", true},
		{"prefix is not a parent", []string{"/a/b"}, "/a/bc", false},
		{"prefix deeper", []string{"/a/b"}, "/a/bc/d", false},
		{"parent of folder", []string{"/a/b"}, "/a", false},
		{"sibling", []string{"/a/b"}, "/a/c", false},
		{"trailing slash on folder", []string{"/a/b/"}, "/a/b/c", true},
		{"trailing slash on dir", []string{"/a/b"}, "/a/b/", true},
		{"dotdot escapes", []string{"/a/b"}, "/a/b/../c", false},
		{"dotdot stays inside", []string{"/a/b"}, "/a/b/c/../d", true},
		{"unclean folder", []string{"/a/./b//"}, "/a/b/c", true},
		{"root folder", []string{"/"}, "/anything/at/all", true},
		{"root equals root", []string{"/"}, "/", true},
		{"second folder", []string{"/x", "/a/b"}, "/a/b/c", true},
		{"no folders", nil, "/a", false},
		{"empty dir", []string{"/a"}, "", false},
		{"empty folder ignored", []string{""}, ".", false},
		{"relative dir", []string{"/a/b"}, "a/b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Inside(tt.folders, tt.dir); got != tt.want {
				t.Errorf("Inside(%q, %q) = %v, want %v", tt.folders, tt.dir, got, tt.want)
			}
		})
	}
}

// A YAML file with folders but no default_cwd: the default folder is the first of them.
func TestFoldersWithoutDefaultCwd(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, "folders: ["+dir+"]\n")
	c, err := Load(map[string]string{"config": p}, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.DefaultCwd != dir {
		t.Fatalf("default_cwd %q, want %q", c.DefaultCwd, dir)
	}
}
