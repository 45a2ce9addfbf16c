package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
)

const nothingScheduled = "Nothing was scheduled."

// schedules is the schedules subsystem (R9): the schedule, list_schedules and
// unschedule actions, firing an occurrence (Fire, held while the target's
// owner is away or a card is open), ending schedules, and recovering them at
// start. It sees the store only as recordStore and scheduleStore, the timed
// jobs through the delivery pipeline's schedule and early, its cards and
// loop count through the cards, the 4-at-work precheck and the prompt's
// queueing through the turn queue, and the rest of the relay only through
// schedulesHost.
type schedules struct {
	st       schedulesStore
	now      func() time.Time
	log      *slog.Logger
	met      Metrics
	opts     *Options // the relay's: name, limits, timing
	pipeline *pipeline
	cards    *cards
	turns    *turnQueue
	relay    schedulesHost
}

// schedulesStore is the store as the schedules see it.
type schedulesStore interface {
	recordStore
	scheduleStore
}

// schedulesHost is what the schedules ask of the rest of the relay: a
// session by reference (sessions.go) and telling the console (notify.go).
type schedulesHost interface {
	sessionByRef(ctx context.Context, ref string) (*store.Session, *Error)
	notifySchedule(ctx context.Context, sc *store.Schedule)
}

func fireID(id string, at time.Time) string { return fmt.Sprintf("sched:%s:%d", id, at.Unix()) }

// schedIn is a schedule call's checked arguments.
type schedIn struct {
	text, title string
	at          time.Time // zero: none given
	every       int       // minutes; 0: once
}

// scheduleArgs checks a schedule call's text, title, at and every_minutes (R9.1).
func scheduleArgs(a *args, now time.Time) (schedIn, *Error) {
	text, e := promptText(a, nothingScheduled)
	if e != nil {
		return schedIn{}, e
	}
	title, e := a.str("title")
	if e != nil {
		return schedIn{}, e
	}
	if e := maxChars("title", title, 200, nothingScheduled); e != nil {
		return schedIn{}, e
	}
	if e := maxChars("text", text, 32000, nothingScheduled); e != nil {
		return schedIn{}, e
	}
	atText, e := a.str("at")
	if e != nil {
		return schedIn{}, e
	}
	every, hasEvery, e := a.integer("every_minutes")
	if e != nil {
		return schedIn{}, Errorf(CodeInvalidInput, "every_minutes must be a whole number of minutes (1 to 525600). %s", nothingScheduled)
	}
	if hasEvery && (every < 1 || every > 525600) {
		return schedIn{}, Errorf(CodeInvalidInput, "every_minutes must be between 1 and 525600 (one year), got %d. %s", every, nothingScheduled)
	}
	var at time.Time
	if atText != "" {
		t, err := time.Parse(time.RFC3339, atText)
		if err != nil {
			return schedIn{}, Errorf(CodeInvalidInput, "at must be a time in RFC 3339 form, e.g. \"2026-11-02T02:00:00Z\" (got %q). %s", atText, nothingScheduled)
		}
		if !t.After(now) {
			return schedIn{}, Errorf(CodeInvalidInput, "at %s lies in the past. %s", atText, nothingScheduled)
		}
		at = t.UTC()
	}
	if at.IsZero() && !hasEvery {
		return schedIn{}, Errorf(CodeInvalidInput, "schedule needs at (a time) or every_minutes, or both. %s", nothingScheduled)
	}
	return schedIn{text: text, title: title, at: at, every: every}, nil
}

// scheduleTarget is the session a schedule call fires into: the caller's
// own, or the one `session` names if it takes prompts.
func (sh *schedules) scheduleTarget(ctx context.Context, c *caller, a *args) (*store.Session, *Error) {
	ref, e := a.str("session")
	if e != nil || ref == "" {
		return c.s, e
	}
	s, e := sh.relay.sessionByRef(ctx, ref)
	if e != nil {
		e.Msg = strings.Replace(e.Msg, nothingDone, nothingScheduled, 1)
		return nil, e
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s is archived; it takes no prompts. %s", id8(s.ID), nothingScheduled)
	}
	return s, nil
}

