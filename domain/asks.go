package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

const nothingAsked = "Nothing was asked."

// asks is the asks subsystem (R10): the ask, list_questions and withdraw
// actions, an ask's checks (also those a paired relay asks, R5.3), the
// owner's inbox and its answers (each told to the asker and the session it
// concerns as question_answered), and ending the asks of an archived
// session. It sees the store only as recordStore and askStore, emits
// through the delivery pipeline, asks its card through the cards, and
// reaches the rest of the relay only through asksHost.
type asks struct {
	st       asksStore
	now      func() time.Time
	opts     *Options // the relay's: name, limits
	pipeline *pipeline
	cards    *cards
	relay    asksHost
}

// asksStore is the store as the asks see it.
type asksStore interface {
	recordStore
	askStore
}

// asksHost is what the asks ask of the rest of the relay: a session by
// reference (sessions.go) and telling the console (notify.go).
type asksHost interface {
	sessionByRef(ctx context.Context, ref string) (*store.Session, *Error)
	notify(ctx context.Context, what string)
	ownerNotice(ctx context.Context, event, sid, title, text string)
}

func (as *asks) ask(ctx context.Context, c *caller, a *args) (*result, *Error) {
	in, e := as.checkAsk(ctx, c, a)
	if e != nil {
		return nil, e
	}
	concern := in.concern
	// With session it is a write action: a card in ask/plan mode (R10.4); not counted by loop protection.
	if concern.ID != c.s.ID {
		need := &cardNeed{}
		addModeReason(need, c)
		tid := concern.ID
		if e := as.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action, target: &tid, lines: []string{askCardLine(concern, in.question)}, nothing: nothingAsked}); e != nil {
			return nil, e
		}
		ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	}
	ak := &store.Ask{ID: "ask_" + store.NewID(6), Asker: c.s.ID, Session: concern.ID, Question: in.question, Options: in.options,
		Recommendation: in.rec, Detail: in.detail, Status: "pending", CreatedAt: as.now()}
	// The limits again, checked and written in one step (R18.6).
	if err := as.st.AddAsk(ctx, ak, as.opts.Limits.OpenAsksPerConversation, as.opts.Limits.OpenAsksPerSession); err != nil {
		if le, ok := store.IsLimit(err); ok && le.Which == "asker" {
			return nil, Errorf(CodeQuestionLimit, "This conversation already has %d open asks, the most allowed; withdraw one or wait for answers. %s", le.Count, nothingAsked)
		} else if ok {
			return nil, Errorf(CodeQuestionLimit, "Session %s already has %d open asks, the most allowed. %s", id8(concern.ID), le.Count, nothingAsked)
		}
		return nil, internal("ask: AddAsk", err)
	}
	as.relay.notify(ctx, "inbox")
	if c.remote == nil { // a paired relay's agent asks its own owner, who reads it there (R10.5)
		as.relay.ownerNotice(ctx, relay.NoticeAsk, concern.ID, concern.Title, in.question) // R23.10
	}
	res := newResult("", fmt.Sprintf("question %s pending", ak.ID))
	if concern.ID != c.s.ID {
		res.session = concern.ID
	}
	return res.with(&askResult{QuestionID: ak.ID, Status: "pending"}), nil
}

// askArgs are an ask's arguments, checked, and the session it concerns.
type askArgs struct {
	question, rec, detail string
	options               []string
	concern               *store.Session
}

// checkAsk applies an ask's checks (shapes, the session it concerns, the
// open asks' limits); nothing is written (also the check a paired relay
// asks before its card, R5.3).
func (as *asks) checkAsk(ctx context.Context, c *caller, a *args) (*askArgs, *Error) {
	in, e := askShapes(a)
	if e != nil {
		return nil, e
	}
	in.concern = c.s
	if ref, e := a.str("session"); e != nil {
		return nil, e
	} else if ref != "" {
		s, e := as.relay.sessionByRef(ctx, ref)
		if e != nil {
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingAsked, 1)
			return nil, e
		}
		in.concern = s
	}
	byAsker, inSession, err := as.st.OpenAskCounts(ctx, c.s.ID, in.concern.ID)
	if err != nil {
		return nil, internal("checkAsk: OpenAskCounts", err)
	}
	if byAsker >= as.opts.Limits.OpenAsksPerConversation {
		return nil, Errorf(CodeQuestionLimit, "This conversation already has %d open asks, the most allowed; withdraw one or wait for answers. %s", byAsker, nothingAsked)
	}
	if inSession >= as.opts.Limits.OpenAsksPerSession {
		return nil, Errorf(CodeQuestionLimit, "Session %s already has %d open asks, the most allowed. %s", id8(in.concern.ID), inSession, nothingAsked)
	}
	return in, nil
}

