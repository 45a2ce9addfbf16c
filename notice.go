package relay

import "time"

// The events of an owner notification (R23.10), as the config's
// notify.webhooks[].events name them.
const (
	NoticeCard  = "card"  // an approval card waits for the owner
	NoticeAsk   = "ask"   // an ask (R10) or a question card (ask_user) waits for the owner
	NoticeReply = "reply" // a turn the owner or this relay's agents started has its reply
	NoticeError = "error" // such a turn ended with an error
)

// NoticeEvents lists the events in the order the docs name them.
var NoticeEvents = []string{NoticeCard, NoticeAsk, NoticeReply, NoticeError}

// OwnerNotice is one notification for the owner (R23.10): something waits
// for them or is ready. The domain decides which events are one; the
// console's live stream and the webhooks both carry it as it is.
type OwnerNotice struct {
	At      time.Time `json:"at"`
	Event   string    `json:"event"`   // card, ask, reply or error
	Heading string    `json:"heading"` // the notification's title: "Approval needed · TITLE", …
	OpenURL string    `json:"openUrl"` // the session's console page, {public URL}/s/{id} ("" when no URL is known)
	Session string    `json:"session"` // the session's id
	Text    string    `json:"text"`    // what waits or the reply's beginning, one line, clipped
	Title   string    `json:"title"`   // the session's title
}

// NoticeHeading is a notification's title for an event and a session's
// title: "Approval needed · TITLE", "Question · TITLE", "Reply ready ·
// TITLE", "Turn failed · TITLE".
func NoticeHeading(event, title string) string {
	head := map[string]string{NoticeCard: "Approval needed", NoticeAsk: "Question", NoticeReply: "Reply ready", NoticeError: "Turn failed"}[event]
	if head == "" {
		head = event
	}
	return head + " · " + title
}
