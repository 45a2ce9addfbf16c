package domain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay/store"
)

// steering is the actions that steer another session: answer_question
// (R7.14, and the owner's answer to a question card),
// stop (R7.15, and the owner's Stop) and archive (R7.16, and the owner's
// archive and delete: the token revoked at once, R18.2; the session's
// subscriptions, schedules and asks ended), each with its card for ask/plan
// mode (R5.2.3). Its checks are also what a paired relay asks before its
// card (peercheck.go, R5.3). It sees the store only as recordStore and
// steerStore and reaches the rest of the relay only through steeringHost and
// the subsystems it points to.
type steering struct {
	st        steeringStore
	now       func() time.Time
	opts      *Options // the relay's: name
	cards     *cards
	subs      *subscriptions
	schedules *schedules
	asks      *asks
	relay     steeringHost
}

// steeringStore is the store as the steering actions see it.
type steeringStore interface {
	recordStore
	steerStore
}

// steeringHost is what the steering actions ask of the rest of the relay:
// the target session (sessions.go) and telling the console (notify.go).
type steeringHost interface {
	targets
	notify(ctx context.Context, what string)
}

func (sg *steering) answerQuestion(ctx context.Context, c *caller, a *args) (*result, *Error) {
	q, s, text, e := sg.checkAnswer(ctx, c, a)
	if e != nil {
		return nil, e
	}
	need := &cardNeed{}
	modeCard(need, c, a.action)
	tid := s.ID
	if e := sg.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action, target: &tid, lines: []string{fmt.Sprintf("Answer %q in %q (%s): %s", q.Question, s.Title, id8(s.ID), text)}, nothing: nothingSent}); e != nil {
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	if _, e := sg.answer(ctx, q.ID, text, c.s.ID); e != nil {
		return nil, e
	}
	res := newResult(s.ID, fmt.Sprintf("answered %s", q.ID))
	res.with(&answerResult{QuestionID: q.ID, Answer: text})
	return res, nil
}

// checkAnswer applies answer_question's checks (shapes, the question, its
// session, self, the choices) and returns the question, its session and the
// answer's text; nothing is written (also the check a paired relay asks
// before its card, R5.3).
func (sg *steering) checkAnswer(ctx context.Context, c *caller, a *args) (*store.Question, *store.Session, string, *Error) {
	qid, e := a.str("question_id")
	if e != nil {
		return nil, nil, "", e
	}
	choices, e := a.strs("choices")
	if e != nil {
		return nil, nil, "", e
	}
	answer, e := a.str("answer")
	if e != nil {
		return nil, nil, "", e
	}
	if qid == "" {
		return nil, nil, "", Errorf(CodeInvalidInput, "question_id is required: read_session lists a session's pendingQuestions. %s", nothingSent)
	}
	if len(choices) == 0 && strings.TrimSpace(answer) == "" {
		return nil, nil, "", Errorf(CodeInvalidInput, "choices or answer is required. %s", nothingSent)
	}
	if strings.HasPrefix(qid, "card_") {
		return nil, nil, "", Errorf(CodeForbidden, "Approval cards are the owner's to decide; an agent cannot answer them. %s", nothingSent)
	}
	// session is optional (the seed's example names only question_id): the
	// question says which session it belongs to; a session given must match.
	var s *store.Session
	if a.has("session") {
		if s, e = sg.relay.target(ctx, a, "session"); e != nil {
			return nil, nil, "", e
		}
	}
	q, e := sg.findQuestion(ctx, sessionID(s), qid)
	if e != nil {
		return nil, nil, "", e
	}
	if s == nil {
		var err error
		if s, err = sg.st.GetSession(ctx, q.Session); err != nil {
			return nil, nil, "", internal("checkAnswer: GetSession", err)
		}
	}
	if s.ID == c.s.ID {
		return nil, nil, "", Errorf(CodeSelf, "A conversation cannot answer its own question. %s", nothingSent)
	}
	text, e := answerText(q, choices, answer)
	if e != nil {
		return nil, nil, "", e
	}
	return q, s, text, nil
}