// askShapes reads an ask's texts: question, options, recommendation and
// detail, each within its length.
func askShapes(a *args) (*askArgs, *Error) {
	question, e := a.str("question")
	if e != nil {
		return nil, e
	}
	if strings.TrimSpace(question) == "" {
		return nil, Errorf(CodeInvalidInput, "question is required. %s", nothingAsked)
	}
	if e := maxChars("question", question, 4000, nothingAsked); e != nil {
		return nil, e
	}
	options, e := askOptions(a)
	if e != nil {
		return nil, e
	}
	rec, e := a.str("recommendation")
	if e != nil {
		return nil, e
	}
	if e := maxChars("recommendation", rec, 1000, nothingAsked); e != nil {
		return nil, e
	}
	detail, e := a.str("detail")
	if e != nil {
		return nil, e
	}
	if e := maxChars("detail", detail, 16000, nothingAsked); e != nil {
		return nil, e
	}
	return &askArgs{question: question, rec: rec, detail: detail, options: options}, nil
}

// askOptions reads an ask's options: at most 10, each of at most 200 characters.
func askOptions(a *args) ([]string, *Error) {
	options, e := a.strs("options")
	if e != nil {
		return nil, e
	}
	if len(options) > 10 {
		return nil, Errorf(CodeInvalidInput, "options may list at most 10 choices (got %d). %s", len(options), nothingAsked)
	}
	for i, o := range options {
		if e := maxChars(fmt.Sprintf("options[%d]", i), o, 200, nothingAsked); e != nil {
			return nil, e
		}
	}
	return options, nil
}

func askView(ak *store.Ask) *questionView {
	m := &questionView{QuestionID: ak.ID, ID: ak.ID, Question: ak.Question, Options: nonNil(ak.Options),
		Status: ak.Status, Session: ak.Session, CreatedAt: tsPtr(ak.CreatedAt),
		Recommendation: ak.Recommendation, Detail: ak.Detail}
	if ak.Status != "pending" {
		m.Answer, m.Choice = some(strPtr(ak.Answer)), some(strPtr(ak.Choice))
		m.Dismissed = some(ak.Status == "dismissed")
		m.EndedAt = some(tsPtr(ak.EndedAt))
		m.Via = ak.Via
	}
	return m
}

func (as *asks) listQuestions(ctx context.Context, c *caller, a *args) (*result, *Error) {
	only := ""
	if ref, e := a.str("session"); e != nil {
		return nil, e
	} else if ref != "" {
		s, e := as.relay.sessionByRef(ctx, ref)
		if e != nil {
			return nil, e
		}
		only = s.ID
	}
	asks, err := as.st.AsksBy(ctx, c.s.ID, as.now().Add(-askListWindow))
	if err != nil {
		return nil, internal("listQuestions: AsksBy", err)
	}
	if only != "" {
		// With session: every open ask about that session, whoever asked
		// (issue 13), besides this conversation's own about it.
		about, err := as.st.AsksIn(ctx, only)
		if err != nil {
			return nil, internal("listQuestions: AsksIn", err)
		}
		for _, ak := range about {
			if !slices.ContainsFunc(asks, func(x *store.Ask) bool { return x.ID == ak.ID }) {
				asks = append(asks, ak)
			}
		}
	}
	list := []*questionView{}
	open := 0
	for _, ak := range asks {
		if only != "" && ak.Session != only {
			continue
		}
		if ak.Status == "pending" {
			open++
		}
		v := askView(ak)
		if ak.Asker != c.s.ID {
			v.AskedBy = some(ak.Asker)
		}
		list = append(list, v)
	}
	return newResult("", fmt.Sprintf("%d open, %d closed in the last day", open, len(list)-open)).with(&listQuestionsResult{Questions: list}), nil
}