func (sh *schedules) scheduleAction(ctx context.Context, c *caller, a *args) (*result, *Error) {
	now := sh.now()
	in, e := scheduleArgs(a, now)
	if e != nil {
		return nil, e
	}
	text, title, at, every := in.text, in.title, in.at, in.every
	target, e := sh.scheduleTarget(ctx, c, a)
	if e != nil {
		return nil, e
	}
	other := target.ID != c.s.ID
	if isExternal(target) {
		return nil, notPromptable(target, nothingScheduled)
	}
	if e := sh.scheduleLimits(ctx, c, target, other); e != nil {
		return nil, e
	}
	if title == "" {
		title = titleFrom(text)
	}
	first := firstFiring(at, every, now)
	need, e := sh.scheduleNeed(ctx, c, other)
	if e != nil {
		return nil, e
	}
	tid := target.ID
	if e := sh.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action, target: &tid, lines: []string{scheduleCardLine(title, target, every, first, text)}, nothing: nothingScheduled}); e != nil {
		sh.cards.giveBack(ctx, need, c)
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	sc := &store.Schedule{ID: "sch_" + store.NewID(6), Setter: c.s.ID, Target: target.ID, Title: title, Text: text,
		First: first, At: at, EveryMinutes: every, Origin: c.origin(sh.opts.Name), CreatedAt: now, NextFireAt: first}
	// The limits again, checked and written in one step (R18.6).
	if err := sh.st.AddSchedule(ctx, sc, sh.opts.Limits.SchedulesIntoConversation, sh.opts.Limits.SchedulesForOthers); err != nil {
		sh.cards.giveBack(ctx, need, c)
		return nil, addScheduleError(err)
	}
	sh.relay.notifySchedule(ctx, sc) // the owner's console (R19.6)
	if err := sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: first.UnixMilli()}, fireID(sc.ID, first), first); err != nil {
		return nil, internalAfter(err, "schedule "+sc.ID+" was stored but its first firing was not planned (the relay plans it within a minute)")
	}
	res := newResult(target.ID, fmt.Sprintf("%s, next %s (%s)", scheduleWhen(every), first.UTC().Format(timeFormat), sc.ID))
	if !other {
		res.session = ""
	}
	var everyMin *int
	if every != 0 {
		everyMin = &every
	}
	return res.with(&scheduleResult{ScheduleID: sc.ID, Schedule: scheduleBrief{ID: sc.ID, Title: title,
		EveryMinutes: everyMin, Once: sc.Once(), NextFireAt: tsPtr(first)}}), nil
}

// firstFiring is a new schedule's first firing: at, or every minutes from
// now, in whole seconds (as asynq keeps due times: a firing is never early).
func firstFiring(at time.Time, every int, now time.Time) time.Time {
	first := at
	if first.IsZero() {
		first = now.Add(time.Duration(every) * time.Minute)
	}
	if t := first.Truncate(time.Second); !t.Equal(first) {
		first = t.Add(time.Second)
	}
	return first
}

// scheduleNeed is a schedule's card need: in ask/plan mode a schedule into
// another session is a write action (R5.2.3, R9.6); it counts toward loop
// protection once when set.
func (sh *schedules) scheduleNeed(ctx context.Context, c *caller, other bool) (*cardNeed, *Error) {
	need := &cardNeed{}
	if !other {
		return need, nil
	}
	addModeReason(need, c)
	if e := sh.cards.loopCard(ctx, need, c); e != nil {
		return nil, e
	}
	return need, nil
}

// addScheduleError is the error of a schedule the store did not add: one
// of the two limits (R18.6), or a fault.
func addScheduleError(err error) *Error {
	if le, ok := store.IsLimit(err); ok && le.Which == "into" {
		return Errorf(CodeScheduleLimit, "%d schedules already fire into that conversation, the most allowed. %s", le.Count, nothingScheduled)
	} else if ok {
		return Errorf(CodeScheduleLimit, "This conversation already set %d schedules for other sessions, the most allowed. %s", le.Count, nothingScheduled)
	}
	return internal("scheduleAction: AddSchedule", err)
}

