package domain

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/oar/relay/config"
)

// Spending caps (R7.8): a provider may have a monthly cap in USD or tokens,
// counted from the usage this relay recorded in the calendar month (UTC).

// Cap is a provider's monthly spending cap (config monthly_cap, cap_unit).
type Cap struct {
	Amount float64 // in Unit, > 0
	Unit   string  // config.CapUSD | config.CapTokens
}

// usageMonth is the month a usage counter belongs to.
func usageMonth(t time.Time) string { return t.UTC().Format("2006-01") }

// monthEnd is when the month's counters start again (the next 1st, 00:00 UTC).
func monthEnd(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

// remoteName is a provider id as the relay's own codes spell it (claude-api → CLAUDE_API).
func remoteName(id string) string {
	return strings.Map(func(c rune) rune {
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			return c
		}
		return '_'
	}, strings.ToUpper(id))
}

// capUse reads a capped provider's use this month in the cap's unit; ok is
// false for a provider without a cap.
func (us *usage) capUse(ctx context.Context, id string) (used float64, c Cap, ok bool, err error) {
	c, ok = us.opts.Caps[id]
	if !ok || c.Amount <= 0 {
		return 0, c, false, nil
	}
	tokens, micro, err := us.st.MonthUsage(ctx, id, usageMonth(us.now()))
	if err != nil {
		return 0, c, true, err
	}
	if c.Unit == config.CapUSD {
		return float64(micro) / 1e6, c, true, nil
	}
	return float64(tokens), c, true, nil
}

// capAmount writes an amount of a cap's unit for an error message.
func capAmount(v float64, unit string) string {
	if unit == config.CapUSD {
		return fmt.Sprintf("%.2f USD", v)
	}
	return fmt.Sprintf("%d tokens", int64(math.Round(v)))
}

// checkCap refuses a prompt to a provider at its monthly cap (R7.8), nothing
// queued: switching is true for a billing switch onto it; otherwise the error
// says to switch with partner (when there is one) or to ask the owner.
func (us *usage) checkCap(ctx context.Context, id, partner string, switching bool, nothing string) *Error {
	used, c, ok, err := us.capUse(ctx, id)
	if err != nil {
		return internal("checkCap: capUse", err)
	}
	if !ok || used < c.Amount {
		return nil
	}
	name := id
	if p, ok := us.models.providers[id]; ok {
		name = p.Info().Name
	}
	at := fmt.Sprintf("%s (%q) on relay %q has reached its monthly cap: %s of %s used; it resets %v.",
		name, id, us.opts.Name, capAmount(used, c.Unit), capAmount(c.Amount, c.Unit), ts(monthEnd(us.now())))
	var e *Error
	switch {
	case switching:
		e = Errorf(CodeProviderUnavailable, "Cannot switch billing: %s %s", at, nothing)
	case partner != "":
		e = Errorf(CodeProviderUnavailable, "%s Send with provider: %q to move the session to that billing, or ask the owner to raise the cap. %s", at, partner, nothing)
	default:
		e = Errorf(CodeProviderUnavailable, "%s Ask the owner to raise the cap. %s", at, nothing)
	}
	return e.With("remoteCode", remoteName(id)+"_CAP_REACHED")
}

// partnerOf is the billing partner a session on provider id can switch to
// (its switch_to, or the provider naming it), "" when none.
func (us *usage) partnerOf(id string) string {
	if p, ok := us.models.providers[id]; ok && p.Info().SwitchTo != "" {
		return p.Info().SwitchTo
	}
	for _, o := range us.models.order {
		if p := us.models.providers[o]; p.Info().SwitchTo == id {
			return o
		}
	}
	return ""
}

// capMeters adds a capped provider's meters to its usage entry (R7.3).
func (us *usage) capMeters(ctx context.Context, id string, pv *providerUsage) (bool, error) {
	used, c, ok, err := us.capUse(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	if c.Unit == config.CapUSD {
		used = math.Round(used*100) / 100
	}
	pv.Tracked = true
	pv.Unit = some(string(c.Unit))
	pv.Used, pv.Quota = some(used), some(c.Amount)
	pv.Remaining = some(math.Max(0, c.Amount-used))
	pv.Utilization = some(math.Round(used/c.Amount*1000) / 1000)
	pv.ResetsAt = some(tsPtr(monthEnd(us.now())))
	pv.Note = "monthly cap set by the owner: used counts what this relay ran on this provider this calendar month (UTC)"
	if used >= c.Amount && pv.Status == "ok" {
		pv.Status = "cap_reached"
	}
	return true, nil
}