func (as *asks) withdraw(ctx context.Context, c *caller, a *args) (*result, *Error) {
	id, e := a.str("question_id")
	if e != nil {
		return nil, e
	}
	if id == "" {
		return nil, Errorf(CodeInvalidInput, "question_id is required: an ask_… id from ask or list_questions. Nothing was done.")
	}
	ak, err := as.st.GetAsk(ctx, id)
	if errors.Is(err, store.ErrNotFound) && len(id) >= 8 {
		// A unique prefix of 8 or more characters (R3.7), among this conversation's asks.
		mine, lerr := as.st.AsksBy(ctx, c.s.ID, as.now().Add(-askListWindow))
		if lerr != nil {
			return nil, internal("withdraw: AsksBy", lerr)
		}
		var hits []*store.Ask
		for _, x := range mine {
			if strings.HasPrefix(x.ID, id) {
				hits = append(hits, x)
			}
		}
		if len(hits) > 1 {
			return nil, Errorf(CodeInvalidInput, "question_id %q matches more than one ask; give more characters. Nothing was done.", id)
		}
		if len(hits) == 1 {
			ak, err = hits[0], nil
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No ask %q. Nothing was done.", id)
	}
	if err != nil {
		return nil, internal("withdraw: GetAsk", err)
	}
	if ak.Asker != c.s.ID {
		return nil, Errorf(CodeForbidden, "Only the conversation that asked %s can withdraw it. Nothing was done.", id)
	}
	if ak.Status != "pending" {
		return nil, Errorf(CodeNotFound, "Ask %s is no longer open (%s). Nothing was done.", id, ak.Status)
	}
	ak.Status, ak.EndedAt = "withdrawn", as.now()
	ok, err := as.st.CloseAsk(ctx, ak)
	if err != nil {
		return nil, internal("withdraw: CloseAsk", err)
	}
	if !ok {
		return nil, Errorf(CodeNotFound, "Ask %s was answered meanwhile. Nothing was done.", id)
	}
	return newResult("", ak.ID+" withdrawn").with(&askResult{QuestionID: ak.ID, Status: "withdrawn"}), nil
}

// Inbox lists the owner's open asks. (An ask closed between the list and
// the read of its record shows as it is, without its answer's fields.)
func (as *asks) Inbox(ctx context.Context) ([]*relay.InboxAsk, error) {
	asks, err := as.st.OpenAsks(ctx)
	if err != nil {
		return nil, err
	}
	out := []*relay.InboxAsk{}
	for _, ak := range asks {
		v := &relay.InboxAsk{QuestionID: ak.ID, ID: ak.ID, Question: ak.Question, Options: nonNil(ak.Options), Status: ak.Status,
			Session: ak.Session, CreatedAt: tsPtr(ak.CreatedAt), Recommendation: ak.Recommendation, Detail: ak.Detail, Asker: ak.Asker}
		if s, err := as.st.GetSession(ctx, ak.Session); err == nil {
			title := s.Title
			v.SessionTitle = &title
		}
		out = append(out, v)
	}
	return out, nil
}

// peerInboxAsks reads the asks a paired relay's inbox answered (its JSON:
// the keys InboxAsk knows; any other a relay of another version sends is
// not kept).
func peerInboxAsks(list []map[string]json.RawMessage) []*relay.InboxAsk {
	out := make([]*relay.InboxAsk, 0, len(list))
	for _, m := range list {
		if m == nil {
			continue // a null in its list: nothing to show
		}
		a := &relay.InboxAsk{}
		decodeLoose(mustJSON(m), a) // a value of another type is left out
		out = append(out, a)
	}
	return out
}

// RemoteAskCount counts the asks this relay's agents made on paired
// relays, as this relay last polled them (R10.5; the console's Inbox count).
func (as *asks) RemoteAskCount(ctx context.Context) (int, error) {
	asks, err := as.st.RemoteAsks(ctx)
	return len(asks), err
}

// InboxAnswer is the owner's answer (`answer`, `choice`) or dismissal of an ask (R10.2).
type InboxAnswer struct {
	Answer  string `json:"answer"`
	Choice  string `json:"choice"`
	Dismiss bool   `json:"dismiss"`
	// Via is the relay whose inbox the owner answered in (set by the peer
	// route when a paired relay's inbox forwards the answer; default this one).
	Via string `json:"-"`
}

// AnswerAsk answers or dismisses an ask; the asking conversation (and the
// session it concerns) gets question_answered at once.
func (as *asks) AnswerAsk(ctx context.Context, id string, in InboxAnswer) (*relay.AskAnswered, error) {
	ak, err := as.st.GetAsk(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No ask %q. Nothing was done.", id)
	}
	if err != nil {
		return nil, err
	}
	if ak.Status != "pending" {
		return nil, Errorf(CodeInvalidInput, "Ask %s is no longer open (%s). Nothing was changed.", id, ak.Status)
	}
	if !in.Dismiss && strings.TrimSpace(in.Answer) == "" && in.Choice == "" {
		return nil, Errorf(CodeInvalidInput, "answer or choice is required, or dismiss: true. Nothing was changed.")
	}
	if in.Choice != "" && len(ak.Options) > 0 && !contains(ak.Options, in.Choice) {
		return nil, Errorf(CodeInvalidInput, "choice %q is not one of the options: %s. Nothing was changed.", in.Choice, strings.Join(ak.Options, ", "))
	}
	ak.EndedAt, ak.Via = as.now(), as.opts.Name
	if in.Via != "" {
		ak.Via = in.Via
	}
	if in.Dismiss {
		ak.Status = "dismissed"
	} else {
		ak.Status, ak.Answer, ak.Choice = "answered", strings.TrimSpace(in.Answer), in.Choice
		if ak.Answer == "" {
			ak.Answer = in.Choice
		}
	}
	ok, err := as.st.CloseAsk(ctx, ak)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Errorf(CodeInvalidInput, "Ask %s was closed meanwhile. Nothing was changed.", id)
	}
	as.relay.notify(ctx, "inbox") // the owner's console (R19.6)
	for _, who := range unique(ak.Asker, ak.Session) {
		as.pipeline.emit(ctx, &store.Event{Kind: EvQuestionAnswered, Watcher: who, QuestionID: ak.ID, Text: ak.Question,
			Answer: ak.Answer, Choice: ak.Choice, Dismissed: in.Dismiss, Via: ak.Via})
	}
	return answeredView(ak), nil
}

