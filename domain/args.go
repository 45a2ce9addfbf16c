package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/oar/relay/store"
)

// argKinds is each argument's JSON shape; shapes are checked before anything
// else (R3.4a). Not listed: string.
var argKinds = map[string]string{
	"wait_seconds": "int", "last": "int", "lines": "int", "limit": "int", "auto_compact_window": "window",
	"stalled_minutes": "int", "heartbeat_minutes": "int", "digest_minutes": "int", "every_minutes": "int",
	"sessions": "strings", "events": "strings", "exclude": "strings", "choices": "strings", "options": "strings",
	"once": "bool", "thinking_enabled": "thinking", "quiet_hours": "object",
}

// shapeChecks read an argument of each kind (argKinds) to check its shape;
// an argument of no listed kind is a string.
var shapeChecks = map[string]func(a *args, k string) *Error{
	"int":      func(a *args, k string) *Error { _, _, e := a.integer(k); return e },
	"strings":  func(a *args, k string) *Error { _, e := a.strs(k); return e },
	"bool":     func(a *args, k string) *Error { return a.decodes(k, new(bool), "true or false") },
	"thinking": func(a *args, _ string) *Error { _, e := a.thinking(); return e },
	"window":   func(a *args, _ string) *Error { _, _, e := a.window(); return e },
	"object":   func(a *args, k string) *Error { return a.decodes(k, &map[string]json.RawMessage{}, "an object") },
}

// checkShape reports an argument whose JSON value has the wrong shape.
func (a *args) checkShape(k string) *Error {
	if check, ok := shapeChecks[argKinds[k]]; ok {
		return check(a, k)
	}
	_, e := a.str(k)
	return e
}

// decodes checks that argument k decodes into v: it must be what.
func (a *args) decodes(k string, v any, what string) *Error {
	if json.Unmarshal(a.m[k], v) != nil {
		return Errorf(CodeInvalidInput, "%s must be %s. Nothing was done.", k, what)
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
func parseArgs(raw json.RawMessage) (*args, *Error) {
	a, e := decodeArgs(raw)
	if e != nil {
		return nil, e
	}
	if e := a.takeAction(); e != nil {
		return nil, e
	}
	if e := a.dropUnknown(); e != nil {
		return nil, e
	}
	for _, k := range actionArgs[a.action] {
		if _, ok := a.m[k]; ok {
			if e := a.checkShape(k); e != nil {
				return nil, e
			}
		}
	}
	return a, nil
}

// decodeArgs reads the call's JSON object, empty values left out, in the
// order sent.
func decodeArgs(raw json.RawMessage) (*args, *Error) {
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
	return a, nil
}

// takeAction moves the `action` argument, which must name an action, to a.action.
func (a *args) takeAction() *Error {
	act, ok := a.m["action"]
	if !ok {
		return Errorf(CodeInvalidInput, "action is required: one of %s. Nothing was done.", strings.Join(Actions(), ", "))
	}
	var name string
	if json.Unmarshal(act, &name) != nil {
		return Errorf(CodeInvalidInput, "action must be a string: one of %s. Nothing was done.", strings.Join(Actions(), ", "))
	}
	if !isAction(name) {
		return Errorf(CodeInvalidInput, "Unknown action %q. Actions: %s. Nothing was done.", name, strings.Join(Actions(), ", "))
	}
	a.action = name
	delete(a.m, "action")
	return nil
}

// dropUnknown takes out the arguments the action does not take: listed as
// ignored (R3.6), or refused by an action that refuses them.
func (a *args) dropUnknown() *Error {
	known := actionKnown[a.action]
	var unknown []string
	for _, k := range a.order {
		if k == "action" || known[k] {
			continue
		}
		unknown = append(unknown, k)
		delete(a.m, k)
	}
	if len(unknown) == 0 {
		return nil
	}
	if s := a.spec(); s.refuseUnknown != "" {
		return refuseUnknown(s, unknown)
	}
	if len(unknown) > maxIgnored {
		unknown = unknown[:maxIgnored]
	}
	a.ignored = unknown
	return nil
}

// refuseUnknown is the refusal of an action that takes no unknown arguments.
func refuseUnknown(s *actionSpec, unknown []string) *Error {
	for _, k := range unknown {
		if slices.Contains(s.ownerOnly, k) {
			return Errorf(CodeInvalidInput, "Whether a session may start sessions is the owner's setting alone. %s", s.refuseUnknown)
		}
	}
	return Errorf(CodeInvalidInput, "%s does not take: %s. Its arguments: %s. %s",
		s.name, strings.Join(unknown, ", "), strings.Join(s.args, ", "), s.refuseUnknown)
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
