package relay

import (
	"context"
	"fmt"
	"strings"

	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// effortUser is a provider that says whether its turns pass the effort on
// (exec: only when its command has an {effort} placeholder).
type effortUser interface {
	UsesEffort() bool
}

// usesSetting reports whether a provider's turns use a session setting
// (R7.10). Thinking and compaction settings reach no provider's turns on
// this relay; effort reaches Claude Code, Codex, an openai provider with
// efforts configured, and an exec command that has {effort}.
func usesSetting(p provider.Provider, name string) bool {
	if name != "effort" {
		return false
	}
	if u, ok := p.(effortUser); ok {
		return u.UsesEffort()
	}
	switch in := p.Info(); in.Type {
	case "claude-code", "codex":
		return true
	case "openai":
		return len(in.Efforts) > 0
	}
	return false
}

// ignoredNote is update_session's note naming the given settings that do
// nothing for the session's provider (R7.10), "" when none.
func ignoredNote(p provider.Provider, given map[string]bool) string {
	var names []string
	for _, n := range []string{"effort", "thinking_enabled", "thinking_display", "auto_compact_window"} {
		if given[n] && !usesSetting(p, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	verb := "does"
	if len(names) > 1 {
		verb = "do"
	}
	in := p.Info()
	return fmt.Sprintf("%s %s nothing for the %s provider (%s); stored for later turns.", strings.Join(names, ", "), verb, in.Name, in.Type)
}

// compactWindows are the auto-compact windows a session may use (tokens).
var compactWindows = []int{50000, 100000, 200000, 500000, 1000000}

func nearestWindow(n int) int {
	best := compactWindows[0]
	for _, w := range compactWindows {
		if abs(w-n) < abs(best-n) {
			best = w
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func (r *Relay) settingsOf(ctx context.Context, s *store.Session) map[string]any {
	var group any
	if s.GroupID != "" {
		if g, err := r.st.GetGroup(ctx, s.GroupID); err == nil {
			group = map[string]any{"id": g.ID, "name": r.groupName(ctx, g)}
		}
	}
	think := any(nil)
	if s.ThinkingEnabled != "" {
		think = s.ThinkingEnabled == "on"
	}
	acw := any(nil)
	if s.AutoCompactWindow > 0 {
		acw = s.AutoCompactWindow
	}
	return map[string]any{"provider": s.Provider, "model": s.Model, "effort": s.Effort, "mode": s.Mode, "title": s.Title,
		"group": group, "cwd": s.Cwd, "auto_compact_window": acw, "thinking_enabled": think,
		"thinking_display": nilIfEmpty(s.ThinkingDisplay)}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (r *Relay) updateSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	var e *Error
	get := func(k string) string {
		v, err := a.str(k)
		if err != nil && e == nil {
			e = err
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingChanged, 1)
		}
		return v
	}
	model, effort, mode, title, groupRef, cwd, display := get("model"), get("effort"), get("mode"), get("title"), get("group"), get("cwd"), get("thinking_display")
	if e != nil {
		return nil, e
	}
	acw, hasACW, e := a.integer("auto_compact_window")
	if e != nil {
		e.Msg = strings.Replace(e.Msg, nothingDone, nothingChanged, 1)
		return nil, e
	}
	think, e := a.thinking()
	if e != nil {
		return nil, e
	}
	if model == "" && effort == "" && mode == "" && title == "" && groupRef == "" && cwd == "" && display == "" && !hasACW && think == "" {
		return nil, Errorf(CodeInvalidInput, "update_session needs at least one setting: model, effort, mode, title, group, cwd, auto_compact_window, thinking_enabled, thinking_display. %s", nothingChanged)
	}
	if e := checkMode(mode, nothingChanged); e != nil {
		return nil, e
	}
	if len(title) > 200 {
		return nil, Errorf(CodeInvalidInput, "title may have at most 200 characters. %s", nothingChanged)
	}
	if hasACW && acw <= 0 {
		return nil, Errorf(CodeInvalidInput, "auto_compact_window must be a positive number of tokens (got %d). %s", acw, nothingChanged)
	}
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "update_session cannot change the calling conversation itself. %s", nothingChanged)
	}
	p, e := r.provider(s.Provider, nothingChanged)
	if e != nil {
		return nil, e
	}
	info := p.Info()
	var notes []string
	modelNote, e := r.checkModel(info, model, nothingChanged, false)
	if e != nil {
		return nil, e
	}
	if e := r.checkEffort(info, effort, nothingChanged); e != nil {
		return nil, e
	}
	// Group: "none" leaves, a grp_ id must exist, an unknown name creates one.
	var group *store.Group
	leave, createGroup := false, ""
	switch {
	case groupRef == "":
	case strings.EqualFold(groupRef, "none"):
		leave = s.GroupID != ""
	default:
		g, ge := r.findGroup(ctx, groupRef, nothingChanged)
		switch {
		case ge == nil:
			group = g
		case strings.HasPrefix(groupRef, "grp_") || strings.Contains(ge.Msg, "more than one"):
			return nil, ge
		default:
			createGroup = groupRef
		}
	}
	if cwd != "" {
		if cwd, e = r.checkFolder(cwd, nothingChanged); e != nil {
			return nil, e
		}
		if cwd != s.Cwd {
			busy, why, err := r.busy(ctx, s.ID)
			if err != nil {
				return nil, internal(err)
			}
			if busy {
				return nil, Errorf(CodeBusy, "The session cannot move to another folder now: %s. Try again when it is idle. %s", why, nothingChanged)
			}
		}
	}
	if hasACW {
		if n := nearestWindow(acw); n != acw {
			notes = append(notes, fmt.Sprintf("auto_compact_window %d was rounded to %d, the nearest allowed value.", acw, n))
			acw = n
		}
	}
	if n := ignoredNote(p, map[string]bool{"effort": effort != "", "thinking_enabled": think != "",
		"thinking_display": display != "", "auto_compact_window": hasACW}); n != "" {
		notes = append(notes, n)
	}
	// What would change: the text settings in one table (compared now, written after the card).
	texts := []struct {
		name, label, value string
		field              func(*store.Session) *string
	}{
		{"model", "Model", model, func(s *store.Session) *string { return &s.Model }},
		{"effort", "Effort", effort, func(s *store.Session) *string { return &s.Effort }},
		{"mode", "Mode", mode, func(s *store.Session) *string { return &s.Mode }},
		{"title", "Title", title, func(s *store.Session) *string { return &s.Title }},
		{"cwd", "Folder", cwd, func(s *store.Session) *string { return &s.Cwd }},
		{"thinking_enabled", "Thinking", think, func(s *store.Session) *string { return &s.ThinkingEnabled }},
		{"thinking_display", "Thinking display", display, func(s *store.Session) *string { return &s.ThinkingDisplay }},
	}
	var changed, lines []string
	for _, t := range texts {
		if t.name == "thinking_enabled" && hasACW && acw != s.AutoCompactWindow { // in argument order
			changed = append(changed, "auto_compact_window")
			lines = append(lines, fmt.Sprintf("Auto-compact window: %d", acw))
		}
		if t.value != "" && t.value != *t.field(s) {
			changed = append(changed, t.name)
			lines = append(lines, t.label+": "+t.value)
		}
	}
	switch {
	case leave:
		changed = append(changed, "group")
		lines = append(lines, "Group: none")
	case group != nil && group.ID != s.GroupID:
		changed = append(changed, "group")
		lines = append(lines, fmt.Sprintf("Group: %s (%s)", r.groupName(ctx, group), group.ID))
	case createGroup != "":
		changed = append(changed, "group")
		lines = append(lines, fmt.Sprintf("Group: %s (new)", createGroup))
	}
	res := newResult(s.ID, "")
	if len(notes) > 0 {
		res.set("note", strings.Join(notes, " "))
	}
	if modelNote != "" {
		res.set("modelNote", modelNote)
	}
	if len(changed) == 0 {
		res.what = "nothing changed"
		res.set("settings", r.settingsOf(ctx, s)).set("changed", []string{})
		return res, nil
	}
	// Card: a session this conversation did not start, once per conversation and relay (R5.2.4).
	need := &cardNeed{}
	if s.StartedBy == nil || s.StartedBy.Session != c.s.ID || s.StartedBy.Relay != r.opts.Name {
		flag := "update:" + r.opts.Name
		ok, err := r.st.Flag(ctx, c.s.ID, flag)
		if err != nil {
			return nil, internal(err)
		}
		if !ok {
			need.add("This conversation did not start that session; allowing covers its later such changes on this relay.")
			need.flags = append(need.flags, flag)
		}
	}
	modeCard(need, c, "update_session")
	tid := s.ID
	cardLines := []string{fmt.Sprintf("Change %q (%s):", s.Title, id8(s.ID)), strings.Join(lines, " · ")}
	if e := r.askCard(ctx, c, need, "update_session", &tid, cardLines, nothingChanged); e != nil {
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	// Effect. Re-read the session: a card may have taken minutes.
	s2, err := r.st.GetSession(ctx, s.ID)
	if err != nil {
		return nil, internal(err)
	}
	s = s2
	var written []string
	var groupCreated *store.Group
	for _, name := range changed {
		switch name {
		case "auto_compact_window":
			s.AutoCompactWindow = acw
		case "group":
			var gerr error
			switch {
			case leave:
				gerr = r.leaveGroup(ctx, s)
			case group != nil:
				gerr = r.joinGroup(ctx, s, group)
			default:
				groupCreated, gerr = r.newGroup(ctx, createGroup, s.ID, false)
				if gerr == nil {
					gerr = r.joinGroup(ctx, s, groupCreated)
				}
			}
			if gerr != nil {
				saveErr := r.st.SaveSession(ctx, s)
				done := "changing " + strings.Join(written, ", ")
				if len(written) == 0 || saveErr != nil {
					done = "starting the change"
				}
				return nil, internalAfter(gerr, done+" (the group was not changed)").With("changed", nonNil(written))
			}
		default:
			for _, t := range texts {
				if t.name == name {
					*t.field(s) = t.value
				}
			}
		}
		written = append(written, name)
	}
	if err := r.st.SaveSession(ctx, s); err != nil {
		return nil, internal(err)
	}
	if cwd != "" && contains(written, "cwd") {
		_ = r.st.NoteCwd(ctx, cwd, r.now())
		if keepsConversation(p) {
			// R17.2: the agent CLI's conversation belongs to the old folder; the next turn starts a fresh one.
			if err := r.st.ClearAgentSession(ctx, s.ID); err != nil {
				return nil, internalAfter(err, "changing "+strings.Join(written, ", "))
			}
			res.set("relaunched", true)
			notes = append(notes, "The agent starts a fresh conversation in the new folder at the session's next turn; this relay's messages of the session stay.")
		} else {
			res.set("relaunched", false)
			notes = append(notes, "The new folder is kept for the session's next turn; no agent process had to be restarted.")
		}
		res.set("note", strings.Join(notes, " "))
	}
	res.set("settings", r.settingsOf(ctx, s)).set("changed", written)
	if groupCreated != nil {
		res.set("groupCreated", map[string]any{"id": groupCreated.ID, "name": groupCreated.Name})
	}
	res.what = strings.Join(written, ", ")
	return res, nil
}

// busy says whether a session has a turn queued or running or a task running.
func (r *Relay) busy(ctx context.Context, sid string) (bool, string, error) {
	cur, err := r.st.CurrentTurn(ctx, sid)
	if err != nil {
		return false, "", err
	}
	if cur != "" {
		return true, "a turn is running", nil
	}
	q, err := r.st.QueuedTurns(ctx, sid)
	if err != nil {
		return false, "", err
	}
	if len(q) > 0 {
		return true, "a turn is queued", nil
	}
	tasks, err := r.st.Tasks(ctx, sid)
	if err != nil {
		return false, "", err
	}
	for _, t := range tasks {
		if t.Status == "running" {
			return true, "a task is running", nil
		}
	}
	return false, "", nil
}