// answeredView is askView of an ask no longer pending, typed.
func answeredView(ak *store.Ask) *relay.AskAnswered {
	return &relay.AskAnswered{QuestionID: ak.ID, ID: ak.ID, Question: ak.Question, Options: nonNil(ak.Options),
		Status: ak.Status, Session: ak.Session, CreatedAt: tsPtr(ak.CreatedAt), Recommendation: ak.Recommendation, Detail: ak.Detail,
		Answer: strPtr(ak.Answer), Choice: strPtr(ak.Choice), Dismissed: ak.Status == "dismissed", EndedAt: tsPtr(ak.EndedAt), Via: ak.Via}
}

func unique(ids ...string) []string {
	var out []string
	for _, id := range ids {
		if !contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// endAsksFor ends the open asks concerning or made by an archived session (nobody is told, R10.8).
func (as *asks) endAsksFor(ctx context.Context, sid string) error {
	in, err := as.st.AsksIn(ctx, sid)
	if err != nil {
		return err
	}
	by, err := as.st.AsksBy(ctx, sid, as.now().Add(-askListWindow))
	if err != nil {
		return err
	}
	for _, ak := range append(in, by...) {
		if ak.Status != "pending" {
			continue
		}
		ak.Status, ak.EndedAt = "withdrawn", as.now()
		if _, err := as.st.CloseAsk(ctx, ak); err != nil {
			return err
		}
	}
	return nil
}

// askCardLine is the card's line of an ask on behalf of another session (R10; R18.16: one line).
func askCardLine(concern *store.Session, question string) string {
	return fmt.Sprintf(`Ask on behalf of "%s" (%s): %s`, LineValue(concern.Title, fieldTitle), lineID(concern.ID), LineValue(question, fieldExcerpt))
}