// scheduleLimits checks the schedule limits before any card (R9.9); they
// are checked again, atomically, when the schedule is written.
func (sh *schedules) scheduleLimits(ctx context.Context, c *caller, target *store.Session, other bool) *Error {
	into, err := sh.st.SchedulesInto(ctx, target.ID)
	if err != nil {
		return internal("scheduleLimits: SchedulesInto", err)
	}
	if len(into) >= sh.opts.Limits.SchedulesIntoConversation {
		return Errorf(CodeScheduleLimit, "%d schedules already fire into that conversation, the most allowed. %s", len(into), nothingScheduled)
	}
	if other {
		by, err := sh.st.SchedulesBy(ctx, c.s.ID)
		if err != nil {
			return internal("scheduleLimits: SchedulesBy", err)
		}
		if len(by) >= sh.opts.Limits.SchedulesForOthers {
			return Errorf(CodeScheduleLimit, "This conversation already set %d schedules for other sessions, the most allowed. %s", len(by), nothingScheduled)
		}
	}
	return nil
}

// scheduleView is a schedule as list_schedules shows it (R9.7).
func (sh *schedules) scheduleView(ctx context.Context, sc *store.Schedule, viewer string) *relay.Schedule {
	title := ""
	if s, err := sh.st.GetSession(ctx, sc.Target); err == nil {
		title = s.Title
	}
	v := &relay.Schedule{ID: sc.ID, Session: relay.SessionRef{ID: sc.Target, Title: title}, Title: sc.Title,
		TextStart: excerpt(sc.Text, 120), At: tsPtr(sc.At), Once: sc.Once(),
		NextFireAt: tsPtr(sc.NextFireAt), LastFiredAt: tsPtr(sc.LastFiredAt), FiredCount: sc.FiredCount, SkippedCount: sc.SkippedCount}
	if sc.EveryMinutes != 0 {
		every := sc.EveryMinutes
		v.EveryMinutes = &every
	}
	if sc.EndReason != "" {
		v.NextFireAt = nil
		v.EndReason = sc.EndReason
		v.EndedAt = tsPtr(sc.EndedAt)
	}
	if sc.Setter != viewer {
		v.SetBy = sc.Setter
	}
	if !sc.HeldSince.IsZero() {
		v.HeldForApproval = true
		v.HeldSince = tsPtr(sc.HeldSince)
	}
	return v
}

func (sh *schedules) listSchedules(ctx context.Context, c *caller, a *args) (*result, *Error) {
	into, err := sh.st.SchedulesInto(ctx, c.s.ID)
	if err != nil {
		return nil, internal("listSchedules: SchedulesInto", err)
	}
	by, err := sh.st.SchedulesBy(ctx, c.s.ID)
	if err != nil {
		return nil, internal("listSchedules: SchedulesBy", err)
	}
	ended, err := sh.st.EndedSchedules(ctx, c.s.ID, sh.now().Add(-endedListWindow))
	if err != nil {
		return nil, internal("listSchedules: EndedSchedules", err)
	}
	list := []*relay.Schedule{}
	seen := map[string]bool{}
	active := 0
	for _, group := range [][]*store.Schedule{into, by, ended} {
		for _, sc := range group {
			if seen[sc.ID] {
				continue
			}
			seen[sc.ID] = true
			if sc.EndReason == "" {
				active++
			}
			list = append(list, sh.scheduleView(ctx, sc, c.s.ID))
		}
	}
	return newResult("", fmt.Sprintf("%d active, %d ended in the last hour", active, len(list)-active)).with(&listSchedulesResult{Schedules: list}), nil
}

func (sh *schedules) unschedule(ctx context.Context, c *caller, a *args) (*result, *Error) {
	id, e := a.str("schedule_id")
	if e != nil {
		return nil, e
	}
	if id == "" {
		return nil, Errorf(CodeInvalidInput, "schedule_id is required: an id from list_schedules. Nothing was done.")
	}
	into, err := sh.st.SchedulesInto(ctx, c.s.ID)
	if err != nil {
		return nil, internal("unschedule: SchedulesInto", err)
	}
	by, err := sh.st.SchedulesBy(ctx, c.s.ID)
	if err != nil {
		return nil, internal("unschedule: SchedulesBy", err)
	}
	// The id or a unique prefix of 8 or more characters (R3.7), among this conversation's schedules.
	var hits []*store.Schedule
	for _, x := range append(into, by...) {
		if x.ID == id {
			hits = []*store.Schedule{x}
			break
		}
		if len(id) >= 8 && strings.HasPrefix(x.ID, id) && !slices.ContainsFunc(hits, func(h *store.Schedule) bool { return h.ID == x.ID }) {
			hits = append(hits, x)
		}
	}
	if len(hits) > 1 {
		return nil, Errorf(CodeInvalidInput, "schedule_id %q matches more than one schedule; give more characters. Nothing was done.", id)
	}
	if len(hits) == 0 {
		return nil, Errorf(CodeNotFound, "This conversation has no active schedule %q. Nothing was done.", id)
	}
	sc := hits[0]
	if err := sh.endSchedule(ctx, sc, "unscheduled"); err != nil {
		return nil, internal("unschedule: endSchedule", err)
	}
	return newResult("", sc.ID+" ended").with(&unscheduleResult{ScheduleID: sc.ID, EndReason: "unscheduled"}), nil
}

