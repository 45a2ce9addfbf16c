package domain

import (
	"encoding/json"

	"github.com/oar/relay/store"
	"github.com/oar/relay/taskout"

	relay "github.com/oar/relay"
)

// The typed results of the relay_tool actions (R3.1): one struct per
// action's fields. The envelope (ok, relay, summary, ignored) is added by
// [result.fields], which writes the top-level keys sorted; the fields of a
// nested struct are declared in sorted key order, as encoding/json writes a
// struct's fields in declaration order and a map's keys sorted.

// opt is a result field that is left out (unset) or written, as its value
// or, for a nil value, as null.
type opt[T any] struct {
	ok bool
	v  T
}

// some is an opt that is written.
func some[T any](v T) opt[T] { return opt[T]{ok: true, v: v} }

// IsZero leaves an unset opt out (omitzero).
func (o opt[T]) IsZero() bool { return !o.ok }

// MarshalJSON writes the value.
func (o opt[T]) MarshalJSON() ([]byte, error) { return json.Marshal(o.v) }

// joinNote adds v to a note already there.
func joinNote(old, v string) string {
	if old != "" {
		return old + " " + v
	}
	return v
}

// statused is a result whose status the call's 🛰️ line shows (R23.3).
type statused interface{ resultStatus() string }

// turnReply is a done turn's reply (R7.7).
type turnReply struct {
	Model string `json:"model"`
	Text  string `json:"text"`
}

// groupRef is a session's group in a result.
type groupRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
}

// groupMade is a group update_session created.
type groupMade struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// groupBrief is a group as relay_info lists it (R7.2).
type groupBrief struct {
	ID          string `json:"id"`
	MemberCount int    `json:"memberCount"`
	Name        string `json:"name"`
}

// promptResult is the result of a prompting action: send, wait and
// create_session (R7.7, R7.11; create_session's settings, R7.9).
type promptResult struct {
	Branch           opt[string]                  `json:"branch,omitzero"`
	Effort           opt[string]                  `json:"effort,omitzero"`
	Group            opt[*groupRef]               `json:"group,omitzero"`
	GroupWarning     string                       `json:"groupWarning,omitempty"`
	MessageID        string                       `json:"message_id"`
	Mode             opt[string]                  `json:"mode,omitzero"`
	Model            opt[string]                  `json:"model,omitzero"`
	ModelNote        string                       `json:"modelNote,omitempty"`
	Note             string                       `json:"note,omitempty"`
	OpenURL          *string                      `json:"openUrl"`
	Partial          opt[string]                  `json:"partial,omitzero"`
	PendingQuestions opt[[]relay.PendingQuestion] `json:"pendingQuestions,omitzero"`
	Provider         opt[string]                  `json:"provider,omitzero"`
	Reply            *turnReply                   `json:"reply,omitempty"`
	Repo             opt[string]                  `json:"repo,omitzero"`
	Session          string                       `json:"session"`
	Status           store.TurnStatus             `json:"status"`
	Title            opt[string]                  `json:"title,omitzero"`
	TurnError        opt[string]                  `json:"turnError,omitzero"`
}

func (p *promptResult) resultStatus() string { return string(p.Status) }

// relayEntry is a relay as list_relays lists it (R7.1): this one or a paired one.
type relayEntry struct {
	Host       opt[string] `json:"host,omitzero"`
	Name       string      `json:"name"`
	Online     bool        `json:"online"`
	Permission string      `json:"permission"`
	Self       bool        `json:"self,omitempty"`
	Unlocked   bool        `json:"unlocked"`
	URL        opt[string] `json:"url,omitzero"`
	Version    string      `json:"version"`
}

type relayName struct {
	Name string `json:"name"`
}

type relayLimits struct {
	MaxActiveSessions int `json:"maxActiveSessions"`
	MaxWaitSeconds    int `json:"maxWaitSeconds"`
}

// listRelaysResult is list_relays' result (R7.1).
type listRelaysResult struct {
	Limits relayLimits  `json:"limits"`
	Relays []relayEntry `json:"relays"`
	Self   relayName    `json:"self"`
}

