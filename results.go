package relay

import "encoding/json"

// Typed results of the domain's owner operations (the owner API's answers).
// Fields are declared in the order of their JSON keys, sorted, as
// encoding/json wrote the maps they replace; omitempty where the map left
// the key out.

// MessageQueued answers an owner's message (POST /sessions/{id}/messages).
// An external session's (R24.7) is kept, not delivered: Delivered false
// and Note say so; the other answers leave both out.
type MessageQueued struct {
	Delivered *bool  `json:"delivered,omitempty"`
	MessageID string `json:"message_id"`
	Note      string `json:"note,omitempty"`
	Session   string `json:"session"`
	Status    string `json:"status"`
}

// StopRequested answers POST /sessions/{id}/stop.
type StopRequested struct {
	Note          string `json:"note,omitempty"` // "nothing was running"
	Session       string `json:"session"`
	StopRequested bool   `json:"stopRequested"`
}

// SessionToken answers POST /sessions/{id}/token (R23.5): an external
// session's new token, shown this once.
type SessionToken struct {
	Session string `json:"session"`
	Token   string `json:"token"`
}

// SessionKilled answers POST /sessions/{id}/kill (R23.6): Killed says
// whether an agent process of the session (kept, or its running turn's) ran.
type SessionKilled struct {
	Killed  bool   `json:"killed"`
	Session string `json:"session"`
}

// SessionArchived answers POST /sessions/{id}/archive.
type SessionArchived struct {
	Archived bool   `json:"archived"`
	Session  string `json:"session"`
}

// SessionDeleted answers DELETE /sessions/{id}.
type SessionDeleted struct {
	Deleted bool   `json:"deleted"`
	Session string `json:"session"`
}

// GroupCreated answers POST /groups.
type GroupCreated struct {
	CreatedAt    string `json:"createdAt"`
	ID           string `json:"id"`
	MemberCount  int    `json:"memberCount"`
	Name         string `json:"name"`
	OwnerCreated bool   `json:"ownerCreated"`
}

// Group is a group as the owner's list shows it (GET /groups) and PATCH
// /groups/{id} answers; Head is "" for an owner's group.
type Group struct {
	Head         string `json:"head"`
	ID           string `json:"id"`
	MemberCount  int    `json:"memberCount"`
	Name         string `json:"name"`
	OwnerCreated bool   `json:"ownerCreated"`
}

// GroupDissolved answers DELETE /groups/{id}: its members stay, ungrouped.
type GroupDissolved struct {
	Dissolved bool     `json:"dissolved"`
	ID        string   `json:"id"`
	Ungrouped []string `json:"ungrouped"`
}

// Ended answers the end of a schedule or a subscription (DELETE
// /schedules/{id}, DELETE /subscriptions/{id}); Note and Relay only for a
// subscription held on a paired relay.
type Ended struct {
	EndReason string `json:"endReason"`
	ID        string `json:"id"`
	Note      string `json:"note,omitempty"`
	Relay     string `json:"relay,omitempty"`
}

// PeerTokenIssued answers POST /peer-tokens: the token, shown only once.
type PeerTokenIssued struct {
	CreatedAt string `json:"createdAt"`
	ID        string `json:"id"`
	Note      string `json:"note"`
	Relay     string `json:"relay"`
	Scope     string `json:"scope"` // all | started (R18.35)
	Token     string `json:"token"`
	URL       string `json:"url"`
}

// PeerTokenRevoked answers DELETE /peer-tokens/{id}.
type PeerTokenRevoked struct {
	ID      string `json:"id"`
	Revoked bool   `json:"revoked"`
}

// Unpaired answers DELETE /relays/{name}.
type Unpaired struct {
	AsksEnded          int    `json:"asksEnded"`
	Name               string `json:"name"`
	Note               string `json:"note,omitempty"` // the paired relay did not answer
	Removed            bool   `json:"removed"`
	SubscriptionsEnded int    `json:"subscriptionsEnded"`
}

// PairedRelay is a pairing as the owner sees it (POST, PATCH and GET /relays).
// A time never seen is null.
type PairedRelay struct {
	Host          string  `json:"host"`
	LastSeenAt    *string `json:"lastSeenAt"`
	Name          string  `json:"name"`
	OfflineReason string  `json:"offlineReason,omitempty"`
	Online        bool    `json:"online"`
	PairedAt      *string `json:"pairedAt"`
	Permission    string  `json:"permission"`
	RemoteName    string  `json:"remoteName,omitempty"` // the name it calls itself, when not Name
	URL           string  `json:"url"`
	Version       string  `json:"version"`
}

