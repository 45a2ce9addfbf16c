package domain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// updates is update_session (R7.10): its checks (also what a paired relay
// asks before a card, peercheck.go), its card, the change, and the Claude
// settings a turn takes (claudeSettings, for the drain) by Options.Traits.
// It sees the store only as recordStore and updateStore and reaches the rest
// of the relay only through updatesHost.
type updates struct {
	st     updatesStore
	now    func() time.Time
	opts   *Options // the relay's: name, traits
	groups *groups
	cards  *cards
	models *models // the provider, its model and effort
	relay  updatesHost
}

// updatesStore is the store as update_session sees it.
type updatesStore interface {
	recordStore
	updateStore
}

// updatesHost is what update_session asks of the rest of the relay: the
// session a call names (sessions.go), the folders rule (create.go) and
// telling the console (notify.go).
type updatesHost interface {
	targets
	checkFolder(dir, nothing string) (string, *Error)
	notifySessions(ctx context.Context, ids ...string)
}

// effortUser is a provider that says whether its turns pass the effort on
// (exec: only when its command has an {effort} placeholder).
type effortUser interface {
	UsesEffort() bool
}

// SessionTraits say how a provider's sessions take update_session's Claude
// settings (R7.10): Claude sessions (claude-code, and exec or openai
// providers marked claude) use auto_compact_window and thinking_*; a
// provider may declare its own window semantics (a DeepSeek endpoint: the
// window takes effect and 0 means CompactWindowZero tokens; it always
// thinks).
type SessionTraits struct {
	Claude            bool
	CompactWindowZero int
	AlwaysThinks      bool
	// Billing is how the provider's turns are paid (config billing,
	// R24.6): a billing switch's card says it.
	Billing string
	// Repos: the provider's sessions work on a repository (R24.4).
	Repos bool
}

// traits are a provider's SessionTraits; a claude-code provider's sessions
// are Claude sessions whatever the options say.
func (up *updates) traits(p provider.Provider) SessionTraits {
	in := p.Info()
	t := up.opts.Traits[in.ID]
	if in.Type == "claude-code" {
		t.Claude = true
	}
	return t
}

// claudeSettings puts the session's auto_compact_window and thinking_*
// settings on a turn whose provider takes them (R7.10): Claude sessions take
// all three; a provider that declares its window semantics takes the window
// (0 meaning CompactWindowZero tokens).
func (up *updates) claudeSettings(p provider.Provider, s *store.Session, pt *provider.Turn) {
	tr := up.traits(p)
	switch {
	case tr.Claude:
		pt.AutoCompactWindow, pt.Thinking, pt.ThinkingDisplay = s.AutoCompactWindow, s.ThinkingEnabled, s.ThinkingDisplay
	case tr.CompactWindowZero > 0:
		pt.AutoCompactWindow = s.AutoCompactWindow
		if pt.AutoCompactWindow == 0 {
			pt.AutoCompactWindow = tr.CompactWindowZero
		}
	}
}

