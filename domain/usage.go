package domain

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// Agent CLI providers (R17): the host's hooks for activity lines and the
// CLI's conversation id, usage with cost and pauses, availability.

// usage is the usage subsystem (R7.3, R7.8, R7.13, R17.1, R17.3): what a
// done turn used, counted when it ends (a limit the agent hit pauses its
// provider, a capped provider's month counts it, the model asked kept when
// another ran), the monthly spending caps checked before a prompt (caps.go),
// a provider's meters in the usage action, whether a provider can run turns
// now, and the activity line of each relay_tool call. It sees the store only
// as usageStore and reaches the rest of the relay only through usageHost.
type usage struct {
	st     usageStore
	now    func() time.Time
	log    *slog.Logger
	opts   *Options // the relay's: name, caps
	models *models  // the providers, in config order
	relay  usageHost
}

// usageHost is what the usage subsystem asks of the rest of the relay: the
// caller of a call refused before it was read (tool.go).
type usageHost interface {
	loadCall(ctx context.Context, sid, ref string) (*caller, *store.Call, error)
}

// relayCallMark starts the activity line of a relay_tool call.
const relayCallMark = "🛰️"

// noteCall writes the 🛰️ activity line of one relay_tool call of the
// caller's agent into the caller's conversation (R17.3, R19.3): for every
// call made during one of its turns, whatever the provider (the call comes
// through here from the scripted and openai providers, and over /mcp from
// exec commands, the agent CLIs and ACP agents), and for every call of an
// external session, whose agent has no turns the relay runs. Calls from
// paired relays do not come through here (their relay writes the line).
// outcome is the call's when it is known already (refused early, R23.3);
// the line written is returned for noteOutcome (nil: none was written).
func (us *usage) noteCall(ctx context.Context, c *caller, raw json.RawMessage, outcome string) *store.Message {
	if c == nil || (c.turn == nil && !isExternal(c.s)) {
		return nil
	}
	line := provider.ActivityLine(us.opts.Name, string(raw)) // the call's arguments as JSON text
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveWriteTimeout)
	defer cancel()
	m := &store.Message{ID: store.NewID(16), Role: "activity", Text: line, CreatedAt: us.now(), Outcome: outcome}
	if err := us.st.AppendActivity(ctx, c.s.ID, m); err != nil {
		us.log.Warn("activity line not stored", "session", c.s.ID, "err", err)
		return nil
	}
	return m
}

// noteEarly is noteCall for a call refused before its caller was read, with
// the error's code as its outcome.
func (us *usage) noteEarly(ctx context.Context, callerID string, raw json.RawMessage, code string) {
	if c, _, err := us.relay.loadCall(ctx, callerID, ""); err == nil {
		us.noteCall(ctx, c, raw, code)
	}
}

// noteOutcome adds a call's outcome to its 🛰️ line m once the call has its
// result (R23.3): one round trip before the answer; a failure only logs.
func (us *usage) noteOutcome(ctx context.Context, c *caller, m *store.Message, out *result, e *Error) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveWriteTimeout)
	defer cancel()
	if _, err := us.st.SetActivityOutcome(ctx, c.s.ID, m, callOutcome(out, e)); err != nil {
		us.log.Warn("activity outcome not stored", "session", c.s.ID, "err", err)
	}
}

// callOutcome is a call's outcome as its 🛰️ line shows it (R23.3): "ok",
// with the result's status when it has one ("ok, replied"), or the error's code.
func callOutcome(out *result, e *Error) string {
	if e != nil {
		return e.Code
	}
	if out == nil {
		return "ok"
	}
	if st := out.status(); st != "" { // a prompting action's turn too (R7.7)
		return "ok, " + st
	}
	return "ok"
}

// agentSessionOf is the CLI conversation a session's next turn resumes: the
// stored one when the session's provider made it.
func agentSessionOf(s *store.Session) string {
	if s.AgentProvider != s.Provider {
		return ""
	}
	return s.AgentSession
}