func (sh *schedules) endSchedule(ctx context.Context, sc *store.Schedule, reason string) error {
	if sc.EndReason != "" {
		return nil
	}
	sc.EndReason, sc.EndedAt = reason, sh.now()
	if err := sh.st.SaveSchedule(ctx, sc); err != nil {
		return err
	}
	sh.relay.notifySchedule(ctx, sc) // the owner's console (R19.6)
	return nil
}

// Fire runs a schedule's occurrence (one asynq task per occurrence, R9.2–R9.6).
func (sh *schedules) Fire(ctx context.Context, id string, at time.Time, approved bool) error {
	sc, err := sh.st.GetSchedule(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil || sc.EndReason != "" {
		return err
	}
	if sc.NextFireAt.UnixMilli() != at.UnixMilli() && sc.HeldSince.IsZero() {
		return nil // a stale task: the schedule moved on
	}
	// Never before its nextFireAt (asynq may run a task up to ~1 s early).
	if stop, err := sh.pipeline.early(ctx, sc.NextFireAt, jobs.TypeFire, jobs.FirePayload{Schedule: id, At: at.UnixMilli()}, fireID(id, at)); stop || err != nil {
		return err
	}
	return sh.fire(ctx, sc, approved)
}

func (sh *schedules) fire(ctx context.Context, sc *store.Schedule, approved bool) error {
	now := sh.now()
	target, err := sh.st.GetSession(ctx, sc.Target)
	if errors.Is(err, store.ErrNotFound) {
		return sh.endSchedule(ctx, sc, "deleted")
	}
	if err != nil {
		return err
	}
	if target.Archived {
		return sh.endSchedule(ctx, sc, "archived")
	}
	other := sc.Setter != sc.Target
	fired := false
	// A firing into another session counts toward the setter's loop
	// protection; the count is taken in one atomic step (R18.6) and given
	// back if the firing does not happen after all.
	counted := false
	takeLoop := func() (bool, error) {
		if !other || approved {
			return true, nil
		}
		taken, _, err := sh.st.TakeLoop(ctx, sc.Setter, sh.opts.Limits.AgentPromptsBeforeCard)
		counted = taken
		return taken, err
	}
	defer func() {
		if counted && !fired {
			if err := sh.st.GiveBackLoop(context.WithoutCancel(ctx), sc.Setter); err != nil {
				sh.log.Warn("give back loop count", "session", sc.Setter, "err", err)
			}
		}
	}()
	queued := sh.stillQueued(ctx, sc.LastTurn)
	free := true
	if !queued {
		if free, err = takeLoop(); err != nil {
			return err
		}
	}
	switch {
	case queued:
		sc.SkippedCount++ // no stacking (R9.4)
		sc.HeldSince = time.Time{}
	case !free:
		return sh.holdFiring(ctx, sc, now)
	default:
		ok, err := sh.fireOccurrence(ctx, sc, target, other, approved, now)
		if !ok {
			return err
		}
		fired = true
	}
	return sh.planNext(ctx, sc, fired, now)
}

// holdFiring holds a firing that loop protection stops until the owner
// writes or allows a card (R9.6), and looks again in a minute (the safety net).
func (sh *schedules) holdFiring(ctx context.Context, sc *store.Schedule, now time.Time) error {
	if sc.HeldSince.IsZero() {
		sc.HeldSince = now
	}
	if err := sh.st.SaveSchedule(ctx, sc); err != nil {
		return err
	}
	recheck := now.Add(scheduleRecheck)
	return sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: sc.NextFireAt.UnixMilli()},
		fmt.Sprintf("sched:%s:held:%d", sc.ID, recheck.Unix()), recheck)
}

