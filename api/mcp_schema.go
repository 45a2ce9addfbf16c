package api

import (
	"maps"

	"github.com/oar/relay/domain"
)

// The relay_tool input schema, written by hand (SPEC §3, §7–§10).
//
// It is not generated with jsonschema.For on purpose: generated schemas carry
// additionalProperties:false (a model that adds a stray field then fails before
// the relay can list it in "ignored", R3.6) and ["null", T] types for pointers
// and slices, which some clients warn about. Unknown arguments are the domain's
// business (R3.5, R3.6), so the schema stays open.

const (
	// relayToolName is the one tool /mcp lists (R3.8).
	relayToolName = "relay_tool"
	// legacyToolName is the name before 0.9.18: still executed exactly like
	// relay_tool, never listed (R3.8).
	legacyToolName = "remote_relay"
)

// relayToolDescription is what a model reads to decide when and how to call the tool.
const relayToolDescription = `Work with agent sessions on this relay and on paired relays: list and read sessions and task output, prompt a session (send) or start one (create_session) and wait for its reply, change a session's settings, answer a question another session's agent asked, stop or archive a session, watch sessions and be woken by their events (subscribe), queue a message for later (schedule), and put a non-blocking question to the owner (ask).
Every call names an action. Every action except list_relays names its relay in "relay": "this" means this relay; a paired relay is named by its name or host as list_relays shows it (the subscription, schedule and question actions may leave relay out, meaning "this"). Start with list_relays.
Each result is one JSON object: "ok", a one-line "summary", and on failure "code" and an "error" sentence that says what was not done.
Manners: ask the owner before you answer another session's question, unless told to decide yourself. After ask, go on with what does not depend on the answer and do not ask the same again while it is open. A subscription only notifies: it approves and answers nothing. A locked relay: ask the owner to mention it.`

// relayToolInputSchema returns a fresh copy of the input schema of relay_tool
// (and of its unlisted alias remote_relay).
func relayToolInputSchema() map[string]any {
	props := map[string]any{
		"action": map[string]any{
			"type":        "string",
			"enum":        domain.ActionNames(), // the registry's, in the order of SPEC §7–§10
			"description": "What to do.",
		},
		"relay": schemaString(`The relay to act on: "this" for this relay, or a paired relay's name or host as list_relays shows it. Required by every action except list_relays; subscription, schedule and question actions default to "this".`),
	}
	for _, section := range []func() map[string]any{targetProperties, promptProperties, updateProperties, answerReadProperties, subscriptionProperties, scheduleAskProperties} {
		maps.Copy(props, section())
	}
	return map[string]any{"type": "object", "required": []string{"action"}, "properties": props}
}

// targetProperties are the properties of the targets: sessions, messages, tasks.
func targetProperties() map[string]any {
	return map[string]any{
		"session":    schemaString("Id of the session the action targets (or a unique prefix of 8 or more characters). For schedule and ask: another session instead of your own conversation; for list_questions: only asks about it."),
		"sessions":   schemaStringArray(`subscribe: the session ids to watch, or ["all"] for every session on the relay but your own.`),
		"message_id": schemaString("wait: the message_id that send or create_session returned."),
		"task_id":    schemaString("read_task_output: the task's id as read_session lists it."),
	}
}

// promptProperties are the properties of prompting (send, create_session, wait).
func promptProperties() map[string]any {
	return map[string]any{
		"text":         schemaString("send, create_session: the prompt (for create_session it must stand alone: the new session knows nothing of you). schedule: the message to queue."),
		"wait_seconds": schemaInteger("send, create_session, wait: seconds to wait for the reply (default 60, 0 = do not wait; capped by the relay's longest wait per tool call)."),
		"mode":         schemaEnum("The relay mode for the session's turns.", "agent", "ask", "plan"),
		"model":        schemaString("A model id from the list relay_info shows for the provider."),
		"effort":       schemaString("Reasoning effort, one of the provider's efforts as relay_info shows them."),
		"provider":     schemaString("Provider id as relay_info lists it. create_session: who runs the new session. send: the session's billing partner moves the session there and sends in one step."),
		"cwd":          schemaString("create_session, update_session: working folder of the session; must be one the relay may use (relay_info shows recent ones)."),
		"repo":         schemaString("create_session: repository for the new session."),
		"branch":       schemaString("create_session: branch for the new session."),
		"title":        schemaString("create_session, update_session: the session's title. schedule: the schedule's title."),
		"group":        schemaString(`create_session: an existing session group's id or name (relay_info lists them). update_session: a group id, a group name (an unknown name creates the group), or "none" to take the session out of its group.`),
	}
}