// usesEffort reports whether a provider's turns pass the effort on (R7.10):
// Claude Code, Codex, an openai provider with efforts configured, and an
// exec command that has {effort}.
func usesEffort(p provider.Provider) bool {
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

// claudeSettings are update_session's settings that apply to Claude
// sessions only, in the note's order.
var claudeSettings = []string{"thinking_enabled", "thinking_display", "auto_compact_window"}

// settingsNote is update_session's note on the given settings the
// session's provider does not use (R7.10), "" when none: effort where it
// does not reach the turns; auto_compact_window and thinking_* for any
// session that is not a Claude session, with what a provider that declares
// its own semantics does with them (the seed's DeepSeek note).
func (up *updates) settingsNote(p provider.Provider, given map[string]bool) string {
	in := p.Info()
	var notes []string
	if given["effort"] && !usesEffort(p) {
		notes = append(notes, fmt.Sprintf("effort does nothing for the %s provider (%s); stored for later turns.", in.Name, in.Type))
	}
	tr := up.traits(p)
	if tr.Claude {
		return strings.Join(notes, " ")
	}
	var names []string
	for _, n := range claudeSettings {
		if given[n] {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return strings.Join(notes, " ")
	}
	applies, change := "apply", "change"
	if len(names) == 1 {
		applies, change = "applies", "changes"
	}
	head := fmt.Sprintf("%s %s only to Claude sessions (Claude API sessions included)", strings.Join(names, ", "), applies)
	var parts, rest []string
	for _, n := range names {
		switch {
		case n == "auto_compact_window" && tr.CompactWindowZero > 0:
			parts = append(parts, fmt.Sprintf("auto_compact_window does take effect, and 0 means %s tokens", thousands(tr.CompactWindowZero)))
		case n == "thinking_enabled" && tr.AlwaysThinks:
			parts = append(parts, fmt.Sprintf("thinking_enabled changes nothing, as a %s session always thinks", in.Name))
		default:
			rest = append(rest, n)
		}
	}
	if len(parts) == 0 {
		notes = append(notes, fmt.Sprintf("%s and %s nothing for the %s provider (%s); stored for later turns.", head, change, in.Name, in.Type))
		return strings.Join(notes, " ")
	}
	if len(rest) > 0 {
		verb := "changes"
		if len(rest) > 1 {
			verb = "change"
		}
		parts = append(parts, fmt.Sprintf("%s %s nothing", strings.Join(rest, ", "), verb))
	}
	notes = append(notes, fmt.Sprintf("%s; on the %s provider (%s) %s; stored for later turns.", head, in.Name, in.Type, strings.Join(parts, "; ")))
	return strings.Join(notes, " ")
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

func (up *updates) settingsOf(ctx context.Context, s *store.Session) sessionSettings {
	var group *groupRef
	if s.GroupID != "" {
		if g, err := up.st.GetGroup(ctx, s.GroupID); err == nil {
			group = up.groups.groupRefOf(ctx, g, s.ID)
		}
	}
	var think *bool
	if s.ThinkingEnabled != "" {
		on := s.ThinkingEnabled == "on"
		think = &on
	}
	return sessionSettings{Provider: s.Provider, Model: s.Model, Effort: s.Effort, Mode: s.Mode, Title: s.Title,
		Group: group, Cwd: s.Cwd, AutoCompactWindow: compactWindow(s.AutoCompactWindow), ThinkingEnabled: think,
		ThinkingDisplay: strPtr(s.ThinkingDisplay)}
}

// updateSession changes settings of another session (R7.10). Its checks run
// in R3.4a's order: shapes, target, self, model / effort / group / folder,
// card; only then the effect. A call that changes nothing asks no card.
func (up *updates) updateSession(ctx context.Context, c *caller, a *args) (*result, *Error) {
	in, pl, ch, e := up.updateChecks(ctx, c, a)
	if e != nil {
		return nil, e
	}
	ur := &updateResult{Note: strings.Join(pl.notes, " "), ModelNote: pl.modelNote}
	res := newResult(pl.s.ID, "").with(ur)
	if len(ch.names) == 0 {
		res.what = "nothing changed"
		ur.Settings, ur.Changed = up.settingsOf(ctx, pl.s), []string{}
		return res, nil
	}
	if e := up.cardUpdate(ctx, c, pl, ch); e != nil {
		return nil, e
	}
	return up.applyUpdate(ctx, in, pl, ch, res)
}

// updateArgs are update_session's arguments, their shapes checked.
type updateArgs struct {
	model, effort, mode, title, groupRef, cwd, display string
	acw                                                int
	hasACW                                             bool
	think                                              string
}

// updatePlan is what update_session's checks found.
type updatePlan struct {
	s         *store.Session
	p         provider.Provider
	modelNote string
	notes     []string
	// Group: "none" leaves, a grp_ id must exist, an unknown name creates one.
	group       *store.Group
	leave       bool
	createGroup string
	cwd         string // the folder, cleaned
	acw         int    // auto_compact_window, rounded to an allowed value
}

// updateChecks are all of update_session's checks before its card: the
// arguments' shapes, its rules, and what would change (also the check a
// paired relay asks, R5.3).
func (up *updates) updateChecks(ctx context.Context, c *caller, a *args) (*updateArgs, *updatePlan, *updateChange, *Error) {
	in, e := parseUpdateArgs(a)
	if e != nil {
		return nil, nil, nil, e
	}
	pl, e := up.checkUpdate(ctx, c, a, in)
	if e != nil {
		return nil, nil, nil, e
	}
	return in, pl, up.updateChanges(ctx, in, pl), nil
}

// parseUpdateArgs reads update_session's arguments: shapes first (R3.4a).
func parseUpdateArgs(a *args) (*updateArgs, *Error) {
	var e *Error
	get := func(k string) string {
		v, err := a.str(k)
		if err != nil && e == nil {
			e = err
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingChanged, 1)
		}
		return v
	}
	in := &updateArgs{}
	in.model, in.effort, in.mode, in.title, in.groupRef, in.cwd, in.display = get("model"), get("effort"), get("mode"), get("title"), get("group"), get("cwd"), get("thinking_display")
	if e != nil {
		return nil, e
	}
	if in.acw, in.hasACW, e = a.window(); e != nil {
		return nil, e
	}
	if in.think, e = a.thinking(); e != nil {
		return nil, e
	}
	if in.model == "" && in.effort == "" && in.mode == "" && in.title == "" && in.groupRef == "" && in.cwd == "" && in.display == "" && !in.hasACW && in.think == "" {
		return nil, Errorf(CodeInvalidInput, "update_session needs at least one setting: model, effort, mode, title, group, cwd, auto_compact_window, thinking_enabled, thinking_display. %s", nothingChanged)
	}
	if e := checkMode(in.mode, nothingChanged); e != nil {
		return nil, e
	}
	if len(in.title) > 200 {
		return nil, Errorf(CodeInvalidInput, "title may have at most 200 characters. %s", nothingChanged)
	}
	return in, nil
}

// checkUpdate applies update_session's rules in order: target, self, model,
// effort, group, folder (not while the session is busy), and notes what is
// rounded or ignored.
func (up *updates) checkUpdate(ctx context.Context, c *caller, a *args, in *updateArgs) (*updatePlan, *Error) {
	s, e := up.relay.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "update_session cannot change the calling conversation itself. %s", nothingChanged)
	}
	p, e := up.models.provider(s.Provider, nothingChanged)
	if e != nil {
		return nil, e
	}
	pl := &updatePlan{s: s, p: p, cwd: in.cwd, acw: in.acw}
	info := p.Info()
	if pl.modelNote, e = up.models.checkModel(info, in.model, nothingChanged, false); e != nil {
		return nil, e
	}
	if e := up.models.checkEffort(info, in.effort, nothingChanged); e != nil {
		return nil, e
	}
	if e := up.planGroup(ctx, in.groupRef, pl); e != nil {
		return nil, e
	}
	if e := up.planFolder(ctx, pl); e != nil {
		return nil, e
	}
	up.planNotes(in, pl)
	return pl, nil
}