// planNext plans a schedule's next firing after one (fired or skipped); a
// once schedule that fired ends.
func (sh *schedules) planNext(ctx context.Context, sc *store.Schedule, fired bool, now time.Time) error {
	if sc.Once() && fired {
		sc.NextFireAt = time.Time{}
		return sh.endSchedule(ctx, sc, "fired")
	}
	next := scheduler.NextFire(sc.First, time.Duration(sc.EveryMinutes)*time.Minute, now)
	if next.IsZero() {
		// A once schedule whose single firing was skipped: try again in a minute.
		next = now.Add(scheduleRecheck)
	}
	sc.NextFireAt = next
	if err := sh.st.SaveSchedule(ctx, sc); err != nil {
		return err
	}
	sh.relay.notifySchedule(ctx, sc) // its next firing, in the owner's console (R19.6)
	return sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: next.UnixMilli()}, fireID(sc.ID, next), next)
}

// fireOccurrence queues one occurrence of sc into target and records it on
// sc; false: it did not fire, and err (nil included) is what fire returns.
func (sh *schedules) fireOccurrence(ctx context.Context, sc *store.Schedule, target *store.Session, other, approved bool, now time.Time) (bool, error) {
	// Into another session it is treated like a send: the 4-at-work cap
	// of the conversation that started the target; over it the firing
	// waits and is tried again (issue 13), checked again atomically below.
	if other {
		if e := sh.turns.precheckCap(ctx, target); e != nil {
			if e.Code == CodeSessionLimit {
				return false, sh.retryFull(ctx, sc, approved, now)
			}
			return false, e
		}
	}
	// At most one firing per occurrence, whichever task gets here first.
	once := fmt.Sprintf("fire:%s:%d", sc.ID, sc.NextFireAt.UnixMilli())
	if ok, err := sh.st.SetOnce(ctx, once, occurrenceMarkKeep); err != nil || !ok {
		return false, err
	}
	text := scheduleHeader(sc) + "\n" + sc.Text
	var from *store.Ref
	if other {
		if setter, err := sh.st.GetSession(ctx, sc.Setter); err == nil {
			from = &store.Ref{Relay: sh.opts.Name, Session: setter.ID, Title: setter.Title, Model: setter.Model}
		}
	}
	t, err := sh.turns.queue(ctx, prompt{s: target, text: text, role: "schedule", from: from, origin: sc.Origin, enforce: other})
	var e *Error
	if errors.As(err, &e) && e.Code == CodeSessionLimit {
		if err := sh.st.ClearOnce(context.WithoutCancel(ctx), once); err != nil {
			return false, err
		}
		return false, sh.retryFull(ctx, sc, approved, now)
	}
	if err != nil {
		return false, err
	}
	if other && approved {
		if _, err := sh.st.IncrLoop(ctx, sc.Setter); err != nil {
			return false, err
		}
	}
	sc.LastTurn, sc.LastFiredAt, sc.HeldSince = t.ID, now, time.Time{}
	sc.FiredCount++
	if sh.met != nil {
		sh.met.Delivery("schedule_fire")
	}
	return true, nil
}

// fullRetry is how soon a firing refused by the 4-at-work cap is tried again.
const fullRetry = 30 * time.Second

// retryFull keeps a firing the 4-at-work cap refused: the same occurrence is
// tried again shortly (its loop count was given back), never dropped.
func (sh *schedules) retryFull(ctx context.Context, sc *store.Schedule, approved bool, now time.Time) error {
	sh.log.Info("schedule firing waits: the target's conversation has 4 sessions at work", "schedule", sc.ID, "target", id8(sc.Target))
	again := now.Add(fullRetry)
	return sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: sc.NextFireAt.UnixMilli(), Approved: approved},
		fmt.Sprintf("sched:%s:full:%d", sc.ID, again.UnixMilli()), again)
}

func (sh *schedules) stillQueued(ctx context.Context, turn string) bool {
	if turn == "" {
		return false
	}
	t, err := sh.st.GetTurn(ctx, turn)
	return err == nil && t.Status == store.TurnQueued
}

