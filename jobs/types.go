// Package jobs names the relay's jobs and their payloads: the contract
// between who enqueues work (the domain) and who runs it (the worker). It
// holds no queue machinery (no asynq): that is jobs/asynqjobs.
package jobs

import "time"

// TypeDrain runs the next queued turn of one session.
const TypeDrain = "session:drain"

// DrainPayload names the session whose next turn runs. TP and TS are the
// W3C traceparent and tracestate of the span that queued the turn (R25.1:
// the worker's span joins that trace); left out when traces are off, so the
// payload is what it was.
type DrainPayload struct {
	Session string `json:"session"`
	TP      string `json:"tp,omitempty"`
	TS      string `json:"ts,omitempty"`
}

// Event delivery task types (fan-out, timed releases, coalescing flushes,
// wake-limit summaries, heartbeats, the stall scan).
const (
	TypeFanout    = "event:fanout" // payload: the event (store.Event)
	TypeRelease   = "event:release"
	TypeFlush     = "event:flush"
	TypeSummary   = "event:summary"
	TypeHeartbeat = "event:heartbeat"
	TypeStallScan = "event:stallscan" // no payload
	// TypeFire fires one occurrence of a schedule.
	TypeFire = "schedule:fire"
)

// Types is every job type, the worker's handlers' list (each one handed to
// the domain's RunJob, which knows them all: a domain test checks it).
var Types = []string{TypeDrain, TypeFanout, TypeRelease, TypeFlush, TypeSummary, TypeHeartbeat, TypeStallScan, TypeFire}

// Payloads of the delivery jobs.
type (
	ReleasePayload struct {
		Sub string `json:"sub"`
	}
	FlushPayload struct {
		Watcher string `json:"watcher"`
		Window  int64  `json:"window"` // unix ms of the window's end
	}
	SummaryPayload struct {
		Watcher string `json:"watcher"`
	}
	HeartbeatPayload struct {
		Sub string `json:"sub"`
		At  int64  `json:"at"` // unix ms (clock time) the beat is due
	}
)

// FirePayload names the schedule and the occurrence (unix ms of nextFireAt).
type FirePayload struct {
	Schedule string `json:"schedule"`
	At       int64  `json:"at"`
	Approved bool   `json:"approved,omitempty"` // the owner allowed a card of the setter: a held firing goes
}

// Queues names the asynq queues of one relay (their names carry the relay's
// key prefix so several relays or tests can share one Redis).
type Queues struct {
	Turns  string
	Events string
}

// QueuesFor returns the queue names for a key prefix: PREFIX}:turns and
// PREFIX}:events. asynq keeps a queue's keys under asynq:{QUEUE}:…, and
// Redis Cluster hashes a key on what stands between its first "{" and the
// first "}" after it: asynq:{PREFIX}:turns}:pending hashes on PREFIX, as the
// relay's own keys ({PREFIX}:…) do. So both queues and all the relay's keys
// share one hash slot, and the two queues stay apart (asynq weighs them,
// and their depths are the relay_queue_* metrics).
func QueuesFor(prefix string) Queues {
	return Queues{Turns: prefix + "}:turns", Events: prefix + "}:events"}
}

// OldQueuesFor are the queue names before the relay's keys shared one hash
// slot: PREFIX:turns and PREFIX:events.
func OldQueuesFor(prefix string) Queues {
	return Queues{Turns: prefix + ":turns", Events: prefix + ":events"}
}

// All lists the queue names.
func (q Queues) All() []string { return []string{q.Turns, q.Events} }

// DrainTimeout is the asynq timeout of a drain task. It is longer than the
// longest max_turn_seconds (86,400 s): the relay itself ends a turn that runs
// too long, counted from the turn's start with the setting as it is then
// (R18.13), so a queue timeout never ends or restarts a running turn.
const DrainTimeout = 25 * time.Hour