// planGroup resolves the group setting: "none" leaves, a grp_ id must
// exist, an unknown name creates one.
func (up *updates) planGroup(ctx context.Context, ref string, pl *updatePlan) *Error {
	switch {
	case ref == "":
	case strings.EqualFold(ref, "none"):
		pl.leave = pl.s.GroupID != ""
	default:
		g, ge := up.groups.findGroup(ctx, ref, nothingChanged)
		switch {
		case ge == nil:
			pl.group = g
		case strings.HasPrefix(ref, "grp_") || strings.Contains(ge.Msg, "more than one"):
			return ge
		default:
			pl.createGroup = ref
		}
	}
	return nil
}

// planFolder checks the folder setting: not for a session on its own
// clone, and no move while the session is busy.
func (up *updates) planFolder(ctx context.Context, pl *updatePlan) *Error {
	s := pl.s
	if pl.cwd == "" {
		return nil
	}
	if s.Repo != "" {
		return repoFolderFixed(s) // R24.4: it works on its own clone
	}
	var e *Error
	if pl.cwd, e = up.relay.checkFolder(pl.cwd, nothingChanged); e != nil {
		return e
	}
	if pl.cwd == s.Cwd {
		return nil
	}
	busy, why, err := up.busy(ctx, s.ID)
	if err != nil {
		return internal("checkUpdate: busy", err)
	}
	if busy {
		return Errorf(CodeBusy, "The session cannot move to another folder now: %s. Try again when it is idle. %s", why, nothingChanged)
	}
	return nil
}

