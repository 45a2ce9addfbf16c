package domain

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
	"github.com/oar/relay/taskout"
)

// tasks is the tasks subsystem (R7.5, R7.6): the background tasks a
// provider starts during a turn (startTask, a taskHandle writing their
// output and end into the store, the task events; a held task's output
// fetched from the process running it), their view in read_session and the
// read_task_output action. It sees the store only as recordStore and
// taskStore, emits through the delivery pipeline, and reaches the rest of
// the relay only through tasksHost.
type tasks struct {
	st       tasksStore
	now      func() time.Time
	log      *slog.Logger
	opts     *Options // the relay's: name, timing
	pipeline *pipeline
	hub      *hub
	relay    tasksHost
}

// tasksStore is the store as the tasks see it.
type tasksStore interface {
	recordStore
	taskStore
}

// tasksHost is what the tasks ask of the rest of the relay: the session a
// call names (sessions.go) and the settings (relay.go).
type tasksHost interface {
	targets
	settings(ctx context.Context) (store.Settings, error)
}

// taskView is a task as read_session shows it (R7.5).
func (tk *tasks) taskView(ctx context.Context, t *store.Task, quietAfter int) *relay.Task {
	b := taskBrief(t)
	v := &relay.Task{TaskID: b.TaskID, Description: b.Description, Type: b.Type, Status: b.Status, Output: t.Type != "subagent"}
	if t.Type == "subagent" {
		return v
	}
	lines, err := tk.st.TaskOutput(ctx, t.ID)
	if err == nil && len(lines) > 0 {
		if c := taskout.ParseCounts(cleanLines(lines)); c != nil {
			v.Counts = &relay.TaskCounts{Runner: c.Runner, Passed: c.Passed, Failed: c.Failed, Skipped: c.Skipped, Final: c.Final}
		}
	}
	if t.Status == "running" {
		last := t.LastOutputAt
		if last.IsZero() {
			last = t.StartedAt
		}
		mins := int(tk.now().Sub(last) / time.Minute)
		v.Health = &relay.TaskHealth{MinutesSinceOutput: mins, Quiet: mins >= quietAfter, QuietAfterMinutes: quietAfter}
	}
	return v
}

func cleanLines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = taskout.StripANSI(l)
	}
	return out
}

func (tk *tasks) findTask(ctx context.Context, sid, ref string) (*store.Task, *Error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, Errorf(CodeInvalidInput, "task_id is required: read_session lists a session's tasks. Nothing was done.")
	}
	all, err := tk.st.Tasks(ctx, sid)
	if err != nil {
		return nil, internal("findTask: Tasks", err)
	}
	var hits []*store.Task
	for _, t := range all {
		if t.ID == ref {
			return t, nil
		}
		if len(ref) >= 4 && strings.HasPrefix(t.ID, ref) {
			hits = append(hits, t)
		}
	}
	if len(hits) == 1 {
		return hits[0], nil
	}
	if len(hits) > 1 {
		return nil, Errorf(CodeInvalidInput, "task_id %q matches more than one task; give more characters. Nothing was done.", ref)
	}
	return nil, Errorf(CodeNotFound, "Session %s on relay %q has no task %q. Nothing was done.", id8(sid), tk.opts.Name, ref)
}

// taskOutputArgs is the session and task a read_task_output call names,
// and how many lines it reads; a task whose output is gone is NOT_FOUND.
func (tk *tasks) taskOutputArgs(ctx context.Context, a *args) (*store.Session, *store.Task, int, *Error) {
	ref, e := a.str("task_id")
	if e != nil {
		return nil, nil, 0, e
	}
	n, e := a.boundedInt("lines", 50, 1, 500)
	if e != nil {
		return nil, nil, 0, e
	}
	if strings.TrimSpace(ref) == "" {
		return nil, nil, 0, Errorf(CodeInvalidInput, "task_id is required: read_session lists a session's tasks. Nothing was done.")
	}
	s, e := tk.relay.target(ctx, a, "session")
	if e != nil {
		return nil, nil, 0, e
	}
	t, e := tk.findTask(ctx, s.ID, ref)
	if e != nil {
		return nil, nil, 0, e
	}
	keep := tk.opts.Timing.TaskOutputKept
	if t.Status != "running" && tk.now().Sub(t.EndedAt) >= keep {
		return nil, nil, 0, Errorf(CodeNotFound, "Task %s of session %s ended more than %s ago; its output is gone. Nothing was done.", id8(t.ID), id8(s.ID), keep)
	}
	return s, t, n, nil
}

