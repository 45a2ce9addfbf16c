package main

import (
	"fmt"
	"time"
)

// Rows of (e), (f) and (g).

func (b *bench) tableE(row rowFunc, e eventsResult) {
	o := b.o
	row("e", "events: setup", fmt.Sprintf("%d sessions (%d watchers, %d watched, created in-process); %d subscriptions, each watching one session for [turn_end], written through store.SaveSubscription (the subscribe action's first-subscribe card needs a running turn of the watcher); timing.coalesce 0, wake_limit_per_hour raised; a relay of its own",
		e.sessions, e.watchers, e.watched, evTotal), "", "")
	p := e.paced
	row("e", fmt.Sprintf("event → delivery latency, paced: %d owner messages at %d/s to sessions with 1 subscription; each turn's turn_end (store.Event.At) → the watcher's queued event message (createdAt)", p.sent, o.eventRate),
		fmt.Sprintf("p50 **%s**, p99 **%s**, max %s (n=%d of %d)", fms(p.lat.p50()), fms(p.lat.p99()), fms(p.lat.q(1)), p.delivered, p.sent),
		"p99 < 250 ms", verdict(p.delivered == p.sent && p.lat.p99() < 250*time.Millisecond))
	row("e", "paced: throughput and events queue", fmt.Sprintf("%s delivered (emitted %s); events queue mean %.1f pending, %.1f active; %d event messages carried more than one event",
		frate(p.flowRate(), "events/s"), frate(p.emitRate(), "events/s"), p.pending, p.active, p.batched), "", "")
	row("e", "paced: cost per event, end to end (owner message, the watched turn, fan-out, delivery, the watcher's turn)", p.cost.per(p.sent).String(), "", "")
	row("e", "machine load during the paced phase", p.cost.load(0), "", "")
	u := e.burst
	row("e", fmt.Sprintf("events/s through fan-out to delivery, burst: %d owner messages at once (16 senders)", u.sent),
		fmt.Sprintf("**%s** (first event → last delivery, n=%d of %d; emitted at %s while the turns ran); latency p50 %s, p99 %s; events queue mean %.1f pending",
			frate(u.flowRate(), "events/s"), u.delivered, u.sent, frate(u.emitRate(), "events/s"), fms(u.lat.p50()), fms(u.lat.p99()), u.pending), "", "")
	row("e", "burst: cost per event, end to end; machine load", u.cost.per(u.sent).String()+" · "+u.cost.load(0), "", "")
	j := e.jobs
	row("e", fmt.Sprintf("events/s of fan-out and delivery alone: %d turn_end events appended to the stream and their fan-out jobs enqueued at once (emit's two steps, no turn on the watched side; the watchers' turns still run)", j.sent),
		fmt.Sprintf("**%s** (first event → last delivery, n=%d of %d); latency p50 %s, p99 %s; events queue mean %.1f pending, %.1f active",
			frate(j.flowRate(), "events/s"), j.delivered, j.sent, fms(j.lat.p50()), fms(j.lat.p99()), j.pending, j.active), "", "")
	row("e", "fan-out alone: cost per event (fan-out, delivery, the watcher's turn); machine load", j.cost.per(j.sent).String()+" · "+j.cost.load(0), "", "")

	c := func(total, m, iso int) *fanCell {
		if x := e.cells[[3]int{total, m, iso}]; x != nil {
			return x
		}
		return &fanCell{}
	}
	// The mean is the cost (a loop of fan-outs runs at 1/mean events/s); the
	// p50 flips between the two modes a Redis round trip takes here.
	cell := func(x *fanCell) string {
		return fmt.Sprintf("%s (p50 %s; %.1f round trips)", fms(x.mean()), fms(x.d().p50()), x.rtsPer())
	}
	for _, iso := range []int{1, 0} {
		how := "isolated: the turns queue paused during the run (the watcher turns the deliveries start wait)"
		target, flatV, linV := "", "", ""
		if iso == 0 {
			how = "back to back: beside the watcher turns the deliveries start"
		}
		s1, l1, l0, l10 := c(evSmallTotal, 1, iso), c(evTotal, 1, iso), c(evTotal, 0, iso), c(evTotal, 10, iso)
		flat := ratio(float64(l1.mean()), float64(s1.mean()))
		if iso == 1 {
			target, flatV = "flat: ≤ 1.25×", verdict(flat <= 1.25)
		}
		row("e", fmt.Sprintf("fan-out per event vs **total** subscriptions, 1 matching: Relay.Fanout in-process, one event at a time, to delivery, %s (mean of %d; Redis round trips per event)", how, l1.n()),
			fmt.Sprintf("%d total: **%s** · %d total: **%s** → **%.2f×**", evSmallTotal, cell(s1), evTotal, cell(l1), flat), target, flatV)
		per1 := l1.mean() - l0.mean()
		per10 := (l10.mean() - l0.mean()) / 10
		lin := ratio(float64(per10), float64(per1))
		target = ""
		if iso == 1 {
			target, linV = "linear: per matching subscription at 10 within 0.67–1.5× of at 1", verdict(lin >= 0.67 && lin <= 1.5)
		}
		row("e", fmt.Sprintf("fan-out per event vs **matching** subscriptions, %d total, %s", evTotal, how),
			fmt.Sprintf("1 matching: **%s** · 10 matching: **%s** (%.1f×); 0 matching (the fixed part): %s; per matching subscription: %s at 1, %s at 10 → **%.2f×**",
				cell(l1), cell(l10), ratio(float64(l10.mean()), float64(l1.mean())), cell(l0), fms(per1), fms(per10), lin), target, linV)
	}
	for _, iso := range []int{1, 0} {
		detail := ""
		for _, total := range []int{evSmallTotal, evTotal} {
			for _, m := range []int{0, 1, 10} {
				x := c(total, m, iso)
				detail += fmt.Sprintf("%d/%d: p50 %s, p99 %s, mean %s, %.1f RT · ", total, m, fms(x.d().p50()), fms(x.d().p99()), fms(x.mean()), x.rtsPer())
			}
		}
		how := "isolated"
		if iso == 0 {
			how = "back to back"
		}
		row("e", "fan-out per event, every cell (total/matching), "+how, detail[:len(detail)-3], "", "")
	}
}

