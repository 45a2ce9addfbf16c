package provider

import (
	"sync/atomic"
	"time"
)

// watchdog is the silence watchdog of an agent process (R17.5, R22.2): an
// agent that gives no sign of life (output on stdout or stderr) for limit
// while it waits on nothing of the relay is hung and is stopped. The agent
// CLIs and the ACP agents share it; the zero value is a clock that never
// fires before limit is set.
type watchdog struct {
	limit time.Duration
	last  atomic.Int64 // unix nanos of the agent's last sign of life
	// onTouch, when set, is called with every sign of life (the CLI's
	// host hears of its output, R25.2).
	onTouch func()
}

// touch records a sign of life.
func (w *watchdog) touch() {
	w.last.Store(time.Now().UnixNano())
	if w.onTouch != nil {
		w.onTouch()
	}
}

// lastOutput is when the agent last gave a sign of life.
func (w *watchdog) lastOutput() time.Time { return time.Unix(0, w.last.Load()) }

// ticker is what a turn checks the silence by: a quarter of the limit, at
// most a second.
func (w *watchdog) ticker() *time.Ticker {
	tick := w.limit / 4
	if tick > time.Second {
		tick = time.Second
	}
	return time.NewTicker(tick)
}

// silent is one check on a tick: an agent that waits on the relay (a
// question, a relay_tool call, a terminal) is not silent, its clock starts
// again; otherwise it is once it gave no sign of life for limit.
func (w *watchdog) silent(waiting bool) bool {
	if waiting {
		w.touch()
		return false
	}
	return time.Since(w.lastOutput()) >= w.limit
}