// conversationKeeper is a provider that keeps its agent's own conversation
// between turns (the agent CLIs): a new folder starts a fresh one.
type conversationKeeper interface {
	KeepsConversation() bool
}

func keepsConversation(p provider.Provider) bool {
	k, ok := p.(conversationKeeper)
	return ok && k.KeepsConversation()
}

// countUsage records a finished turn's usage (R7.3): a limit the agent hit
// pauses the provider, and a capped provider's month counts a done turn
// (R7.8). The rest of a done turn's usage (tokens, cost, the end of a pause)
// is returned: the turn's outcome counts it in the same step (EndTurn).
func (us *usage) countUsage(ctx context.Context, provID string, status store.TurnStatus, out provider.Result) *store.UsageAdd {
	ctx = context.WithoutCancel(ctx)
	if out.Paused != "" {
		if err := us.st.SetUsagePaused(ctx, provID, out.Paused, us.now()); err != nil {
			us.log.Warn("usage pause not stored", "provider", provID, "err", err)
		}
	}
	if status != store.TurnDone {
		return nil
	}
	micro := int64(0)
	if out.Usage.CostUSD > 0 {
		micro = int64(out.Usage.CostUSD*1e6 + 0.5)
	}
	if _, capped := us.opts.Caps[provID]; capped { // counted per calendar month for the cap (R7.8)
		if err := us.st.AddMonthUsage(ctx, provID, usageMonth(us.now()), out.Usage.InputTokens+out.Usage.OutputTokens, micro); err != nil {
			us.log.Warn("monthly usage not counted", "provider", provID, "err", err)
		}
	}
	return &store.UsageAdd{Provider: provID, InputTokens: out.Usage.InputTokens, OutputTokens: out.Usage.OutputTokens,
		CostMicroUSD: micro, ClearPause: out.Paused == ""}
}

// checkAvailable refuses a prompt to a provider that cannot run turns now
// (R17.1: its CLI's binary is missing); nothing is queued.
func (us *usage) checkAvailable(p provider.Provider, nothing string) *Error {
	in := p.Info()
	if in.Status != provider.StatusUnavailable {
		return nil
	}
	return Errorf(CodeProviderUnavailable, "Provider %q on relay %q is unavailable: %s. %s", in.ID, us.opts.Name, in.StatusReason, nothing)
}

// agentUsage adds to a provider's usage entry what the agent CLIs report:
// the cost counted, a pause by a usage or rate limit, an unavailable CLI.
func (us *usage) agentUsage(ctx context.Context, id string, u map[string]int64, pv *providerUsage) {
	if c := u["costMicroUSD"]; c > 0 {
		pv.Counted.CostUSD = float64(c) / 1e6
	}
	if reason, at, err := us.st.UsagePaused(ctx, id); err == nil && reason != "" {
		pv.Paused, pv.PausedReason, pv.PausedAt = true, some(reason), some(tsPtr(at))
		pv.Status = "paused"
	}
	if in := us.models.providers[id].Info(); in.Status == provider.StatusUnavailable {
		pv.Status, pv.StatusReason = string(in.Status), some(in.StatusReason)
	}
}

// noteModel keeps with a done turn the model it asked for when the provider
// reports that another one ran (R7.13): the result's modelNote says so.
func (us *usage) noteModel(ctx context.Context, s *store.Session, turnID string, status store.TurnStatus, ran string) {
	asked := s.Model
	if p, ok := us.models.providers[s.Provider]; ok && asked == "" {
		asked = p.Info().DefaultModel
	}
	if status != store.TurnDone || ran == "" || asked == "" || ran == asked {
		return
	}
	if err := us.st.SetTurnModelAsked(context.WithoutCancel(ctx), turnID, asked); err != nil {
		us.log.Warn("asked model not kept with the turn", "turn", turnID, "err", err)
	}
}
