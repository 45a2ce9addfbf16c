package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
)

// The YAML file (SPEC §14): decoded node by node so that every problem
// names its key path and line.

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

// decode reads data, one YAML document, into c: an empty file or a null
// document leaves c as it is.
func (d *fileDecoder) decode(c *Config, data []byte) error {
	doc, err := d.document(data)
	if err != nil || doc == nil {
		return err
	}
	root := doc
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
	return d.mapping(root, "", d.fileFields(c))
}

// document parses data as one YAML document: nil for an empty file, an
// error for a syntax error or a second document.
func (d *fileDecoder) document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty file: all defaults
		}
		return nil, d.syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("config %s: more than one YAML document (line %d)", d.path, extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, d.syntax(err)
	}
	return &doc, nil
}

// fileFields are the keys of the file's top level, each decoded into c.
func (d *fileDecoder) fileFields(c *Config) []field {
	return []field{
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
	}
}

func (d *fileDecoder) syntax(err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return fmt.Errorf("config %s: %s", d.path, msg)
}

// mapping walks a mapping node: every key must be one of fields, at most once.
// Keys whose value is null are treated as absent.
func (d *fileDecoder) mapping(n *yaml.Node, prefix string, fields []field) error {
	d.offer(prefix, fields)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		f := findField(fields, k.Value)
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

// offer notes the keys of fields, below prefix, when d collects them (Keys).
func (d *fileDecoder) offer(prefix string, fields []field) {
	if d.offered == nil {
		return
	}
	for _, f := range fields {
		*d.offered = append(*d.offered, strings.TrimPrefix(prefix+"."+f.key, "."))
	}
}

// findField is the field of key, nil when there is none.
func findField(fields []field, key string) *field {
	for j := range fields {
		if fields[j].key == key {
			return &fields[j]
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
