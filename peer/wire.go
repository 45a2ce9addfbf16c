// Package peer is the peer protocol between paired relays (§13): the wire
// types both sides use (the serving side is the domain's, behind the api's
// /peer/v1 routes) and the HTTP client of the calling side. It knows the
// protocol's requests and answers, not the relay's rules: a call's result
// envelope is the domain's to read.
package peer

import (
	"encoding/json"
	"time"

	"github.com/oar/relay/store"
)

const (
	// HelloTimeout is how long pairing tries hello (R13.1a), and the poller's
	// hello to each pairing.
	HelloTimeout = 5 * time.Second
	// MaxAnswer is the largest answer read: a peer's answer larger than this
	// is not a relay's answer.
	MaxAnswer = 4 << 20
	// EventsBatch is how many events one GET /peer/v1/events answers at most.
	EventsBatch = 100
)

// Hello is a relay's answer to GET /peer/v1/hello.
type Hello struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Instance string   `json:"instance"`
	Features []string `json:"features"`
	// PublicURL is the relay's own public URL (its console's base, R23.8);
	// absent from a relay that reports none (or is older).
	PublicURL string `json:"publicUrl,omitempty"`
}

// Origin is the calling agent and its chain, sent with every call (R13.1, R4.7, R4.8).
type Origin struct {
	Relay    string   `json:"relay"`
	Session  string   `json:"session"`
	Title    string   `json:"title"`
	Model    string   `json:"model"`
	Path     []string `json:"path"`
	Unlocked []string `json:"unlocked"`
}

// CallBody is the body of POST /peer/v1/call and POST /peer/v1/check.
type CallBody struct {
	Action string                     `json:"action"`
	Args   map[string]json.RawMessage `json:"args"`
	Origin Origin                     `json:"origin"`
}

// Events is the answer of GET /peer/v1/events.
type Events struct {
	Events []store.Event `json:"events"`
	Cursor string        `json:"cursor"`
	Ended  string        `json:"ended,omitempty"` // the subscription's endReason once it ended there
}

// InboxAnswer is the body of POST /peer/v1/inbox/{id}: the owner's answer
// to an ask kept on the other relay, given in this relay's inbox.
type InboxAnswer struct {
	Answer  string `json:"answer"`
	Choice  string `json:"choice"`
	Dismiss bool   `json:"dismiss"`
	Via     string `json:"via"` // the relay whose inbox the owner answered in
}

// Checked is what POST /peer/v1/check answers in `check`.
type Checked struct {
	Action   string         `json:"action"`
	Session  *CheckedRef    `json:"session,omitempty"`  // send, update_session, stop, archive, ask, answer_question: the target
	Title    string         `json:"title,omitempty"`    // create_session: the new session's title
	Provider string         `json:"provider,omitempty"` // the provider's name the turn runs on
	Model    string         `json:"model,omitempty"`
	Effort   string         `json:"effort,omitempty"`
	Mode     string         `json:"mode,omitempty"`
	Cwd      string         `json:"cwd,omitempty"`
	Group    *CheckedRef    `json:"group,omitempty"`   // create_session: the group it joins (id, name)
	Billing  string         `json:"billing,omitempty"` // send with provider: the partner's name it switches to (R7.8)
	Changes  []CheckedValue `json:"changes,omitempty"` // update_session: what would change, in argument order
	Changed  []string       `json:"changed,omitempty"` // update_session: the names of those settings
	// StartedByCaller: update_session's session was started by the calling
	// conversation, as this relay recorded it (R7.10: no card).
	StartedByCaller bool         `json:"startedByCaller,omitempty"`
	Watched         []CheckedRef `json:"watched,omitempty"` // subscribe: the sessions watched
	All             bool         `json:"all,omitempty"`
	Events          []string     `json:"events,omitempty"`
	DigestMinutes   int          `json:"digestMinutes,omitempty"`
	QuietHours      *store.Quiet `json:"quietHours,omitempty"`
	Excluded        int          `json:"excluded,omitempty"`
}

// CheckedRef is a session or group the check resolved.
type CheckedRef struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`  // a group's
	Title string `json:"title,omitempty"` // a session's
}

// CheckedValue is one setting update_session would change: its name, the
// card's label and the new value (and a group's id; "new" for a group the
// call would create).
type CheckedValue struct {
	Setting string `json:"setting"`
	Label   string `json:"label"`
	Value   string `json:"value"`
	ID      string `json:"id,omitempty"`
}