func (tk *tasks) readTaskOutput(ctx context.Context, c *caller, a *args) (*result, *Error) {
	s, t, n, e := tk.taskOutputArgs(ctx, a)
	if e != nil {
		return nil, e
	}
	now := tk.now()
	st, err := tk.relay.settings(ctx)
	if err != nil {
		return nil, internal("readTaskOutput: settings", err)
	}
	raw, err := tk.st.TaskOutput(ctx, t.ID)
	if err != nil {
		return nil, internal("readTaskOutput: TaskOutput", err)
	}
	task := taskOutputTask{ID: t.ID, Description: t.Description, Type: taskType(t.Type), StartedAt: tsPtr(t.StartedAt), Status: t.Status, ExitCode: t.ExitCode}
	tail, truncated := taskout.Tail(raw, n)
	if tail == nil {
		tail = []string{}
	}
	if t.Lines > len(raw) {
		truncated = true
	}
	res := newResult(s.ID, "")
	res.task = t.ID
	out := &taskOutputResult{Task: task, Tail: tail, Truncated: truncated}
	res.with(out)
	var parts []string
	parts = append(parts, plural(len(tail), "line", "lines"), t.Status)
	switch {
	case t.Type == "subagent":
		out.Note = "A sub-agent writes no output to read; its status is shown."
	case len(raw) == 0 && t.Lines > 0:
		out.Note = "The output of this task is gone."
	case t.Lines > len(raw):
		out.Note = fmt.Sprintf("Only the end of the output is kept (the last %d of %d lines).", len(raw), t.Lines)
	}
	if t.Held && t.Status == "running" {
		// The output stays in the agent's process until asked for: ask the
		// process running the task (wherever it runs) and say so.
		if err := tk.st.Notify(ctx, fetchKey(t.ID)); err != nil {
			return nil, internal("readTaskOutput: Notify", err)
		}
		out.Note = joinNote(out.Note, "This task's output stays with the agent's process until asked for: the agent's process was asked; call again in a few seconds.")
	}
	last := t.LastOutputAt
	if last.IsZero() {
		last = t.StartedAt
	}
	if t.Status == "running" {
		mins := int(now.Sub(last) / time.Minute)
		out.Stall = &taskStall{Minutes: mins, Since: tsPtr(last), Quiet: mins >= st.QuietTaskMinutes,
			QuietAfterMinutes: st.QuietTaskMinutes}
	}
	if !t.LastOutputAt.IsZero() {
		parts = append(parts, "last output "+ago(now.Sub(t.LastOutputAt)))
	}
	if cnt := taskout.ParseCounts(cleanLines(raw)); cnt != nil {
		out.Counts = cnt
		parts = append(parts, fmt.Sprintf("%d passed, %d failed", cnt.Passed, cnt.Failed))
	}
	res.what = strings.Join(parts, ", ")
	return res, nil
}

func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	default:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
}

// taskHandle is a provider's running task, writing into the store.
type taskHandle struct {
	tk  *tasks
	t   *store.Task
	mu  chan struct{}
	end bool
	// stopFetch ends serveFetch when the held task ends; nil when not held.
	stopFetch chan struct{}
}

func (h *taskHandle) ID() string { return h.t.ID }

