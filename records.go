package relay

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Ref names a session on a relay (startedBy, from).
type Ref struct {
	Relay   string `json:"relay"`
	Session string `json:"session"`
	Title   string `json:"title"`
	Model   string `json:"model,omitempty"`
}

// Question is a question card (kind ask_user) a session's agent waits on.
type Question struct {
	ID         string    `json:"id"`
	Session    string    `json:"session"`
	Turn       string    `json:"turn"`
	Kind       string    `json:"kind"`
	Question   string    `json:"question"`
	Options    []string  `json:"options"`
	Status     string    `json:"status"` // pending | answered
	Answer     string    `json:"answer,omitempty"`
	AnsweredBy string    `json:"answeredBy,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
}

// Card is an approval card (R5.1).
type Card struct {
	ID        string    `json:"id"`
	Session   string    `json:"session"`
	Action    string    `json:"action"`
	Relay     string    `json:"relay"`
	Target    *string   `json:"target"`
	Lines     []string  `json:"lines"`
	CreatedAt time.Time `json:"createdAt"`
	Decision  string    `json:"decision,omitempty"` // "" | allow | deny | withdrawn
}

// Settings are the owner's run-time settings (SPEC §12).
type Settings struct {
	AgentSessions      bool `json:"agent_sessions"`
	AcceptAgentPrompts bool `json:"accept_agent_prompts"`
	MaxWaitSeconds     int  `json:"max_wait_seconds"`
	QuietTaskMinutes   int  `json:"quiet_task_minutes"`
	MaxTurnSeconds     int  `json:"max_turn_seconds"`
}

// TokenHash is the hex SHA-256 of a token, the only form kept at rest (R18.19).
func TokenHash(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}