func sessionID(s *store.Session) string {
	if s == nil {
		return ""
	}
	return s.ID
}

// findQuestion finds a pending question card by id or prefix; sid "" accepts any session.
func (sg *steering) findQuestion(ctx context.Context, sid, ref string) (*store.Question, *Error) {
	id, n, err := sg.st.ResolveQuestionID(ctx, ref)
	if err != nil {
		return nil, internal("findQuestion: ResolveQuestionID", err)
	}
	if n > 1 {
		return nil, Errorf(CodeInvalidInput, "question_id %q matches more than one question; give more characters. %s", ref, nothingSent)
	}
	notFound := Errorf(CodeNotFound, "Relay %q has no open question %q. %s", sg.opts.Name, ref, nothingSent)
	if sid != "" {
		notFound = Errorf(CodeNotFound, "Session %s on relay %q has no open question %q. %s", id8(sid), sg.opts.Name, ref, nothingSent)
	}
	if id == "" || len(ref) < 8 {
		return nil, notFound
	}
	q, err := sg.st.GetQuestion(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ((sid != "" && q.Session != sid) || q.Status != "pending")) {
		return nil, notFound
	}
	if err != nil {
		return nil, internal("findQuestion: GetQuestion", err)
	}
	return q, nil
}

func answerText(q *store.Question, choices []string, answer string) (string, *Error) {
	if len(choices) > 0 && len(q.Options) > 0 {
		for _, ch := range choices {
			if !contains(q.Options, ch) {
				return "", Errorf(CodeInvalidInput, "%q is not one of the question's options: %s. %s", ch, strings.Join(q.Options, ", "), nothingSent)
			}
		}
	}
	parts := append([]string{}, choices...)
	if strings.TrimSpace(answer) != "" {
		parts = append(parts, strings.TrimSpace(answer))
	}
	return strings.Join(parts, ", "), nil
}

// answer records a question's answer and wakes the turn waiting on it.
func (sg *steering) answer(ctx context.Context, qid, text, by string) (*store.Question, *Error) {
	q, ok, err := sg.st.AnswerQuestion(ctx, qid, text, by)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No question %q. %s", qid, nothingSent)
	}
	if err != nil {
		return nil, internal("answer: AnswerQuestion", err)
	}
	if !ok {
		return nil, Errorf(CodeNotFound, "Question %s was already answered. %s", qid, nothingSent)
	}
	// The turn no longer waits on it: a wait right after this must not report "question".
	if q.Turn != "" {
		if err := sg.st.SetTurnQuestion(ctx, q.Turn, ""); err != nil {
			return nil, internal("answer: SetTurnQuestion", err)
		}
	}
	if err := sg.st.Notify(ctx, "q:"+qid); err != nil {
		return nil, internal("answer: Notify", err)
	}
	return q, nil
}

// answerOwner is the owner's answer to a question card (owner API).
func (sg *steering) answerOwner(ctx context.Context, sid, qid string, choices []string, answer string) (*store.Question, error) {
	q, e := sg.findQuestion(ctx, sid, qid)
	if e != nil {
		return nil, e
	}
	if len(choices) == 0 && strings.TrimSpace(answer) == "" {
		return nil, Errorf(CodeInvalidInput, "choices or answer is required. %s", nothingSent)
	}
	text, e := answerText(q, choices, answer)
	if e != nil {
		return nil, e
	}
	q, e = sg.answer(ctx, q.ID, text, "owner")
	if e != nil {
		return nil, e
	}
	return q, nil
}