// updateProperties are the properties of update_session's settings.
func updateProperties() map[string]any {
	return map[string]any{
		"auto_compact_window": map[string]any{
			"anyOf": []any{
				map[string]any{"type": "integer"},
				map[string]any{"type": "string"},
			},
			"description": `update_session: the context size at which the session compacts, in tokens, or "auto".`,
		},
		"thinking_enabled": map[string]any{
			"anyOf": []any{
				map[string]any{"type": "boolean"},
				map[string]any{"type": "string", "enum": []string{"on", "off"}},
			},
			"description": `update_session: turn extended thinking on (true or "on") or off ("off"; false counts as not given).`,
		},
		"thinking_display": schemaString(`update_session: how thinking is shown, e.g. "summarized".`),
	}
}

// answerReadProperties are the properties of answer_question and the reading actions.
func answerReadProperties() map[string]any {
	return map[string]any{
		"question_id": schemaString("answer_question: the question card's id (q_…). withdraw: your ask's id (ask_…)."),
		"choices":     schemaStringArray("answer_question: the chosen option(s) of the question card (this or answer)."),
		"answer":      schemaString("answer_question: a free-text answer (this or choices)."),

		// Reading.
		"lines": schemaInteger("read_task_output: how many output lines to return from the end (default 50, at most 500)."),
		"last":  schemaInteger("read_session: how many of the last messages to return (default 5, 1 to 50)."),
		"scope": schemaEnum("list_sessions: which sessions (default active = not archived).", "active", "archived", "all"),
		"limit": schemaInteger("list_sessions: at most this many sessions, most recent activity first (default 50, 1 to 200)."),
	}
}

// subscriptionProperties are the properties of the subscriptions (§8).
func subscriptionProperties() map[string]any {
	return map[string]any{
		"events":            schemaStringArray("subscribe: event kinds to be woken by: turn_end, question_asked, question_answered, error, subagent_finished, task_started, task_finished, task_failed, stalled, all_idle, heartbeat (default: question_asked, error, turn_end, subagent_finished, task_failed, stalled, all_idle)."),
		"once":              schemaBoolean("subscribe: end the subscription when its first event fires."),
		"match":             schemaString("subscribe: only deliver events whose line matches this case-insensitive RE2 regular expression."),
		"stalled_minutes":   schemaInteger("subscribe: minutes without output after which a turn or task counts as stalled (default 15)."),
		"heartbeat_minutes": schemaInteger("subscribe: send one heartbeat line on the watched sessions every this many minutes."),
		"digest_minutes":    schemaInteger("subscribe: collect events and deliver them as one message every this many minutes (1 to 1440); questions and errors still come at once."),
		"quiet_hours": map[string]any{
			"type":        "object",
			"description": "subscribe: a daily window in which events are held and delivered together when it ends; questions and errors still come at once.",
			"properties": map[string]any{
				"from": schemaString(`Start of the window, "HH:MM" (00:00 to 23:59).`),
				"to":   schemaString(`End of the window, "HH:MM"; may be past midnight, must differ from from.`),
				"tz":   schemaString(`IANA time zone, e.g. "Europe/Berlin" or "UTC".`),
			},
		},
		"exclude":         schemaStringArray(`subscribe with sessions ["all"]: session ids to leave out.`),
		"subscription_id": schemaString(`unsubscribe: the subscription's id (sub_…), or "all" for every subscription of your conversation on that relay.`),
		"watcher":         schemaString("list_subscriptions: another conversation's id, to list its subscriptions instead of yours."),
		"from":            schemaString("transfer_subscriptions: the id of the conversation whose subscriptions move to yours."),
	}
}

// scheduleAskProperties are the properties of the schedules (§9) and the asks (§10).
func scheduleAskProperties() map[string]any {
	return map[string]any{
		"at":            schemaString(`schedule: when to fire, RFC 3339 (e.g. "2026-03-01T09:00:00+01:00"). Give at, every_minutes or both.`),
		"every_minutes": schemaInteger("schedule: repeat every this many minutes (at least 1)."),
		"schedule_id":   schemaString("unschedule: the schedule's id (sch_…)."),

		// Asks.
		"question":       schemaString("ask: the question for the owner."),
		"options":        schemaStringArray("ask: answer options the owner may pick from."),
		"recommendation": schemaString("ask: the option you recommend, and why."),
		"detail":         schemaString("ask: background the owner needs to answer."),
	}
}

func schemaString(description string) map[string]any {
	return map[string]any{"type": "string", "description": description}
}

func schemaEnum(description string, values ...string) map[string]any {
	return map[string]any{"type": "string", "enum": values, "description": description}
}

func schemaInteger(description string) map[string]any {
	return map[string]any{"type": "integer", "description": description}
}

func schemaBoolean(description string) map[string]any {
	return map[string]any{"type": "boolean", "description": description}
}

func schemaStringArray(description string) map[string]any {
	return map[string]any{
		"type":        "array",
		"items":       map[string]any{"type": "string"},
		"description": description,
	}
}