// releaseHeld fires at once the held schedules a conversation set (the owner
// wrote in it, or allowed its card, R9.6).
func (sh *schedules) releaseHeld(ctx context.Context, setter string, approved bool) {
	by, err := sh.st.SchedulesBy(ctx, setter)
	if err != nil {
		sh.log.Warn("release held schedules", "session", setter, "err", err)
		return
	}
	for _, sc := range by {
		if sc.HeldSince.IsZero() {
			continue
		}
		if err := sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: sc.NextFireAt.UnixMilli(), Approved: approved},
			fmt.Sprintf("sched:%s:release:%s", sc.ID, store.NewID(3)), timeZero); err != nil {
			sh.log.Warn("release held schedule", "schedule", sc.ID, "err", err)
		}
	}
}

// RecoverSchedules gives every overdue active schedule its occurrence task
// again (at boot and each minute): a time missed while the relay was down, or
// whose task was lost, fires once, then the grid goes on (R9.3). A schedule
// due later still has its task; task ids make a duplicate impossible.
func (sh *schedules) RecoverSchedules(ctx context.Context) error {
	all, err := sh.st.ActiveSchedules(ctx)
	if err != nil {
		return err
	}
	overdue := sh.now().Add(-overdueAfter)
	for _, sc := range all {
		if sc.NextFireAt.IsZero() || sc.NextFireAt.After(overdue) || !sc.HeldSince.IsZero() {
			continue
		}
		if err := sh.pipeline.schedule(ctx, jobs.TypeFire, jobs.FirePayload{Schedule: sc.ID, At: sc.NextFireAt.UnixMilli()}, fireID(sc.ID, sc.NextFireAt), sc.NextFireAt); err != nil {
			return err
		}
	}
	return nil
}

// endSchedulesFor ends the schedules that fire into or were set by an archived session.
func (sh *schedules) endSchedulesFor(ctx context.Context, sid, reason string) error {
	into, err := sh.st.SchedulesInto(ctx, sid)
	if err != nil {
		return err
	}
	by, err := sh.st.SchedulesBy(ctx, sid)
	if err != nil {
		return err
	}
	for _, sc := range append(into, by...) {
		if err := sh.endSchedule(ctx, sc, reason); err != nil {
			return err
		}
	}
	return nil
}

// Schedules lists every active schedule for the owner, each naming the
// conversation that set it (a schedule always has its setter).
func (sh *schedules) Schedules(ctx context.Context) ([]*relay.Schedule, error) {
	all, err := sh.st.ActiveSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := []*relay.Schedule{}
	for _, sc := range all {
		v := sh.scheduleView(ctx, sc, "")
		v.SetBy = sc.Setter
		out = append(out, v)
	}
	return out, nil
}

// CancelSchedule is the owner's Cancel.
func (sh *schedules) CancelSchedule(ctx context.Context, id string) (*relay.Ended, error) {
	sc, err := sh.st.GetSchedule(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No schedule %q. Nothing was done.", id)
	}
	if err != nil {
		return nil, err
	}
	if err := sh.endSchedule(ctx, sc, "unscheduled"); err != nil {
		return nil, err
	}
	return &relay.Ended{ID: sc.ID, EndReason: sc.EndReason}, nil
}

// scheduleWhen is "once" or "every N min".
func scheduleWhen(every int) string {
	if every <= 0 {
		return "once"
	}
	return fmt.Sprintf("every %d min", every)
}

// scheduleCardLine is a schedule card's line (R9.6; R18.16: one line).
func scheduleCardLine(title string, target *store.Session, every int, first time.Time, text string) string {
	return fmt.Sprintf(`Schedule "%s" into "%s" (%s), %s from %s: %s`, LineValue(title, fieldTitle), LineValue(target.Title, fieldTitle),
		lineID(target.ID), scheduleWhen(every), first.Format(time.RFC3339), LineValue(text, fieldExcerpt))
}

// scheduleHeader is the first line of a schedule's message (R9): its title
// is an agent's, made safe for the line (R18.16).
func scheduleHeader(sc *store.Schedule) string {
	return fmt.Sprintf(`[relay schedule %s "%s" · %s · automated message from OAR, not from the user; it approves nothing]`,
		LineValue(sc.ID, fieldID), LineValue(sc.Title, fieldTitle), scheduleWhen(sc.EveryMinutes))
}