func (sg *steering) stop(ctx context.Context, c *caller, a *args) (*result, *Error) {
	s, e := sg.relay.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "stop cannot stop the calling conversation itself. %s", nothingDone)
	}
	need := &cardNeed{}
	modeCard(need, c, a.action)
	tid := s.ID
	if e := sg.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action, target: &tid, lines: []string{fmt.Sprintf("Stop the running turn of %q (%s)", s.Title, id8(s.ID))}, nothing: nothingDone}); e != nil {
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	stopped, err := sg.stopTurn(ctx, s.ID)
	if err != nil {
		return nil, internal("stop: StopTurn", err)
	}
	sr := &stopResult{StopRequested: stopped}
	res := newResult(s.ID, "").with(sr)
	if stopped {
		res.what = "stop requested"
	} else {
		sr.Note = "nothing was running"
		res.what = "nothing was running"
	}
	return res, nil
}

// stopTurn stops a session's running turn; queued prompts stay queued (R7.15).
// A turn that is next in the queue but has not started yet (a worker is about
// to take it) counts as running: it ends as stopped without running.
func (sg *steering) stopTurn(ctx context.Context, sid string) (bool, error) {
	cur, err := sg.st.CurrentTurn(ctx, sid)
	if err != nil {
		return false, fmt.Errorf("stop the turn of session %s: %w", id8(sid), err)
	}
	if cur == "" {
		q, err := sg.st.QueuedTurns(ctx, sid)
		if err != nil || len(q) == 0 {
			return false, err
		}
		cur = q[0]
	}
	if err := sg.st.RequestTurnStop(ctx, cur); err != nil {
		return false, fmt.Errorf("stop turn %s of session %s: %w", id8(cur), id8(sid), err)
	}
	return true, sg.st.Notify(ctx, "stop:"+cur)
}

func (sg *steering) archive(ctx context.Context, c *caller, a *args) (*result, *Error) {
	s, e := sg.relay.target(ctx, a, "session")
	if e != nil {
		return nil, e
	}
	if s.ID == c.s.ID {
		return nil, Errorf(CodeSelf, "archive cannot archive the calling conversation itself. %s", nothingDone)
	}
	if s.Archived {
		return newResult(s.ID, "already archived").with(&archiveResult{Archived: true}), nil
	}
	need := &cardNeed{}
	modeCard(need, c, a.action)
	tid := s.ID
	if e := sg.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action, target: &tid, lines: []string{fmt.Sprintf("Archive %q (%s)", s.Title, id8(s.ID))}, nothing: nothingDone}); e != nil {
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	if err := sg.retire(ctx, s.ID, "archived"); err != nil {
		return nil, internal("archive: Archive", err)
	}
	return newResult(s.ID, "archived").with(&archiveResult{Archived: true}), nil
}

// retire archives a session and ends its subscriptions and schedules with
// reason ("archived", or "deleted" on the way to deleting it), and its asks.
func (sg *steering) retire(ctx context.Context, sid, reason string) error {
	// R18.2: the token dies with the archive, in every process at once.
	if err := sg.st.ArchiveSession(ctx, sid, sg.now()); err != nil {
		return fmt.Errorf("retire session %s (%s): %w", id8(sid), reason, err)
	}
	if err := sg.st.Notify(ctx, "tokens"); err != nil {
		return fmt.Errorf("retire session %s (%s): %w", id8(sid), reason, err)
	}
	sg.relay.notify(ctx, "session:"+sid) // the owner's console (R19.6)
	if err := sg.subs.endSubscriptionsFor(ctx, sid, reason); err != nil {
		return fmt.Errorf("retire session %s (%s): %w", id8(sid), reason, err)
	}
	if err := sg.schedules.endSchedulesFor(ctx, sid, reason); err != nil {
		return fmt.Errorf("retire session %s (%s): %w", id8(sid), reason, err)
	}
	if err := sg.asks.endAsksFor(ctx, sid); err != nil {
		return fmt.Errorf("retire session %s (%s): %w", id8(sid), reason, err)
	}
	_, err := sg.stopTurn(ctx, sid)
	return err
}
