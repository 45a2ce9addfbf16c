package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay/clock"
)

// Scripted is the deterministic agent for tests and demos (R11.1). A prompt
// that is a JSON object {"script": [STEP, …]} runs its steps; any other
// prompt is answered "echo: " + the prompt.
type Scripted struct {
	info Info
	clk  clock.Clock // what its sleep steps wait on (UseClock)

	mu     sync.Mutex
	bg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// NewScripted returns the scripted provider with the given description.
func NewScripted(info Info) *Scripted {
	if info.ID == "" {
		info = Info{ID: "scripted", Name: "Scripted", Models: []string{"scripted-1"}, DefaultModel: "scripted-1", Efforts: []string{"low", "medium", "high"}}
	}
	info.Type = "scripted"
	ctx, cancel := context.WithCancel(context.Background())
	return &Scripted{info: info, clk: clock.Real{}, ctx: ctx, cancel: cancel}
}

// UseClock makes the script's sleeps (sleep_ms, a subagent's ms, a task's
// line_ms) wait on clk instead of the wall clock: a test that runs the relay
// on a simulated clock of the durations of work moves both. Call it before
// the first turn.
func (p *Scripted) UseClock(clk clock.Clock) { p.clk = clk }

// Info describes the provider.
func (p *Scripted) Info() Info { return p.info }

// Close ends background tasks (they are marked killed) and waits for them.
func (p *Scripted) Close() {
	p.cancel()
	p.bg.Wait()
}

// Step is one step of a script.
type Step struct {
	Reply    *string         `json:"reply,omitempty"`
	SleepMS  *int            `json:"sleep_ms,omitempty"`
	Tool     json.RawMessage `json:"tool,omitempty"`
	Question *QuestionStep   `json:"question,omitempty"`
	Task     *TaskStep       `json:"task,omitempty"`
	Subagent *SubagentStep   `json:"subagent,omitempty"`
	Error    *string         `json:"error,omitempty"`
	Model    *string         `json:"model,omitempty"` // the turn reports this model as the one that ran (R7.13)
	Extra    map[string]any  `json:"-"`
}

// QuestionStep raises a question card.
type QuestionStep struct {
	Text    string   `json:"text"`
	Options []string `json:"options"`
}

// TaskStep is a simulated shell task.
type TaskStep struct {
	Description string   `json:"description"`
	Lines       []string `json:"lines"`
	LineMS      int      `json:"line_ms"`
	Exit        int      `json:"exit"`
	Background  bool     `json:"background"`
	// Held keeps the lines in the agent until the relay asks for them
	// (TaskSpec.Fetch): each ask hands over the lines written so far, and
	// the end hands over the rest (R7.6).
	Held bool `json:"held"`
}

// SubagentStep is a background sub-agent.
type SubagentStep struct {
	Description string `json:"description"`
	MS          int    `json:"ms"`
}

// stripHeaders drops the header lines the relay puts before a prompt.
func stripHeaders(prompt string) string {
	for {
		t := strings.TrimLeft(prompt, " \t\r\n")
		if !strings.HasPrefix(t, "[Remote prompt") && !strings.HasPrefix(t, "[Prompt from") && !strings.HasPrefix(t, "[relay schedule") {
			return prompt
		}
		i := strings.IndexByte(t, '\n')
		if i < 0 {
			return ""
		}
		prompt = t[i+1:]
	}
}

// ParseScript returns the steps of a script prompt, or ok=false for a plain prompt.
func ParseScript(prompt string) ([]Step, bool, error) {
	t := strings.TrimSpace(stripHeaders(prompt))
	if !strings.HasPrefix(t, "{") {
		return nil, false, nil
	}
	var s struct {
		Script *[]json.RawMessage `json:"script"`
	}
	if json.Unmarshal([]byte(t), &s) != nil || s.Script == nil {
		return nil, false, nil //nolint:nilerr // not a script: a plain prompt, answered with echo
	}
	steps := make([]Step, 0, len(*s.Script))
	for i, raw := range *s.Script {
		var st Step
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return nil, true, fmt.Errorf("script step %d: %w", i+1, err)
		}
		steps = append(steps, st)
	}
	return steps, true, nil
}