func (h *taskHandle) lock()   { h.mu <- struct{}{} }
func (h *taskHandle) unlock() { <-h.mu }

func (h *taskHandle) Output(line string) {
	h.lock()
	defer h.unlock()
	if h.end {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
	defer cancel()
	for _, l := range strings.Split(strings.TrimRight(line, "\n"), "\n") {
		h.t.Lines++
		if err := h.tk.st.AppendTaskOutput(ctx, h.t.ID, l); err != nil {
			h.tk.log.Warn("task output lost", "task", h.t.ID, "err", err)
		}
	}
	h.t.LastOutputAt = h.tk.now()
	if err := h.tk.st.SaveTask(ctx, h.t); err != nil {
		h.tk.log.Warn("task save failed", "task", h.t.ID, "err", err)
	}
}

func (h *taskHandle) Finish(code int) { h.finish(code, false) }

func (h *taskHandle) finish(code int, killed bool) {
	h.lock()
	defer h.unlock()
	if h.end {
		return
	}
	h.end = true
	if h.stopFetch != nil {
		close(h.stopFetch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), detachedWriteTimeout)
	defer cancel()
	h.t.EndedAt = h.tk.now()
	h.t.ExitCode = &code
	switch {
	case killed:
		h.t.Status = "killed"
		h.t.ExitCode = nil
	case code == 0:
		h.t.Status = "done"
	default:
		h.t.Status = "failed"
	}
	if err := h.tk.st.SaveTask(ctx, h.t); err != nil {
		h.tk.log.Warn("task save failed", "task", h.t.ID, "err", err)
	}
	_ = h.tk.st.ExpireTaskOutput(ctx, h.t.ID, h.tk.opts.Timing.TaskOutputKept)
	ev := &store.Event{Session: h.t.Session, TaskID: h.t.ID, Text: h.t.Description, Exit: h.t.ExitCode}
	switch {
	case h.t.Type == "subagent" && h.t.Status == "done":
		ev.Kind, ev.Exit = EvSubagentFinished, nil
	case h.t.Status == "done":
		ev.Kind = EvTaskFinished
	default:
		ev.Kind = EvTaskFailed // failed, killed, or a sub-agent that did not finish well
	}
	h.tk.pipeline.emit(ctx, ev)
}

func (tk *tasks) startTask(ctx context.Context, sid string, spec provider.TaskSpec) (*taskHandle, error) {
	typ := spec.Type
	if typ == "" {
		typ = "shell"
	}
	t := &store.Task{ID: store.NewID(6), Session: sid, Description: spec.Description, Type: typ, Status: "running", StartedAt: tk.now(),
		Held: spec.Fetch != nil && typ != "subagent"}
	if err := tk.st.SaveTask(ctx, t); err != nil {
		return nil, err
	}
	tk.pipeline.busyAgain(ctx, sid)
	if typ != "subagent" {
		tk.pipeline.emit(ctx, &store.Event{Kind: EvTaskStarted, Session: sid, TaskID: t.ID, Text: spec.Description})
	}
	h := &taskHandle{tk: tk, t: t, mu: make(chan struct{}, 1)}
	if t.Held {
		h.serveFetch(spec.Fetch)
	}
	return h, nil
}

// fetchKey is the notification that asks the process running a held task
// for its output (read_task_output, whichever process serves it).
func fetchKey(taskID string) string { return "taskfetch:" + taskID }

// serveFetch calls fetch each time read_task_output asks for the held
// task's output, until the task ends.
func (h *taskHandle) serveFetch(fetch func()) {
	ch, unsub := h.tk.hub.sub(fetchKey(h.t.ID))
	h.stopFetch = make(chan struct{})
	go func() {
		defer unsub()
		for {
			select {
			case <-h.stopFetch:
				return
			case <-ch:
				fetch()
			}
		}
	}()
}

// Kill ends the task as killed (a stopped turn's foreground task).
func (h *taskHandle) Kill() { h.finish(0, true) }