// providerInfo is a provider as relay_info lists it (R7.2).
type providerInfo struct {
	Available    bool        `json:"available"`
	Billing      string      `json:"billing,omitempty"`
	DefaultModel string      `json:"defaultModel"`
	Efforts      []string    `json:"efforts"`
	ID           string      `json:"id"`
	Models       []string    `json:"models"`
	Name         string      `json:"name"`
	Repos        bool        `json:"repos,omitempty"`
	Status       opt[string] `json:"status,omitzero"`
	StatusReason opt[string] `json:"statusReason,omitzero"`
}

// relayInfoResult is relay_info's result (R7.2).
type relayInfoResult struct {
	AcceptsAgentPrompts bool           `json:"acceptsAgentPrompts"`
	DefaultCwd          string         `json:"defaultCwd"`
	Groups              []groupBrief   `json:"groups"`
	GroupsNote          string         `json:"groupsNote,omitempty"`
	GroupsTotal         int            `json:"groupsTotal,omitempty"`
	Modes               []string       `json:"modes"`
	Name                string         `json:"name"`
	Platform            string         `json:"platform"`
	Providers           []providerInfo `json:"providers"`
	RecentCwds          []string       `json:"recentCwds"`
	Version             string         `json:"version"`
}

// usageCounted is what this relay counted of a provider (R7.3).
type usageCounted struct {
	CostUSD      float64 `json:"costUSD,omitempty"`
	InputTokens  int64   `json:"inputTokens"`
	OutputTokens int64   `json:"outputTokens"`
	Turns        int64   `json:"turns"`
}

// providerUsage is a provider as usage lists it (R7.3, R7.8, R17.3).
type providerUsage struct {
	Counted      usageCounted `json:"counted"`
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	Note         string       `json:"note"`
	Paused       bool         `json:"paused"`
	PausedAt     opt[*string] `json:"pausedAt,omitzero"`
	PausedReason opt[string]  `json:"pausedReason,omitzero"`
	Quota        opt[float64] `json:"quota,omitzero"`
	Remaining    opt[float64] `json:"remaining,omitzero"`
	ResetsAt     opt[*string] `json:"resetsAt,omitzero"`
	Status       string       `json:"status"`
	StatusReason opt[string]  `json:"statusReason,omitzero"`
	Tracked      bool         `json:"tracked"`
	Unit         opt[string]  `json:"unit,omitzero"`
	Used         opt[float64] `json:"used,omitzero"`
	Utilization  opt[float64] `json:"utilization,omitzero"`
}

type usageResult struct {
	Providers []*providerUsage `json:"providers"`
}

type listSessionsResult struct {
	Sessions  []*relay.SessionItem `json:"sessions"`
	Total     int                  `json:"total"`
	Truncated bool                 `json:"truncated,omitempty"`
}

// taskOutputTask is the task read_task_output reads (R7.6).
type taskOutputTask struct {
	Description string  `json:"description"`
	ExitCode    *int    `json:"exitCode"`
	ID          string  `json:"id"`
	StartedAt   *string `json:"startedAt"`
	Status      string  `json:"status"`
	Type        string  `json:"type"`
}

// taskStall is how long a running task has been quiet (R7.6).
type taskStall struct {
	Minutes           int     `json:"minutes"`
	Quiet             bool    `json:"quiet"`
	QuietAfterMinutes int     `json:"quietAfterMinutes"`
	Since             *string `json:"since"`
}

type taskOutputResult struct {
	Counts    *taskout.Counts `json:"counts,omitempty"`
	Note      string          `json:"note,omitempty"`
	Stall     *taskStall      `json:"stall,omitempty"`
	Tail      []string        `json:"tail"`
	Task      taskOutputTask  `json:"task"`
	Truncated bool            `json:"truncated,omitempty"`
}