// Run runs one turn.
func (p *Scripted) Run(ctx context.Context, t Turn, h Host) (Result, error) {
	model := t.Model
	if model == "" {
		model = p.info.DefaultModel
	}
	steps, isScript, err := ParseScript(t.Prompt)
	if err != nil {
		return Result{}, &TurnError{Msg: err.Error()}
	}
	prompt := stripHeaders(t.Prompt)
	if !isScript {
		return Result{Text: "echo: " + prompt, Model: model, Usage: Usage{InputTokens: int64(len(prompt)), OutputTokens: int64(len(prompt) + 6)}}, nil
	}
	r := &scriptRun{p: p, h: h, model: model}
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			return r.soFar(), err
		}
		if keep, err := r.step(ctx, st); err != nil {
			if keep {
				return r.soFar(), err
			}
			return Result{}, err
		}
		h.Partial(r.reply.String())
	}
	out := strings.TrimRight(r.reply.String(), "\n")
	return Result{Text: out, Model: r.model, Usage: Usage{InputTokens: int64(len(prompt)), OutputTokens: int64(len(out))}}, nil
}

// scriptRun is a script's turn: its reply so far and its model.
type scriptRun struct {
	p     *Scripted
	h     Host
	model string
	reply strings.Builder
}

// soFar is what a turn that ends early keeps: the reply so far.
func (r *scriptRun) soFar() Result {
	return Result{Text: strings.TrimRight(r.reply.String(), "\n"), Model: r.model}
}

// line adds s to the reply on a line of its own.
func (r *scriptRun) line(s string) {
	if r.reply.Len() > 0 && !strings.HasSuffix(r.reply.String(), "\n") {
		r.reply.WriteByte('\n')
	}
	r.reply.WriteString(s)
	r.reply.WriteByte('\n')
}

// step runs one step; an error ends the turn, with the reply so far when
// keep.
func (r *scriptRun) step(ctx context.Context, st Step) (keep bool, err error) {
	switch {
	case st.Reply != nil:
		r.reply.WriteString(*st.Reply)
	case st.SleepMS != nil:
		return true, r.p.sleep(ctx, time.Duration(*st.SleepMS)*time.Millisecond)
	case st.Tool != nil:
		r.line(string(r.h.CallTool(ctx, st.Tool)))
	case st.Question != nil:
		ans, err := r.h.AskUser(ctx, st.Question.Text, st.Question.Options)
		if err != nil {
			return true, err
		}
		r.reply.WriteString(ans)
	case st.Task != nil:
		return true, r.p.task(ctx, r.h, *st.Task)
	case st.Subagent != nil:
		return false, r.subagent(ctx, *st.Subagent)
	case st.Error != nil:
		return true, &TurnError{Msg: *st.Error}
	case st.Model != nil:
		r.model = *st.Model
	default:
		return false, &TurnError{Msg: "script step with no known key (reply, sleep_ms, tool, question, task, subagent, error, model)"}
	}
	return false, nil
}

// subagent starts a subagent task that ends after its time, in the
// background.
func (r *scriptRun) subagent(ctx context.Context, sa SubagentStep) error {
	task, err := r.h.StartTask(ctx, TaskSpec{Description: sa.Description, Type: "subagent"})
	if err != nil {
		return err
	}
	r.p.background(func(bctx context.Context) {
		if r.p.sleep(bctx, time.Duration(sa.MS)*time.Millisecond) != nil {
			kill(task)
			return
		}
		task.Finish(0)
	})
	return nil
}

func (p *Scripted) background(f func(ctx context.Context)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		f(p.ctx)
	}()
}

// kill ends a task as killed when the host supports it, else as failed.
func kill(t Task) {
	if k, ok := t.(interface{ Kill() }); ok {
		k.Kill()
		return
	}
	t.Finish(137)
}

func (p *Scripted) task(ctx context.Context, h Host, ts TaskStep) error {
	spec := TaskSpec{Description: ts.Description, Type: "shell"}
	var (
		mu      sync.Mutex
		task    Task
		pending []string // held lines not handed over yet
	)
	// flush hands the held lines over (under mu: in order, once each).
	flush := func() {
		mu.Lock()
		defer mu.Unlock()
		if task == nil {
			return
		}
		for _, l := range pending {
			task.Output(l)
		}
		pending = nil
	}
	if ts.Held {
		spec.Fetch = flush
	}
	t, err := h.StartTask(ctx, spec)
	if err != nil {
		return err
	}
	mu.Lock()
	task = t
	mu.Unlock()
	runLines := func(c context.Context) error {
		for _, l := range ts.Lines {
			if err := p.sleep(c, time.Duration(ts.LineMS)*time.Millisecond); err != nil {
				flush()
				kill(task)
				return err
			}
			if ts.Held {
				mu.Lock()
				pending = append(pending, l)
				mu.Unlock()
				continue
			}
			task.Output(l)
		}
		flush()
		task.Finish(ts.Exit)
		return nil
	}
	if ts.Background {
		p.background(func(bctx context.Context) { _ = runLines(bctx) })
		return nil
	}
	return runLines(ctx)
}

func (p *Scripted) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := p.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