// planNotes notes what is rounded (the auto-compact window) or ignored by
// the session's provider.
func (up *updates) planNotes(in *updateArgs, pl *updatePlan) {
	if in.hasACW && pl.acw > 0 { // 0 ("auto") is the provider's own window
		if n := nearestWindow(pl.acw); n != pl.acw {
			pl.notes = append(pl.notes, fmt.Sprintf("auto_compact_window %d was rounded to %d, the nearest allowed value.", pl.acw, n))
			pl.acw = n
		}
	}
	if n := up.settingsNote(pl.p, map[string]bool{"effort": in.effort != "", "thinking_enabled": in.think != "",
		"thinking_display": in.display != "", "auto_compact_window": in.hasACW}); n != "" {
		pl.notes = append(pl.notes, n)
	}
}

// updateText is one of update_session's text settings: its argument, its
// card label, its value and the session field it writes.
type updateText struct {
	name, label, value string
	field              func(*store.Session) *string
}

// updateChange is what update_session would change: the settings in
// argument order, the card's lines, and the text settings to write.
type updateChange struct {
	names, lines []string
	texts        []updateText
}

// updateChanges compares the settings with the session now; they are written
// after the card.
func (up *updates) updateChanges(ctx context.Context, in *updateArgs, pl *updatePlan) *updateChange {
	s := pl.s
	// What would change: the text settings in one table (compared now, written after the card).
	ch := &updateChange{texts: []updateText{
		{"model", "Model", in.model, func(s *store.Session) *string { return &s.Model }},
		{"effort", "Effort", in.effort, func(s *store.Session) *string { return &s.Effort }},
		{"mode", "Mode", in.mode, func(s *store.Session) *string { return &s.Mode }},
		{"title", "Title", in.title, func(s *store.Session) *string { return &s.Title }},
		{"cwd", "Folder", pl.cwd, func(s *store.Session) *string { return &s.Cwd }},
		{"thinking_enabled", "Thinking", in.think, func(s *store.Session) *string { return &s.ThinkingEnabled }},
		{"thinking_display", "Thinking display", in.display, func(s *store.Session) *string { return &s.ThinkingDisplay }},
	}}
	for _, t := range ch.texts {
		if t.name == "thinking_enabled" && in.hasACW && pl.acw != s.AutoCompactWindow { // in argument order
			ch.names = append(ch.names, "auto_compact_window")
			ch.lines = append(ch.lines, fmt.Sprintf("Auto-compact window: %d", pl.acw))
		}
		if t.value != "" && t.value != *t.field(s) {
			ch.names = append(ch.names, t.name)
			ch.lines = append(ch.lines, changeLine(t.label, t.value, fieldOf(t.name)))
		}
	}
	switch {
	case pl.leave:
		ch.names = append(ch.names, "group")
		ch.lines = append(ch.lines, "Group: none")
	case pl.group != nil && pl.group.ID != s.GroupID:
		ch.names = append(ch.names, "group")
		ch.lines = append(ch.lines, groupLine(up.groups.groupName(ctx, pl.group), pl.group.ID))
	case pl.createGroup != "":
		ch.names = append(ch.names, "group")
		ch.lines = append(ch.lines, groupLine(pl.createGroup, "new"))
	}
	return ch
}

// cardUpdate asks the owner when a card is needed: a session this
// conversation did not start, once per conversation and relay (R5.2.4), and
// ask/plan mode (R5.2.3).
func (up *updates) cardUpdate(ctx context.Context, c *caller, pl *updatePlan, ch *updateChange) *Error {
	s := pl.s
	need := &cardNeed{}
	if s.StartedBy == nil || s.StartedBy.Session != c.s.ID || s.StartedBy.Relay != up.opts.Name {
		flag := "update:" + up.opts.Name
		ok, err := up.st.Flag(ctx, c.s.ID, flag)
		if err != nil {
			return internal("cardUpdate: Flag", err)
		}
		if !ok {
			need.add("This conversation did not start that session; allowing covers its later such changes on this relay.")
			need.flags = append(need.flags, flag)
		}
	}
	modeCard(need, c, actUpdateSession)
	tid := s.ID
	return up.cards.askCard(ctx, c, &cardAsk{need: need, action: actUpdateSession, target: &tid, lines: updateCardLines(s, ch.lines), nothing: nothingChanged})
}