// questionView is an ask as list_questions shows it (R10.2).
type questionView struct {
	Answer         opt[*string] `json:"answer,omitzero"`
	AskedBy        opt[string]  `json:"askedBy,omitzero"`
	Choice         opt[*string] `json:"choice,omitzero"`
	CreatedAt      *string      `json:"createdAt"`
	Detail         string       `json:"detail,omitempty"`
	Dismissed      opt[bool]    `json:"dismissed,omitzero"`
	EndedAt        opt[*string] `json:"endedAt,omitzero"`
	ID             string       `json:"id"`
	Options        []string     `json:"options"`
	Question       string       `json:"question"`
	QuestionID     string       `json:"question_id"`
	Recommendation string       `json:"recommendation,omitempty"`
	Session        string       `json:"session"`
	Status         string       `json:"status"`
	Via            string       `json:"via,omitempty"`
}

// askResult is ask's and withdraw's result (R10.1, R10.3).
type askResult struct {
	QuestionID string `json:"question_id"`
	Status     string `json:"status"`
}

func (a *askResult) resultStatus() string { return a.Status }

type listQuestionsResult struct {
	Questions []*questionView `json:"questions"`
}

// scheduleBrief is the schedule a schedule call made (R9.1).
type scheduleBrief struct {
	EveryMinutes *int    `json:"everyMinutes"`
	ID           string  `json:"id"`
	NextFireAt   *string `json:"nextFireAt"`
	Once         bool    `json:"once"`
	Title        string  `json:"title"`
}

type scheduleResult struct {
	Schedule   scheduleBrief `json:"schedule"`
	ScheduleID string        `json:"schedule_id"`
}

type unscheduleResult struct {
	EndReason  string `json:"endReason"`
	ScheduleID string `json:"schedule_id"`
}

// sessionSettings are a session's settings as update_session shows them (R7.10).
type sessionSettings struct {
	AutoCompactWindow compactWindow `json:"auto_compact_window"`
	Cwd               string        `json:"cwd"`
	Effort            string        `json:"effort"`
	Group             *groupRef     `json:"group"`
	Mode              string        `json:"mode"`
	Model             string        `json:"model"`
	Provider          string        `json:"provider"`
	ThinkingDisplay   *string       `json:"thinking_display"`
	ThinkingEnabled   *bool         `json:"thinking_enabled"`
	Title             string        `json:"title"`
}

// compactWindow is auto_compact_window: "auto" for 0 (the provider's own window).
type compactWindow int

func (w compactWindow) MarshalJSON() ([]byte, error) {
	if w > 0 {
		return json.Marshal(int(w))
	}
	return []byte(`"auto"`), nil
}

type updateResult struct {
	Changed      []string        `json:"changed"`
	GroupCreated *groupMade      `json:"groupCreated,omitempty"`
	ModelNote    string          `json:"modelNote,omitempty"`
	Note         string          `json:"note,omitempty"`
	Relaunched   opt[bool]       `json:"relaunched,omitzero"`
	Settings     sessionSettings `json:"settings"`
}

type answerResult struct {
	Answer     string `json:"answer"`
	QuestionID string `json:"question_id"`
}

type stopResult struct {
	Note          string `json:"note,omitempty"`
	StopRequested bool   `json:"stopRequested"`
}

type archiveResult struct {
	Archived bool `json:"archived"`
}

type subscribeResult struct {
	Subscription *relay.Subscription `json:"subscription"`
}

type unsubscribeResult struct {
	Unsubscribed []string `json:"unsubscribed"`
}

type listSubscriptionsResult struct {
	Subscriptions []*relay.SubscriptionItem `json:"subscriptions"`
}

type transferResult struct {
	Ended         []string              `json:"ended,omitempty"`
	Note          string                `json:"note,omitempty"`
	Subscriptions []*relay.Subscription `json:"subscriptions"`
}

type listSchedulesResult struct {
	Schedules []*relay.Schedule `json:"schedules"`
}

// rawString is a paired relay's text field, "" when absent or not text.
func rawString(raw map[string]json.RawMessage, k string) string {
	var s string
	if v, ok := raw[k]; ok {
		_ = json.Unmarshal(v, &s)
	}
	return s
}

// mustJSON is v encoded; v is a value decoded from JSON or a plain value,
// which always encodes.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