// AskAnswered is an ask once answered or dismissed (POST /inbox/{id}, and
// a paired relay's inbox through POST /peer/v1/inbox/{id}). Answer and
// Choice are null when empty.
type AskAnswered struct {
	Answer         *string  `json:"answer"`
	Choice         *string  `json:"choice"`
	CreatedAt      *string  `json:"createdAt"`
	Detail         string   `json:"detail,omitempty"`
	Dismissed      bool     `json:"dismissed"`
	EndedAt        *string  `json:"endedAt"`
	ID             string   `json:"id"`
	Options        []string `json:"options"`
	Question       string   `json:"question"`
	QuestionID     string   `json:"question_id"`
	Recommendation string   `json:"recommendation,omitempty"`
	Session        string   `json:"session"`
	Status         string   `json:"status"` // answered | dismissed
	Via            string   `json:"via,omitempty"`
}

// SessionDetail is a session as read_session shows it (GET /sessions/{id},
// and the answers of POST and PATCH /sessions). Cards, Watching and a false
// Watched are the owner's read only (GET /sessions/{id}); Token and
// MessageID only POST /sessions'.
type SessionDetail struct {
	Archived          bool                `json:"archived,omitempty"`
	Branch            string              `json:"branch"`
	Cards             []*Card             `json:"cards,omitzero"`
	Cwd               string              `json:"cwd"`
	Effort            string              `json:"effort"`
	Group             *GroupRef           `json:"group"`
	ID                string              `json:"id"`
	InFlight          *string             `json:"inFlight"` // the running turn's reply so far
	LastActivityAt    *string             `json:"lastActivityAt"`
	MayCreateSessions bool                `json:"mayCreateSessions,omitempty"`
	MessageCount      int                 `json:"messageCount"`
	MessageID         string              `json:"message_id,omitempty"`
	Messages          []Message           `json:"messages"`
	Mode              string              `json:"mode"`
	Model             string              `json:"model"`
	PendingQuestions  []PendingQuestion   `json:"pendingQuestions"`
	Provider          string              `json:"provider"`
	Repo              string              `json:"repo"`
	StartedBy         *Ref                `json:"startedBy,omitempty"`
	State             string              `json:"state"`
	Tasks             []*Task             `json:"tasks"`
	Title             string              `json:"title"`
	Token             string              `json:"token,omitempty"`
	Via               string              `json:"via,omitempty"` // R4.11, R23.9: the badge of a session an agent started
	Watched           *bool               `json:"watched,omitempty"`
	Watching          []*SubscriptionItem `json:"watching,omitzero"` // its subscriptions, those on paired relays too
}

// IsWatched says whether a subscription watches the session.
func (d *SessionDetail) IsWatched() bool { return d.Watched != nil && *d.Watched }

// GroupRef is a session's group as its session shows it; Members only in a
// session's detail (the others, oldest first).
type GroupRef struct {
	ID      string        `json:"id"`
	Members []GroupMember `json:"members,omitzero"`
	Name    string        `json:"name"`
	Role    string        `json:"role"` // head | member
}