func (b *bench) tableF(row rowFunc, h heldResult) {
	row("f", fmt.Sprintf("held events: %d turn_end events held by one subscription with digest_minutes 60 (list P:held:SUB), fanned out by Relay.Fanout; each event's text is a %d-byte reply (the event keeps the whole reply), its JSON %d B", h.n, h.replyBytes, h.eventJSON),
		fmt.Sprintf("MEMORY USAGE of the held list: **%.0f B/held event**; INFO used_memory delta: %.0f B/held event; MEMORY USAGE delta over the prefix's keys: %.0f B/held event (it includes the replay stream P:subev:SUB, capped at limits.replay_events: %d B in all)",
			h.per(h.heldUsage), h.per(h.usedDelta), h.per(h.usage), h.subevUsage), "", "")
	row("f", "held events: total for 10,000, and the part that is not the reply text",
		fmt.Sprintf("**%.1f MiB** (held list); %.1f MiB (used_memory delta); without the reply text about %.0f B/held event", h.per(h.heldUsage)*10000/mib, h.per(h.usedDelta)*10000/mib, h.per(h.heldUsage)-float64(h.replyBytes)), "", "")
}

func (b *bench) tableG(row rowFunc, s schedResult) {
	row("g", fmt.Sprintf("schedules in Redis: %d active schedules made by the schedule action in-process (daily, due tomorrow, %d per conversation, %d conversations); %d keys under the prefix, %d asynq keys",
		s.n, perTarget, s.sessions, s.keysPrefix, s.keysAsynq),
		fmt.Sprintf("INFO used_memory delta: **%.0f B/schedule**; MEMORY USAGE delta: %.0f B prefix keys (sch record, schs/schinto indexes) + %.0f B asynq keys (the occurrence's task hash and scheduled-set entry) = %.0f B/schedule",
			s.per(s.usedDelta), s.per(s.usagePrefix), s.per(s.usageAsynq), s.per(s.usagePrefix+s.usageAsynq)), "", "")
	row("g", "schedules: total for 10,000",
		fmt.Sprintf("**%.1f MiB** (used_memory delta); %.1f MiB (MEMORY USAGE); created at %s", s.per(s.usedDelta)*10000/mib, s.per(s.usagePrefix+s.usageAsynq)*10000/mib,
			frate(rate(s.n, s.createWall), "schedules/s")), "", "")
	row("g", fmt.Sprintf("firing lateness: %d schedules due %d/s at whole seconds over %d s, one per conversation each second (besides the %d); nextFireAt → the queued message's createdAt", s.fireN, s.fireRate, s.fireSecs, s.n),
		fmt.Sprintf("p50 **%s**, p99 **%s**, max %s (n=%d fired of %d; %d fired twice)", fms(s.lat.p50()), fms(s.lat.p99()), fms(s.lat.q(1)), s.found, s.fireN, s.dups),
		"p99 < 1.5 s", verdict(s.found == s.fireN && s.dups == 0 && s.lat.p99() < 1500*time.Millisecond))
	row("g", "firings before nextFireAt", fmt.Sprintf("**%d** (most early: %s)", s.early, fms(s.maxEarly)), "0", verdict(s.early == 0))
	row("g", "while firing: queues, cost per firing (fire task, the prompt's turn), machine load",
		fmt.Sprintf("events queue (fire tasks) mean %.1f pending, turns queue %.1f pending; %s; %s; the window's schedules were made in %s, %s before the first was due",
			s.pending, s.turnsQ, s.cost.per(s.found).String(), s.cost.load(0), fms(s.fireCreate), fms(s.fireLead)), "", "")
	row("g", "schedule recovery (Relay.RecoverSchedules: at boot and every minute in every process)",
		fmt.Sprintf("%s for %d active schedules, %d Redis round trips", fms(s.recoverWall), s.active, s.recoverRTs), "", "")
}
