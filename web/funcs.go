package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/oar/relay"
)

// timeLayout is how the domain writes times (relay.ts).
const timeLayout = "2006-01-02T15:04:05.000Z"

// funcs is the pages' template functions, by theme.
func (c *console) funcs() template.FuncMap {
	m := template.FuncMap{}
	for _, part := range []template.FuncMap{textFuncs(), timeFuncs(), listFuncs()} {
		maps.Copy(m, part)
	}
	return m
}

// textFuncs write values as words: short ids, states and roles, lists.
func textFuncs() template.FuncMap {
	return template.FuncMap{
		"id8":   id8,
		"state": func(x any) string { return labelOf(stateLabels, x) },
		"role":  func(x any) string { return labelOf(roleLabels, x) },
		"choices": func(opt string) string {
			b, _ := json.Marshal(map[string]any{"choices": []string{opt}})
			return string(b)
		},
		"join":    func(xs []string) string { return strings.Join(xs, "\n") },
		"joinAny": joinAny,
		// hash names a live element after its content, so a change replaces it.
		"hash": func(xs ...any) string {
			b, _ := json.Marshal(xs)
			h := sha256.Sum256(b)
			return hex.EncodeToString(h[:5])
		},
		"plural": plural,
		// minutes writes seconds as minutes ("2", "2.5"): the settings page's unit (R23.11).
		"minutes": func(sec int) string { return strconv.FormatFloat(float64(sec)/60, 'f', -1, 64) },
	}
}

// timeFuncs write times: how long ago, the clock, RFC 3339.
func timeFuncs() template.FuncMap {
	return template.FuncMap{
		"ago":   ago,
		"clock": func(t time.Time) string { return t.UTC().Format("15:04 UTC") },
		"rfc":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}
}

// listFuncs make the parts of the pages' lists and blocks: session rows,
// badges, subscriptions, the modes, the MCP setup.
func listFuncs() template.FuncMap {
	return template.FuncMap{
		"subSessions": subSessions,
		"modes":       func() []string { return []string{"agent", "ask", "plan"} },
		"row":         func(s *relay.SessionItem, v *view) sessionRow { return v.row(sessionRow{S: s}) },
		// rowIn is a session's row in the grouped list, with its role there.
		"rowIn": func(r *sessionRow, v *view) sessionRow { return v.row(*r) },
		"via": func(ref *relay.Ref, here string, link bool) viaBadge {
			return viaBadge{Ref: ref, Link: link, Remote: ref.Relay != "" && ref.Relay != here}
		},
		// mcpSetup names an MCP client settings block: its ids' prefix and the relay's /mcp URL (R23.5).
		"mcpSetup": func(prefix, url string) mcpSetup { return mcpSetup{P: prefix, URL: url} },
	}
}

// id8 is an id's first 8 characters (a string or a *string; nil: "").
func id8(x any) string {
	s := ""
	switch v := x.(type) {
	case string:
		s = v
	case *string:
		if v != nil {
			s = *v
		}
	}
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// stateLabels and roleLabels are the words the pages show for a session's
// state and a message's role; others show as they are.
var (
	stateLabels = map[string]string{"running_turn": "running", "background_only": "background work", "idle": "idle"}
	roleLabels  = map[string]string{
		"user":      "You",
		"agent":     "Agent prompt",
		"assistant": "Agent",
		"event":     "Event",
		"schedule":  "Schedule",
		"activity":  "Tool call", // 🛰️ lines of an agent CLI (R17.3)
	}
)

func labelOf(labels map[string]string, x any) string {
	if l, ok := labels[str(x)]; ok {
		return l
	}
	return str(x)
}

// joinAny joins a list with commas; anything else is written as it is.
func joinAny(x any) string {
	switch v := x.(type) {
	case []string:
		return strings.Join(v, ", ")
	case []any:
		parts := make([]string, 0, len(v))
		for _, p := range v {
			parts = append(parts, fmt.Sprint(p))
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprint(x)
}

// subSessions names the sessions a subscription watches.
func subSessions(sub *relay.SubscriptionItem) string {
	if sub.Sessions.All {
		return "all sessions"
	}
	names := []string{}
	for _, s := range sub.Sessions.List {
		t := s.Title
		if t == "" {
			t = s.ID
		}
		names = append(names, fmt.Sprintf("%q", t))
	}
	return strings.Join(names, ", ")
}

type sessionRow struct {
	S      *relay.SessionItem
	Role   string // in the grouped list: "head" or "member" of the group above it; "" alone
	Mark   string
	Clocks int
	Here   string // this relay's name
	Open   bool   // the session open beside the list
}

// row is r as the page shows it: its marks, its schedules' ⏰, and whether
// it is the session open beside the list.
func (v *view) row(r sessionRow) sessionRow {
	id := r.S.ID
	r.Mark, r.Clocks, r.Here, r.Open = v.Marks[id], v.Clocks[id], v.Relay, v.Open != "" && v.Open == id
	return r
}

// viaBadge is a "via agent" badge (R4.11, R23.9): Remote when an agent on a
// paired relay started the session (no link: that conversation is not on
// this relay); Link to the starting conversation otherwise, where asked.
type viaBadge struct {
	Ref          *relay.Ref
	Link, Remote bool
}

// timeText is t as the domain writes times; "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// ago writes a domain time as a short relative or absolute time.
func ago(x any) string {
	s := str(x)
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return s
	}
	d := time.Since(t)
	switch {
	case d < 0 && d > -time.Minute:
		return "now"
	case d < 0:
		return "at " + t.UTC().Format("2006-01-02 15:04 UTC")
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// mcpSetup is the "mcpsetup" template's data: its elements' id prefix and
// the relay's MCP URL.
type mcpSetup struct{ P, URL string }