// GroupMember is another session of a session's group.
type GroupMember struct {
	Archived bool   `json:"archived"`
	ID       string `json:"id"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Title    string `json:"title"`
}

// Message is one message of a session's detail.
type Message struct {
	CreatedAt *string `json:"createdAt"`
	From      *Ref    `json:"from,omitempty"`
	ID        string  `json:"id"`
	Outcome   string  `json:"outcome,omitempty"` // an activity line's relay_tool call: "ok[, STATUS]" or its error code (R23.3)
	Role      string  `json:"role"`
	Text      string  `json:"text"`
}

// PendingQuestion is a question (ask_user) or an ask open in a session.
type PendingQuestion struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Options  []string `json:"options"`
	Question string   `json:"question"`
}

// SessionItem is a session as list_sessions and GET /sessions list it. Via
// is the owner API's badge of a session an agent started (R4.11). Preview
// is the console's one plain line of the last prompt or reply (R23.1), not
// in the API's or the tool's answers.
type SessionItem struct {
	Archived          bool         `json:"archived,omitempty"`
	Cwd               string       `json:"cwd"`
	Group             *GroupRef    `json:"group"`
	ID                string       `json:"id"`
	LastActivityAt    *string      `json:"lastActivityAt"`
	MayCreateSessions bool         `json:"mayCreateSessions,omitempty"`
	MessageCount      int          `json:"messageCount"`
	Mode              string       `json:"mode"`
	Model             string       `json:"model"`
	Preview           string       `json:"-"`
	Provider          string       `json:"provider"`
	StartedBy         *Ref         `json:"startedBy,omitempty"`
	State             string       `json:"state"`
	Tasks             []*TaskBrief `json:"tasks"`
	Title             string       `json:"title"`
	Via               string       `json:"via,omitempty"`
	Watched           bool         `json:"watched,omitempty"`
}

// SessionRef is a session named by its id and title (a schedule's target,
// a subscription's sessions).
type SessionRef struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// Schedule is a schedule as list_schedules and GET /schedules show it
// (R9.7). SetBy is the conversation that set it when not the viewer's (the
// owner's list always names it); the end's fields only once ended, the
// hold's while held for approval. A time never set is null, as is
// everyMinutes for a schedule that fires once.
type Schedule struct {
	At              *string    `json:"at"`
	EndReason       string     `json:"endReason,omitempty"`
	EndedAt         *string    `json:"endedAt,omitempty"`
	EveryMinutes    *int       `json:"everyMinutes"`
	FiredCount      int        `json:"firedCount"`
	HeldForApproval bool       `json:"heldForApproval,omitempty"`
	HeldSince       *string    `json:"heldSince,omitempty"`
	ID              string     `json:"id"`
	LastFiredAt     *string    `json:"lastFiredAt"`
	NextFireAt      *string    `json:"nextFireAt"` // null once ended
	Once            bool       `json:"once"`
	Session         SessionRef `json:"session"` // the conversation it fires into
	SetBy           string     `json:"setBy,omitempty"`
	SkippedCount    int        `json:"skippedCount,omitempty"`
	TextStart       string     `json:"textStart"`
	Title           string     `json:"title"`
}

// WatchedSessions is what a subscription watches: all sessions ("all"), or
// the sessions of List (a list, [] when empty).
type WatchedSessions struct {
	All  bool
	List []SessionRef
}

// MarshalJSON writes "all" or the list.
func (w WatchedSessions) MarshalJSON() ([]byte, error) {
	if w.All {
		return []byte(`"all"`), nil
	}
	if w.List == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(w.List)
}

// QuietHours are a subscription's quiet hours as given (R8.9).
type QuietHours struct {
	From string `json:"from"`
	To   string `json:"to"`
	TZ   string `json:"tz"`
}

// Subscription is a subscription as subscribe and transfer_subscriptions
// answer it: an option only when set; Relay for one held on a paired relay,
// MovedFrom for one transfer_subscriptions moved.
type Subscription struct {
	CreatedAt        *string         `json:"createdAt"`
	DigestMinutes    int             `json:"digestMinutes,omitempty"`
	Events           []string        `json:"events"`
	Exclude          []string        `json:"exclude,omitempty"`
	HeartbeatMinutes int             `json:"heartbeatMinutes,omitempty"`
	ID               string          `json:"id"`
	Match            string          `json:"match,omitempty"`
	MovedFrom        string          `json:"movedFrom,omitempty"`
	Once             bool            `json:"once"`
	QuietHours       *QuietHours     `json:"quietHours,omitempty"`
	Relay            string          `json:"relay,omitempty"`
	Scope            string          `json:"scope"` // all | sessions
	Sessions         WatchedSessions `json:"sessions"`
	StalledMinutes   int             `json:"stalledMinutes"`
}

// SubscriptionItem is a subscription as list_subscriptions lists it (and
// a session's watching, R8.23): every option shows, null when unset; what
// this relay holds of it (heldCount, nextDeliveryAt) shows while it is
// active, and once ended only while it still holds events.
type SubscriptionItem struct {
	CreatedAt        *string         `json:"createdAt"`
	DigestMinutes    *int            `json:"digestMinutes"`
	EndReason        string          `json:"endReason,omitempty"`
	EndedAt          *string         `json:"endedAt,omitempty"`
	Events           []string        `json:"events"`
	Exclude          []string        `json:"exclude"` // null when none
	HeartbeatMinutes *int            `json:"heartbeatMinutes"`
	HeldCount        *int            `json:"heldCount,omitempty"`
	ID               string          `json:"id"`
	Match            *string         `json:"match"`
	NextDeliveryAt   Shown[string]   `json:"nextDeliveryAt,omitzero"`
	Once             bool            `json:"once"`
	QuietHours       *QuietHours     `json:"quietHours"`
	Relay            string          `json:"relay,omitempty"`
	Scope            string          `json:"scope"`
	Sessions         WatchedSessions `json:"sessions"`
	StalledMinutes   int             `json:"stalledMinutes"`
}

// Shown is a value that a result either leaves out (not Set: a field of it
// takes omitzero) or shows, null when V is nil.
type Shown[T any] struct {
	Set bool
	V   *T
}

// Show is a Shown value: v, or null for nil.
func Show[T any](v *T) Shown[T] { return Shown[T]{Set: true, V: v} }

// IsZero reports a value left out.
func (s Shown[T]) IsZero() bool { return !s.Set }

// MarshalJSON writes the value or null.
func (s Shown[T]) MarshalJSON() ([]byte, error) { return json.Marshal(s.V) }

// InboxAsk is an open ask as the owner's inbox lists it (GET /inbox, and
// to a paired relay GET /peer/v1/inbox, R10.3). SessionTitle is left out
// when the session it concerns is unreadable; Relay names the relay that
// keeps it, in GET /inbox?relays=all only. On and AskerTitle are the
// console's, never written.
type InboxAsk struct {
	Asker          string   `json:"asker"` // the conversation that asked
	CreatedAt      *string  `json:"createdAt"`
	Detail         string   `json:"detail,omitempty"`
	ID             string   `json:"id"`
	Options        []string `json:"options"`
	Question       string   `json:"question"`
	QuestionID     string   `json:"question_id"`
	Recommendation string   `json:"recommendation,omitempty"`
	Relay          string   `json:"relay,omitempty"`
	Session        string   `json:"session"` // the session it concerns
	SessionTitle   *string  `json:"sessionTitle,omitempty"`
	Status         string   `json:"status"`

	On         string `json:"-"` // the paired relay it is kept on (answered there)
	AskerTitle string `json:"-"` // the title of this relay's session that asked
}

// Title is the title of the session the ask concerns, "" when unknown.
func (a *InboxAsk) Title() string {
	if a.SessionTitle == nil {
		return ""
	}
	return *a.SessionTitle
}

// Unreachable is a paired relay whose inbox did not answer (GET
// /inbox?relays=all): its code and sentence.
type Unreachable struct {
	Code  string `json:"code"`
	Error string `json:"error"`
	Relay string `json:"relay"`
}

// TaskBrief is a background task as a session's list item shows it.
type TaskBrief struct {
	Description string `json:"description"`
	Status      string `json:"status"`
	TaskID      string `json:"taskId"`
	Type        string `json:"type"` // local_bash | local_agent | monitor
}

// Task is a background task as read_session shows it (R7.5): Output says
// whether read_task_output reads it (not a subagent's); Counts once its
// output holds a test runner's counts; Health while it runs. Tail is the
// console's, never written.
type Task struct {
	Counts      *TaskCounts `json:"counts,omitempty"`
	Description string      `json:"description"`
	Health      *TaskHealth `json:"health,omitempty"`
	Output      bool        `json:"output"`
	Status      string      `json:"status"`
	TaskID      string      `json:"taskId"`
	Type        string      `json:"type"`

	Tail []string `json:"-"` // the last lines of its output
}

// TaskCounts are a test run's counts read from a task's output (taskout's
// Counts; its keys in their order).
type TaskCounts struct {
	Runner  string `json:"runner"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	Final   bool   `json:"final"`
}

// TaskHealth is a running task's quiet time.
type TaskHealth struct {
	MinutesSinceOutput int  `json:"minutesSinceOutput"`
	Quiet              bool `json:"quiet"`
	QuietAfterMinutes  int  `json:"quietAfterMinutes"`
}