// updateCardLines are an update_session card's lines: the session, then its
// changes (each made by changeLine or groupLine; R18.16: one line each).
func updateCardLines(s *store.Session, changes []string) []string {
	return []string{fmt.Sprintf(`Change "%s" (%s):`, LineValue(s.Title, fieldTitle), lineID(s.ID)), strings.Join(changes, " · ")}
}

// changeLine names one setting an update_session card would change, its
// value at most max characters.
func changeLine(label, value string, max int) string { return label + ": " + LineValue(value, max) }

// fieldOf is the length of a setting's value in a card's line (R18.16).
func fieldOf(setting string) int {
	switch setting {
	case "title", "group":
		return fieldTitle
	case "cwd":
		return fieldPath
	}
	return fieldModel
}

// applyUpdate writes the changes to the session as it is after the card.
func (up *updates) applyUpdate(ctx context.Context, in *updateArgs, pl *updatePlan, ch *updateChange, res *result) (*result, *Error) {
	ur := res.body.(*updateResult)   // updateSession made it
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	// Effect. Re-read the session: a card may have taken minutes.
	s, err := up.st.GetSession(ctx, pl.s.ID)
	if err != nil {
		return nil, internal("applyUpdate: GetSession", err)
	}
	var written []string
	var groupCreated *store.Group
	for _, name := range ch.names {
		switch name {
		case "auto_compact_window":
			s.AutoCompactWindow = pl.acw
		case "group":
			var gerr error
			switch {
			case pl.leave:
				gerr = up.groups.leaveGroup(ctx, s)
			case pl.group != nil:
				gerr = up.groups.joinGroup(ctx, s, pl.group)
			default:
				groupCreated, gerr = up.groups.newGroup(ctx, pl.createGroup, s.ID, false)
				if gerr == nil {
					gerr = up.groups.joinGroup(ctx, s, groupCreated)
				}
			}
			if gerr != nil {
				saveErr := up.st.SaveSession(ctx, s)
				done := "changing " + strings.Join(written, ", ")
				if len(written) == 0 || saveErr != nil {
					done = "starting the change"
				}
				return nil, internalAfter(gerr, done+" (the group was not changed)").With("changed", nonNil(written))
			}
		default:
			for _, t := range ch.texts {
				if t.name == name {
					*t.field(s) = t.value
				}
			}
		}
		written = append(written, name)
	}
	if err := up.st.SaveSession(ctx, s); err != nil {
		return nil, internal("applyUpdate: SaveSession", err)
	}
	up.relay.notifySessions(ctx, s.ID) // the owner's console (R19.6)
	if pl.cwd != "" && contains(written, "cwd") {
		notes := pl.notes
		_ = up.st.NoteCwd(ctx, pl.cwd, up.now())
		if keepsConversation(pl.p) {
			// R17.2: the agent CLI's conversation belongs to the old folder; the next turn starts a fresh one.
			if err := up.st.ClearAgentSession(ctx, s.ID); err != nil {
				return nil, internalAfter(err, "changing "+strings.Join(written, ", "))
			}
			ur.Relaunched = some(true)
			notes = append(notes, "The agent starts a fresh conversation in the new folder at the session's next turn; this relay's messages of the session stay.")
		} else {
			ur.Relaunched = some(false)
			notes = append(notes, "The new folder is kept for the session's next turn; no agent process had to be restarted.")
		}
		ur.Note = strings.Join(notes, " ")
	}
	ur.Settings, ur.Changed = up.settingsOf(ctx, s), written
	if groupCreated != nil {
		ur.GroupCreated = &groupMade{ID: groupCreated.ID, Name: groupCreated.Name}
	}
	res.what = strings.Join(written, ", ")
	return res, nil
}

// busy says whether a session has a turn queued or running or a task running.
func (up *updates) busy(ctx context.Context, sid string) (bool, string, error) {
	cur, err := up.st.CurrentTurn(ctx, sid)
	if err != nil {
		return false, "", err
	}
	if cur != "" {
		return true, "a turn is running", nil
	}
	q, err := up.st.QueuedTurns(ctx, sid)
	if err != nil {
		return false, "", err
	}
	if len(q) > 0 {
		return true, "a turn is queued", nil
	}
	tasks, err := up.st.Tasks(ctx, sid)
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
