package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/oar/relay/store"
)

// actionArgs lists each action's arguments in the order SPEC names them.
var actionArgs = map[string][]string{
	"list_relays":            {},
	"relay_info":             {"relay"},
	"usage":                  {"relay"},
	"list_sessions":          {"relay", "scope", "limit"},
	"read_session":           {"relay", "session", "last"},
	"read_task_output":       {"relay", "session", "task_id", "lines"},
	"send":                   {"relay", "session", "text", "wait_seconds", "mode", "model", "effort", "provider"},
	"create_session":         {"relay", "text", "provider", "model", "cwd", "repo", "branch", "mode", "effort", "title", "group", "wait_seconds"},
	"update_session":         {"relay", "session", "model", "effort", "mode", "title", "group", "cwd", "auto_compact_window", "thinking_enabled", "thinking_display"},
	"wait":                   {"relay", "session", "message_id", "wait_seconds"},
	"answer_question":        {"relay", "session", "question_id", "choices", "answer"},
	"stop":                   {"relay", "session"},
	"archive":                {"relay", "session"},
	"subscribe":              {"relay", "sessions", "events", "once", "match", "stalled_minutes", "heartbeat_minutes", "digest_minutes", "quiet_hours", "exclude"},
	"unsubscribe":            {"relay", "subscription_id"},
	"list_subscriptions":     {"relay", "watcher"},
	"transfer_subscriptions": {"relay", "from"},
	"schedule":               {"relay", "text", "title", "at", "every_minutes", "session"},
	"list_schedules":         {"relay"},
	"unschedule":             {"relay", "schedule_id"},
	"ask":                    {"relay", "question", "options", "recommendation", "detail", "session"},
	"list_questions":         {"relay", "session"},
	"withdraw":               {"relay", "question_id"},
}

// Actions lists every action name, sorted.
func Actions() []string {
	out := make([]string, 0, len(actionArgs))
	for a := range actionArgs {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// argKinds is each argument's JSON shape; shapes are checked before anything
// else (R3.4a). Not listed: string.
var argKinds = map[string]string{
	"wait_seconds": "int", "last": "int", "lines": "int", "limit": "int", "auto_compact_window": "window",
	"stalled_minutes": "int", "heartbeat_minutes": "int", "digest_minutes": "int", "every_minutes": "int",
	"sessions": "strings", "events": "strings", "exclude": "strings", "choices": "strings", "options": "strings",
	"once": "bool", "thinking_enabled": "thinking", "quiet_hours": "object",
}

// checkShape reports an argument whose JSON value has the wrong shape.
func (a *args) checkShape(k string) *Error {
	v := a.m[k]
	switch argKinds[k] {
	case "int":
		_, _, e := a.integer(k)
		return e
	case "strings":
		_, e := a.strs(k)
		return e
	case "bool":
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return Errorf(CodeInvalidInput, "%s must be true or false. Nothing was done.", k)
		}
	case "thinking":
		_, e := a.thinking()
		return e
	case "window":
		_, _, e := a.window()
		return e
	case "object":
		var m map[string]any
		if json.Unmarshal(v, &m) != nil {
			return Errorf(CodeInvalidInput, "%s must be an object. Nothing was done.", k)
		}
	default:
		_, e := a.str(k)
		return e
	}
	return nil
}

// maxIgnored bounds the `ignored` list (R3.6).
const maxIgnored = 20

// MaxTextBytes bounds a prompt's size.
const MaxTextBytes = 1 << 20

// args holds one call's arguments with empty values removed (R3.4).
type args struct {
	action  string
	m       map[string]json.RawMessage
	order   []string // argument names in the order sent
	ignored []string
	// pre is the `session` argument's session as read with the caller
	// (loadCall), nil when it was not; target uses it instead of reading again.
	pre *store.Call
	// peer: the call came from a paired relay's agent; its relay capped
	// wait_seconds by its own longest wait per call (R7.11).
	peer bool
}

// parseArgs decodes the call's JSON object and separates the arguments the
// action does not take.
// actionKnown is actionArgs as sets.
var actionKnown = func() map[string]map[string]bool {
	out := make(map[string]map[string]bool, len(actionArgs))
	for name, list := range actionArgs {
		known := make(map[string]bool, len(list))
		for _, k := range list {
			known[k] = true
		}
		out[name] = known
	}
	return out
}()

func parseArgs(raw json.RawMessage) (*args, *Error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, Errorf(CodeInvalidInput, "The arguments must be a JSON object. Nothing was done.")
	}
	a := &args{m: map[string]json.RawMessage{}}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, Errorf(CodeInvalidInput, "The arguments are not valid JSON. Nothing was done.")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, Errorf(CodeInvalidInput, "The arguments are not valid JSON. Nothing was done.")
		}
		k := kt.(string)
		if isEmpty(v) {
			continue
		}
		if _, dup := a.m[k]; !dup {
			a.order = append(a.order, k)
		}
		a.m[k] = v
	}
	act, ok := a.m["action"]
	if !ok {
		return nil, Errorf(CodeInvalidInput, "action is required: one of %s. Nothing was done.", strings.Join(Actions(), ", "))
	}
	var name string
	if json.Unmarshal(act, &name) != nil {
		return nil, Errorf(CodeInvalidInput, "action must be a string: one of %s. Nothing was done.", strings.Join(Actions(), ", "))
	}
	if _, ok := actionArgs[name]; !ok {
		return nil, Errorf(CodeInvalidInput, "Unknown action %q. Actions: %s. Nothing was done.", name, strings.Join(Actions(), ", "))
	}
	a.action = name
	delete(a.m, "action")
	known := actionKnown[name]
	var unknown []string
	for _, k := range a.order {
		if k == "action" || known[k] {
			continue
		}
		unknown = append(unknown, k)
		delete(a.m, k)
	}
	if len(unknown) > 0 {
		switch name {
		case "create_session":
			return nil, Errorf(CodeInvalidInput, "create_session does not take: %s. Its arguments: %s. Nothing was created.",
				strings.Join(unknown, ", "), strings.Join(actionArgs[name], ", "))
		case "update_session":
			for _, k := range unknown {
				if k == "may_create_sessions" || k == "mayCreateSessions" {
					return nil, Errorf(CodeInvalidInput, "Whether a session may start sessions is the owner's setting alone. Nothing was changed.")
				}
			}
			return nil, Errorf(CodeInvalidInput, "update_session does not take: %s. Its arguments: %s. Nothing was changed.",
				strings.Join(unknown, ", "), strings.Join(actionArgs[name], ", "))
		}
		if len(unknown) > maxIgnored {
			unknown = unknown[:maxIgnored]
		}
		a.ignored = unknown
	}
	for _, k := range actionArgs[name] {
		if _, ok := a.m[k]; ok {
			if e := a.checkShape(k); e != nil {
				return nil, e
			}
		}
	}
	return a, nil
}

