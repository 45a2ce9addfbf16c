package domain

import (
	"context"
	"slices"
	"sort"

	"github.com/oar/relay/store"
)

// The action registry: everything the domain knows of one relay_tool action
// in one entry, from which the argument lists, the handlers, the card and
// pairing rules and the MCP schema's action list are made. Adding or
// reclassifying an action is one entry here (and its handler).

// The names code outside the registry uses where no call's arguments are at
// hand (a call it makes itself, a card of a plan).
const (
	actUpdateSession  = "update_session"
	actAnswerQuestion = "answer_question"
	actSubscribe      = "subscribe"
	actUnsubscribe    = "unsubscribe"
	actWait           = "wait"
)

// actionSpec is one action's facts.
type actionSpec struct {
	name string
	// args are its arguments in the order SPEC names them (their JSON
	// shapes are argKinds').
	args []string
	// run is its handler on relay r.
	run func(r *Relay) handler
	// relay: whether the action names its relay (R4.3).
	relay relayRule
	// level is the lowest permission level of a pairing that allows it (R4.5).
	level string
	// feature is the hello feature a paired relay needs to serve it
	// (R13.3; "" is "call"), extra one an argument needs there.
	feature string
	extra   argFeature
	// localOnly: it works on the agent's own relay only, never to or from a
	// paired relay (the schedules, R9).
	localOnly bool
	// write: a card guards it in ask/plan mode (R5.2.3).
	write bool
	// acceptGated: the accept setting switches it off for paired relays'
	// agents (R4.6).
	acceptGated bool
	// prompt: it carries a prompt to another agent's turn: the hop limit
	// (R4.7) and loop protection (R5.2.6) apply to it on a paired relay,
	// and a mode left out follows the caller's session there (R7.9).
	prompt bool
	// promptCard: its card is for a prompt to another agent: allowing it
	// releases the setter's held schedule firings (R9.6).
	promptCard bool
	// promptsSession: it prompts an existing session, which a "started"
	// peer token reaches afterwards (R18.35).
	promptsSession bool
	// creates: it starts a session; from a paired relay's agent without a
	// provider, it runs on one with the caller's model (R7.9).
	creates bool
	// asks: one of the asks to the owner (§10): without session it concerns
	// only the caller's own asks (no R4.2 nor R4.4 for it).
	asks bool
	// intoSession: with `session` it reaches into another session's
	// conversation, and counts as a write, a prompt to another agent,
	// gated by the accept setting and checked there (an ask about a session).
	intoSession bool
	// wakes: its outcome comes later by waking the caller, which an
	// external session cannot be (R17.7).
	wakes bool
	// updates: it changes a session's settings (R7.10): every failure ends
	// "Nothing was changed.", and on a paired relay a card asks once per
	// conversation and relay for a session it did not start, none when
	// nothing changes.
	updates bool
	// refuseUnknown, when set, ends the refusal of arguments it does not
	// take (else they are ignored and listed, R3.6); ownerOnly are the
	// arguments refused as the owner's settings.
	refuseUnknown string
	ownerOnly     []string
	// firstCard, when set, is the flag and reason of the card its first
	// call on a paired relay from a conversation asks (R5.2.4).
	firstCard func(p *store.Pairing) (flag, reason string)
	// alwaysCard, when set, is the reason of the card it always needs.
	alwaysCard string
	// beforeRemote, when set, prepares a call to a paired relay after the
	// pairing's checks (transfer's from: a conversation here).
	beforeRemote func(rm *remote, ctx context.Context, c *caller, a *args) *Error
	// check, when set, runs its checks for a paired relay's agent and names
	// what they resolved (POST /peer/v1/check, R5.3): a card may guard it on a
	// paired relay, checked there first. checkedLines are its card's lines
	// from such a check (nil: the lines from the arguments).
	check        func(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error
	checkedLines func(a *args, relay string, k *PeerChecked) []string
}

// relayRule is whether an action names its relay (R4.3).
type relayRule int

const (
	relayRequired relayRule = iota
	relayOptional           // may be left out, meaning "this"
	relayNone               // names none: list_relays
)

// argFeature is a hello feature a paired relay needs when arg is given (R13.3).
type argFeature struct{ arg, feature string }

// waits reports whether the action waits for a reply (wait_seconds): its
// wait is capped by the relay's longest wait, and may become an MCP task.
func (s *actionSpec) waits() bool { return slices.Contains(s.args, "wait_seconds") }

// actionTable is the registry, in the order of SPEC §7–§10.
func actionTable() []*actionSpec {
	return []*actionSpec{
		// §7.1 finding relays and sessions
		{name: "list_relays", args: []string{}, relay: relayNone, level: "none",
			run: func(r *Relay) handler { return r.reads.listRelays }},
		{name: "relay_info", args: []string{"relay"}, level: "read",
			run: func(r *Relay) handler { return r.reads.relayInfo }},
		{name: "usage", args: []string{"relay"}, level: "read",
			run: func(r *Relay) handler { return r.reads.usageReport }},
		{name: "list_sessions", args: []string{"relay", "scope", "limit"}, level: "read",
			run: func(r *Relay) handler { return r.reads.listSessions }},
		{name: "read_session", args: []string{"relay", "session", "last"}, level: "read",
			run: func(r *Relay) handler { return r.reads.readSession }},
		{name: "read_task_output", args: []string{"relay", "session", "task_id", "lines"}, level: "read", feature: "task_output",
			run: func(r *Relay) handler { return r.tasks.readTaskOutput }},

		// §7.2 prompting
		{name: "send", args: []string{"relay", "session", "text", "wait_seconds", "mode", "model", "effort", "provider"},
			level: "prompt", extra: argFeature{"provider", "billing_switch"}, // the billing switch (R7.8)
			write: true, acceptGated: true, prompt: true, promptCard: true, promptsSession: true,
			run: func(r *Relay) handler { return r.sends.send }, check: checkedSend, checkedLines: sendCheckedLines},
		{name: "create_session", args: []string{"relay", "text", "provider", "model", "cwd", "repo", "branch", "mode", "effort", "title", "group", "wait_seconds"},
			level: "full", extra: argFeature{"group", "groups"},
			write: true, acceptGated: true, prompt: true, promptCard: true, creates: true,
			refuseUnknown: "Nothing was created.",
			firstCard:     firstCardOnce("created", "This is the first session an agent starts in this conversation."),
			run:           func(r *Relay) handler { return r.creates.createSession }, check: checkedCreate, checkedLines: createCheckedLines},
		{name: actUpdateSession, args: []string{"relay", "session", "model", "effort", "mode", "title", "group", "cwd", "auto_compact_window", "thinking_enabled", "thinking_display"},
			level: "full", feature: "update_session", write: true, acceptGated: true, updates: true,
			refuseUnknown: nothingChanged, ownerOnly: []string{"may_create_sessions", "mayCreateSessions"},
			firstCard: func(p *store.Pairing) (string, string) { return updateFlag(p), updateReason(p) },
			run:       func(r *Relay) handler { return r.updates.updateSession }, check: checkedUpdate, checkedLines: updateCheckedLines},
		{name: actWait, args: []string{"relay", "session", "message_id", "wait_seconds"}, level: "read",
			run: func(r *Relay) handler { return r.turns.wait }},

		// §7.3 steering another session
		{name: actAnswerQuestion, args: []string{"relay", "session", "question_id", "choices", "answer"},
			level: "prompt", write: true, acceptGated: true,
			run: func(r *Relay) handler { return r.steer.answerQuestion }, check: checkedAnswer},
		{name: "stop", args: []string{"relay", "session"}, level: "full", write: true, acceptGated: true,
			run: func(r *Relay) handler { return r.steer.stop }, check: checkedTarget},
		{name: "archive", args: []string{"relay", "session"}, level: "full", write: true, acceptGated: true,
			run: func(r *Relay) handler { return r.steer.archive }, check: checkedTarget},

		// §8 subscriptions
		{name: actSubscribe, args: []string{"relay", "sessions", "events", "once", "match", "stalled_minutes", "heartbeat_minutes", "digest_minutes", "quiet_hours", "exclude"},
			relay: relayOptional, level: "read", feature: "events", acceptGated: true, wakes: true,
			firstCard: firstCardOnce("subscribed", "This is the first time this conversation watches sessions."),
			run:       func(r *Relay) handler { return r.subs.subscribe }, check: checkedSubscribe, checkedLines: subscribeCheckedLines},
		{name: actUnsubscribe, args: []string{"relay", "subscription_id"}, relay: relayOptional, level: "read",
			run: func(r *Relay) handler { return r.subs.unsubscribe }},
		{name: "list_subscriptions", args: []string{"relay", "watcher"}, relay: relayOptional, level: "read",
			run: func(r *Relay) handler { return r.subs.listSubscriptions }},
		{name: "transfer_subscriptions", args: []string{"relay", "from"}, relay: relayOptional, level: "full",
			write: true, acceptGated: true, alwaysCard: "Moving subscriptions always needs your approval.",
			beforeRemote: (*remote).transferFrom,
			run:          func(r *Relay) handler { return r.subs.transferSubscriptions }, check: checkedTransfer},

		// §9 schedules
		{name: "schedule", args: []string{"relay", "text", "title", "at", "every_minutes", "session"},
			relay: relayOptional, level: "full", localOnly: true, promptCard: true,
			run: func(r *Relay) handler { return r.schedules.scheduleAction }},
		{name: "list_schedules", args: []string{"relay"}, relay: relayOptional, level: "full", localOnly: true,
			run: func(r *Relay) handler { return r.schedules.listSchedules }},
		{name: "unschedule", args: []string{"relay", "schedule_id"}, relay: relayOptional, level: "full", localOnly: true,
			run: func(r *Relay) handler { return r.schedules.unschedule }},

		// §10 asks
		{name: "ask", args: []string{"relay", "question", "options", "recommendation", "detail", "session"},
			relay: relayOptional, level: "prompt", feature: "asks", asks: true, intoSession: true, wakes: true,
			run: func(r *Relay) handler { return r.asks.ask }, check: checkedAsk},
		{name: "list_questions", args: []string{"relay", "session"}, relay: relayOptional, level: "none", feature: "asks", asks: true,
			run: func(r *Relay) handler { return r.asks.listQuestions }},
		{name: "withdraw", args: []string{"relay", "question_id"}, relay: relayOptional, level: "none", feature: "asks", asks: true,
			run: func(r *Relay) handler { return r.asks.withdraw }},
	}
}

// firstCardOnce is a first-call card whose flag is one per conversation.
func firstCardOnce(flag, reason string) func(*store.Pairing) (string, string) {
	return func(*store.Pairing) (string, string) { return flag, reason }
}

// The registry and what is made of it; set by init, since the handlers
// reach back into it.
var (
	actionList   []*actionSpec
	actionByName map[string]*actionSpec
	// actionArgs lists each action's arguments in the order SPEC names them.
	actionArgs map[string][]string
	// actionKnown is actionArgs as sets.
	actionKnown map[string]map[string]bool
)

func init() { registerActions(actionTable()) }

// registerActions makes the lookups of the registry list.
func registerActions(list []*actionSpec) {
	actionList = list
	actionByName = make(map[string]*actionSpec, len(list))
	actionArgs = make(map[string][]string, len(list))
	actionKnown = make(map[string]map[string]bool, len(list))
	for _, s := range list {
		actionByName[s.name] = s
		actionArgs[s.name] = s.args
		known := make(map[string]bool, len(s.args))
		for _, k := range s.args {
			known[k] = true
		}
		actionKnown[s.name] = known
	}
}

// noAction is the spec of a name that is no action: every fact false.
var noAction = &actionSpec{}

// specOf is the named action's spec, noAction for an unknown name.
func specOf(name string) *actionSpec {
	if s, ok := actionByName[name]; ok {
		return s
	}
	return noAction
}

// isAction reports whether name is an action.
func isAction(name string) bool { _, ok := actionByName[name]; return ok }

// spec is the call's action's spec.
func (a *args) spec() *actionSpec { return specOf(a.action) }

// intoSession reports a call that reaches into another session's
// conversation: an ask about a session.
func (a *args) intoSession() bool { return a.spec().intoSession && a.has("session") }

// asksHere reports an ask into the caller's own conversation (no
// session), which no paired relay takes.
func (a *args) asksHere() bool { return a.spec().intoSession && !a.has("session") }

// ownAsks reports a call that concerns only the caller's own asks to the
// owner: list_questions, withdraw, an ask into the caller's conversation.
func (a *args) ownAsks() bool { return a.spec().asks && !a.intoSession() }

// Actions lists every action name, sorted.
func Actions() []string {
	out := ActionNames()
	sort.Strings(out)
	return out
}

// ActionNames lists every action name in the order of SPEC §7–§10 (the MCP
// schema's enum).
func ActionNames() []string {
	out := make([]string, len(actionList))
	for i, s := range actionList {
		out[i] = s.name
	}
	return out
}

// WaitingActions lists the actions that wait for a reply (wait_seconds),
// whose wait may become an MCP task.
func WaitingActions() []string {
	var out []string
	for _, s := range actionList {
		if s.waits() {
			out = append(out, s.name)
		}
	}
	return out
}
