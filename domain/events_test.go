package domain

import (
	"testing"
	"time"

	"github.com/oar/relay/store"
)

func intp(n int) *int { return &n }

// R8.14, R8.14a: the line of every event kind, verbatim.
func TestEventLine(t *testing.T) {
	t.Parallel()
	s := "3f9c2a1e7b04c5d6"
	long := ""
	for len(long) < 130 {
		long += "abcdefghij"
	}
	cases := []struct {
		name string
		ev   store.Event
		want string
	}{
		{"turn_end", store.Event{Kind: EvTurnEnd, Session: s, Title: "Review: server/", Status: "done", Text: "Found 4 places without input checks: …"},
			`[relay event] session "Review: server/" (3f9c2a1e): turn_end (done) "Found 4 places without input checks: …"`},
		{"turn_end cut at 120", store.Event{Kind: EvTurnEnd, Session: s, Title: "t", Status: "error", Text: long},
			`[relay event] session "t" (3f9c2a1e): turn_end (error) "` + long[:120] + `…"`},
		{"paired relay", store.Event{Kind: EvTurnEnd, Relay: "build-box", Session: "77aa01b2ffff", Title: "Nightly deploy", Status: "done", Text: "Deployed. The health check is green."},
			`[relay event] build-box · session "Nightly deploy" (77aa01b2): turn_end (done) "Deployed. The health check is green."`},
		{"error", store.Event{Kind: EvError, Session: s, Title: "t", Text: "boom"},
			`[relay event] session "t" (3f9c2a1e): error "boom"`},
		{"question_asked", store.Event{Kind: EvQuestionAsked, Session: s, Title: "t", QuestionID: "q_1234abcd", Text: "Which DB?"},
			`[relay event] session "t" (3f9c2a1e): question_asked q_1234abcd "Which DB?"`},
		{"task_started", store.Event{Kind: EvTaskStarted, Session: s, Title: "t", TaskID: "b7k2m9q4aa", Text: "npm test"},
			`[relay event] session "t" (3f9c2a1e): task_started b7k2m9q4 "npm test"`},
		{"task_failed", store.Event{Kind: EvTaskFailed, Session: s, Title: "t", TaskID: "b7k2m9q4aa", Text: "npm test", Exit: intp(1)},
			`[relay event] session "t" (3f9c2a1e): task_failed b7k2m9q4 "npm test" (exit 1)`},
		{"task_finished", store.Event{Kind: EvTaskFinished, Session: s, Title: "t", TaskID: "b7k2m9q4aa", Text: "build", Exit: intp(0)},
			`[relay event] session "t" (3f9c2a1e): task_finished b7k2m9q4 "build" (exit 0)`},
		{"subagent_finished", store.Event{Kind: EvSubagentFinished, Session: s, Title: "t", Text: "explore"},
			`[relay event] session "t" (3f9c2a1e): subagent_finished "explore"`},
		{"stalled", store.Event{Kind: EvStalled, Session: s, Title: "t", Minutes: 15},
			`[relay event] session "t" (3f9c2a1e): stalled: no output for 15 min`},
		{"all_idle", store.Event{Kind: EvAllIdle, Sub: "sub_ab12cd34ef", Watched: 2},
			`[relay event] all_idle: no turn or task is running in the 2 watched sessions (subscription sub_ab12cd34ef)`},
		{"heartbeat", store.Event{Kind: EvHeartbeat, Sub: "sub_ab12cd34ef", Watched: 3, Running: 1, Idle: 2},
			`[relay event] heartbeat: 3 watched sessions, 1 running, 2 idle (subscription sub_ab12cd34ef)`},
		{"question_answered", store.Event{Kind: EvQuestionAnswered, QuestionID: "ask_7d2a", Text: "Merge now?", Answer: "yes", Choice: "Merge", Via: "desk"},
			`[relay event] question_answered ask_7d2a "Merge now?": "yes" (choice: Merge, via desk)`},
		{"question dismissed", store.Event{Kind: EvQuestionAnswered, QuestionID: "ask_7d2a", Text: "Merge now?", Dismissed: true, Via: "desk"},
			`[relay event] question_answered ask_7d2a "Merge now?": dismissed (via desk)`},
		{"link_lost", store.Event{Kind: EvLinkLost, Relay: "build-box"}, `[relay event] build-box · link_lost`},
		// Issue 13: quotes inside a title or text are never escaped as \"; R18.16:
		// they become typographic quotes, so they cannot close the line's own.
		{"quotes inside", store.Event{Kind: EvTurnEnd, Session: s, Title: `Say "hi"`, Status: "done", Text: `He said "done" and left`},
			`[relay event] session "Say “hi”" (3f9c2a1e): turn_end (done) "He said “done” and left"`},
		{"answer with quotes", store.Event{Kind: EvQuestionAnswered, QuestionID: "ask_7d2a", Text: `Use "v2"?`, Answer: `yes, "v2"`, Via: "desk"},
			`[relay event] question_answered ask_7d2a "Use “v2”?": "yes, “v2”" (via desk)`},
		{"all_idle of one", store.Event{Kind: EvAllIdle, Sub: "sub_ab12cd34ef", Watched: 1},
			`[relay event] all_idle: no turn or task is running in the 1 watched session (subscription sub_ab12cd34ef)`},
		{"heartbeat of one", store.Event{Kind: EvHeartbeat, Sub: "sub_ab12cd34ef", Watched: 1, Running: 0, Idle: 1},
			`[relay event] heartbeat: 1 watched session, 0 running, 1 idle (subscription sub_ab12cd34ef)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := EventLine(&c.ev); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// R8.14a: the heading lines of digests, quiet-hours releases and wake-limit summaries.
func TestMessageHeadings(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	ev := func(text string, d time.Duration) store.Event {
		return store.Event{Kind: EvTurnEnd, Session: "3f9c2a1e7b04", Title: "t", Status: "done", Text: text, At: at.Add(d)}
	}
	line := func(text string) string {
		return `[relay event] session "t" (3f9c2a1e): turn_end (done) "` + text + `"`
	}
	cases := []struct {
		name  string
		batch []store.Batch
		want  string
	}{
		{"digest", []store.Batch{{Kind: "digest", Sub: "sub_x", Every: 30, Events: []store.Event{ev("a", 0), ev("b", 1)}}},
			Header + "\nDigest of 2 events (subscription sub_x every 30 min; questions and errors come at once):\n" + line("a") + "\n" + line("b")},
		{"digest of one reads like the event", []store.Batch{{Kind: "digest", Sub: "sub_x", Every: 30, Events: []store.Event{ev("a", 0)}}},
			Header + "\n" + line("a")},
		{"quiet", []store.Batch{{Kind: "quiet", Window: "23:00–06:00 Europe/Berlin", Events: []store.Event{ev("a", 0), ev("b", 1), ev("c", 2)}}},
			Header + "\nHeld during quiet hours (23:00–06:00 Europe/Berlin): 3 events, delivered now that the window has ended; questions and errors came at once.\n" +
				line("a") + "\n" + line("b") + "\n" + line("c")},
		{"summary", []store.Batch{{Kind: "summary", Events: []store.Event{ev("a", 0), ev("b", 1)}}},
			Header + "\nSummary of 2 events held by the wake limit (20 wakes in the last hour; questions and errors come at once):\n" + line("a") + "\n" + line("b")},
		// R8.17: a digest delivered with the wake-limit summary: one Digest of line names both.
		{"digest with the summary", []store.Batch{{Kind: "summary", Events: []store.Event{ev("a", 0), ev("d", 3)}},
			{Kind: "digest", Sub: "sub_x", Every: 30, Events: []store.Event{ev("b", 1)}}, {Kind: "digest", Sub: "sub_x", Every: 30, Events: []store.Event{ev("c", 2)}}},
			Header + "\nDigest of 4 events (subscription sub_x every 30 min, with the summary held by the wake limit: 20 wakes in the last hour; questions and errors come at once):\n" +
				line("a") + "\n" + line("b") + "\n" + line("c") + "\n" + line("d")},
		{"plain events oldest first", []store.Batch{{Kind: "plain", Events: []store.Event{ev("late", 2)}}, {Kind: "plain", Events: []store.Event{ev("early", 1)}}},
			Header + "\n" + line("early") + "\n" + line("late")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Message(c.batch, 20); got != c.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}