func isEmpty(v json.RawMessage) bool {
	s := strings.TrimSpace(string(v))
	switch s {
	case "null", `""`, "false", "[]", "{}":
		return true
	}
	return false
}

func (a *args) has(k string) bool { _, ok := a.m[k]; return ok }

// str reads a string argument ("" when absent).
func (a *args) str(k string) (string, *Error) {
	v, ok := a.m[k]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", Errorf(CodeInvalidInput, "%s must be a string. Nothing was done.", k)
	}
	return s, nil
}

// integer reads a whole-number argument (a JSON number or a numeric string); ok=false when absent.
func (a *args) integer(k string) (int, bool, *Error) {
	v, ok := a.m[k]
	if !ok {
		return 0, false, nil
	}
	s := strings.Trim(strings.TrimSpace(string(v)), `"`)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
		return 0, false, Errorf(CodeInvalidInput, "%s must be a whole number. Nothing was done.", k)
	}
	if f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false, Errorf(CodeInvalidInput, "%s is out of range (%s). Nothing was done.", k, s)
	}
	return int(f), true, nil
}

// boundedInt reads an integer in [lo, hi] with a default.
func (a *args) boundedInt(k string, def, lo, hi int) (int, *Error) {
	n, ok, err := a.integer(k)
	if err != nil {
		return 0, err
	}
	if !ok {
		return def, nil
	}
	if n < lo || n > hi {
		return 0, Errorf(CodeInvalidInput, "%s must be between %d and %d (got %d). Nothing was done.", k, lo, hi, n)
	}
	return n, nil
}

// strings reads a list of strings (a single string counts as a list of one).
func (a *args) strs(k string) ([]string, *Error) {
	v, ok := a.m[k]
	if !ok {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(v, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(v, &one); err == nil {
		return []string{one}, nil
	}
	return nil, Errorf(CodeInvalidInput, "%s must be a list of strings. Nothing was done.", k)
}

// window reads auto_compact_window: a whole number of tokens (0 included)
// or "auto", which is 0: the provider's own window (R7.10).
func (a *args) window() (int, bool, *Error) {
	const k = "auto_compact_window"
	v, ok := a.m[k]
	if !ok {
		return 0, false, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil && strings.EqualFold(strings.TrimSpace(s), "auto") {
		return 0, true, nil
	}
	n, ok, e := a.integer(k)
	if e != nil || n < 0 {
		return 0, false, Errorf(CodeInvalidInput, `auto_compact_window must be a number of tokens, 0 or "auto". Nothing was changed.`)
	}
	return n, ok, nil
}

// thinking reads thinking_enabled: true/"on" → "on", "off" → "off" (R3.4).
func (a *args) thinking() (string, *Error) {
	v, ok := a.m["thinking_enabled"]
	if !ok {
		return "", nil
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		if b {
			return "on", nil
		}
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		switch strings.ToLower(s) {
		case "on", "true":
			return "on", nil
		case "off":
			return "off", nil
		}
	}
	return "", Errorf(CodeInvalidInput, `thinking_enabled must be true, "on" or "off". Nothing was changed.`)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
