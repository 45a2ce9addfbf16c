package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay"
)

// Task is a background shell command, monitor or sub-agent of a session (R7.5, R7.6).
type Task struct {
	ID           string    `json:"id"`
	Session      string    `json:"session"`
	Description  string    `json:"description"`
	Type         string    `json:"type"`   // shell | monitor | subagent
	Status       string    `json:"status"` // running | done | failed | killed
	ExitCode     *int      `json:"exitCode,omitempty"`
	StartedAt    time.Time `json:"startedAt"`
	EndedAt      time.Time `json:"endedAt,omitzero"`
	LastOutputAt time.Time `json:"lastOutputAt,omitzero"`
	Lines        int       `json:"lines"` // lines written so far
	// Held: the output stays in the agent's process until asked for (R7.6).
	Held bool `json:"held,omitempty"`
}

// MaxTaskLines is how many output lines a task keeps (the rest is "truncated").
const MaxTaskLines = 5000

// SaveTask writes a task's record.
func (s *Store) SaveTask(ctx context.Context, t *Task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("save task %s: %w", t.ID, err)
	}
	return wrap(s.rdb.HSet(ctx, s.k("tasks", t.Session), t.ID, b).Err(), "save task %s", t.ID)
}

// Tasks lists a session's tasks (oldest first).
func (s *Store) Tasks(ctx context.Context, sid string) ([]*Task, error) {
	m, err := s.rdb.HGetAll(ctx, s.k("tasks", sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("read tasks %s: %w", sid, err)
	}
	return decodeTasks(m), nil
}

func decodeTasks(m map[string]string) []*Task {
	out := make([]*Task, 0, len(m))
	for _, v := range m {
		var t Task
		if json.Unmarshal([]byte(v), &t) == nil {
			out = append(out, &t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out
}

// AppendTaskOutput adds lines to a task's output, keeping the last MaxTaskLines.
func (s *Store) AppendTaskOutput(ctx context.Context, id string, lines ...string) error {
	if len(lines) == 0 {
		return nil
	}
	vals := make([]any, len(lines))
	for i, l := range lines {
		vals[i] = l
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.k("tout", id), vals...)
		p.LTrim(ctx, s.k("tout", id), -MaxTaskLines, -1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("append output of task %s: %w", id, err)
	}
	return nil
}

// TaskOutput returns a task's kept output lines.
func (s *Store) TaskOutput(ctx context.Context, id string) ([]string, error) {
	lines, err := s.rdb.LRange(ctx, s.k("tout", id), 0, -1).Result()
	return lines, wrap(err, "output of task %s", id)
}

// ExpireTaskOutput lets a finished task's output go after keep (PEXPIRE:
// to the millisecond; EXPIRE takes whole seconds).
func (s *Store) ExpireTaskOutput(ctx context.Context, id string, keep time.Duration) error {
	return wrap(s.rdb.PExpire(ctx, s.k("tout", id), keep).Err(), "expire the output of task %s", id)
}

// Question is a question card (kind ask_user) a session's agent waits on.
type Question = relay.Question

// SaveQuestion writes a question and indexes pending ones by session.
func (s *Store) SaveQuestion(ctx context.Context, q *Question) error {
	b, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("save question %s: %w", q.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k("question", q.ID), b, 0)
		p.ZAdd(ctx, s.k("qids"), redis.Z{Member: q.ID})
		if q.Status == "pending" {
			p.ZAdd(ctx, s.k("sq", q.Session), redis.Z{Score: float64(ms(q.CreatedAt)), Member: q.ID})
		} else {
			p.ZRem(ctx, s.k("sq", q.Session), q.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save question %s: %w", q.ID, err)
	}
	return nil
}

// GetQuestion reads a question card.
func (s *Store) GetQuestion(ctx context.Context, id string) (*Question, error) {
	return getJSON[Question](ctx, s.rdb, s.k("question", id))
}

// ResolveQuestionID finds a question id by full id or unique prefix.
func (s *Store) ResolveQuestionID(ctx context.Context, idOrPrefix string) (string, int, error) {
	return s.resolve(ctx, s.k("qids"), idOrPrefix)
}

// AnswerQuestion marks a pending question answered; false when it was not pending.
func (s *Store) AnswerQuestion(ctx context.Context, id, answer, by string) (*Question, bool, error) {
	var out *Question
	ok := false
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, s.k("question", id)).Result()
		if errors.Is(err, redis.Nil) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("answer question %s: %w", id, err)
		}
		var q Question
		if err := json.Unmarshal([]byte(v), &q); err != nil {
			return fmt.Errorf("decode question %s: %w", id, err)
		}
		out = &q
		if q.Status != "pending" {
			return nil
		}
		q.Status, q.Answer, q.AnsweredBy = "answered", answer, by
		b, _ := json.Marshal(q)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, s.k("question", id), b, 0)
			p.ZRem(ctx, s.k("sq", q.Session), id)
			return nil
		})
		ok = err == nil
		if err != nil {
			return fmt.Errorf("answer question %s: %w", id, err)
		}
		return nil
	}, s.k("question", id))
	return out, ok, err
}

// PendingQuestions lists a session's open question cards.
func (s *Store) PendingQuestions(ctx context.Context, sid string) ([]*Question, error) {
	ids, err := s.rdb.ZRange(ctx, s.k("sq", sid), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("pending questions of %s: %w", sid, err)
	}
	var out []*Question
	for _, id := range ids {
		if q, err := s.GetQuestion(ctx, id); err == nil {
			out = append(out, q)
		}
	}
	return out, nil
}

// Card is an approval card (R5.1).
type Card = relay.Card

// SaveCard writes a card; pending cards are indexed.
func (s *Store) SaveCard(ctx context.Context, c *Card) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("save card %s: %w", c.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k("card", c.ID), b, 24*time.Hour)
		if c.Decision == "" {
			p.ZAdd(ctx, s.k("cards"), redis.Z{Score: float64(ms(c.CreatedAt)), Member: c.ID})
		} else {
			p.ZRem(ctx, s.k("cards"), c.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save card %s: %w", c.ID, err)
	}
	return nil
}

// GetCard reads a card.
func (s *Store) GetCard(ctx context.Context, id string) (*Card, error) {
	return getJSON[Card](ctx, s.rdb, s.k("card", id))
}

// DecideCard sets a pending card's decision; false when it was already decided.
func (s *Store) DecideCard(ctx context.Context, id, decision string) (*Card, bool, error) {
	var out *Card
	ok := false
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, s.k("card", id)).Result()
		if errors.Is(err, redis.Nil) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("decide card %s: %w", id, err)
		}
		var c Card
		if err := json.Unmarshal([]byte(v), &c); err != nil {
			return fmt.Errorf("decode card %s: %w", id, err)
		}
		out = &c
		if c.Decision != "" {
			return nil
		}
		c.Decision = decision
		b, _ := json.Marshal(c)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, s.k("card", id), b, 24*time.Hour)
			p.ZRem(ctx, s.k("cards"), id)
			return nil
		})
		ok = err == nil
		if err != nil {
			return fmt.Errorf("decide card %s: %w", id, err)
		}
		return nil
	}, s.k("card", id))
	return out, ok, err
}

// PendingCards lists undecided cards, oldest first.
func (s *Store) PendingCards(ctx context.Context) ([]*Card, error) {
	ids, err := s.rdb.ZRange(ctx, s.k("cards"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("pending cards: %w", err)
	}
	var out []*Card
	for _, id := range ids {
		if c, err := s.GetCard(ctx, id); err == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// Group is a named set of sessions: one head and members (R7.9).
type Group struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"` // "" = named after its head's title
	Head         string    `json:"head"`
	OwnerCreated bool      `json:"ownerCreated"`
	CreatedAt    time.Time `json:"createdAt"`
}

// SaveGroup writes a group record.
func (s *Store) SaveGroup(ctx context.Context, g *Group) error {
	b, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("save group %s: %w", g.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k("group", g.ID), b, 0)
		p.SAdd(ctx, s.k("groups"), g.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("save group %s: %w", g.ID, err)
	}
	return nil
}

// GetGroup reads a group.
func (s *Store) GetGroup(ctx context.Context, id string) (*Group, error) {
	return getJSON[Group](ctx, s.rdb, s.k("group", id))
}

// Groups lists every group.
func (s *Store) Groups(ctx context.Context) ([]*Group, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("groups")).Result()
	if err != nil {
		return nil, fmt.Errorf("read groups: %w", err)
	}
	var out []*Group
	for _, id := range ids {
		if g, err := s.GetGroup(ctx, id); err == nil {
			out = append(out, g)
		}
	}
	return out, nil
}

// GroupMembers lists a group's session ids.
func (s *Store) GroupMembers(ctx context.Context, gid string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.k("gm", gid)).Result()
	return ids, wrap(err, "members of group %s", gid)
}

// SetGroupMember adds or removes a session from a group's member set.
func (s *Store) SetGroupMember(ctx context.Context, gid, sid string, member bool) error {
	if member {
		return wrap(s.rdb.SAdd(ctx, s.k("gm", gid), sid).Err(), "add session %s to group %s", sid, gid)
	}
	return wrap(s.rdb.SRem(ctx, s.k("gm", gid), sid).Err(), "remove session %s from group %s", sid, gid)
}

// DeleteGroup removes a group.
func (s *Store) DeleteGroup(ctx context.Context, gid string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.k("group", gid), s.k("gm", gid))
		p.SRem(ctx, s.k("groups"), gid)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete group %s: %w", gid, err)
	}
	return nil
}

// Settings are the owner's run-time settings (SPEC §12).
type Settings = relay.Settings

// LoadSettings reads the settings; ok=false when none are stored yet.
func (s *Store) LoadSettings(ctx context.Context) (Settings, bool, error) {
	var st Settings
	v, err := s.rdb.Get(ctx, s.k("settings")).Result()
	if errors.Is(err, redis.Nil) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("load settings: %w", err)
	}
	return st, true, json.Unmarshal([]byte(v), &st)
}

// SaveSettings writes the settings.
func (s *Store) SaveSettings(ctx context.Context, st Settings) error {
	b, _ := json.Marshal(st)
	return wrap(s.rdb.Set(ctx, s.k("settings"), b, 0).Err(), "save settings")
}

// InitSettings stores st unless settings exist; returns the stored ones.
func (s *Store) InitSettings(ctx context.Context, st Settings) (Settings, error) {
	b, _ := json.Marshal(st)
	if err := s.rdb.SetNX(ctx, s.k("settings"), b, 0).Err(); err != nil {
		return st, fmt.Errorf("init settings: %w", err)
	}
	cur, _, err := s.LoadSettings(ctx)
	return cur, err
}

// RecentCwds returns the folders sessions used most recently.
func (s *Store) RecentCwds(ctx context.Context, n int) ([]string, error) {
	dirs, err := s.rdb.ZRevRange(ctx, s.k("cwds"), 0, int64(n-1)).Result()
	return dirs, wrap(err, "recent folders")
}

// NoteCwd records a folder a session used.
func (s *Store) NoteCwd(ctx context.Context, dir string, now time.Time) error {
	return wrap(s.rdb.ZAdd(ctx, s.k("cwds"), redis.Z{Score: float64(ms(now)), Member: dir}).Err(), "note folder %s", dir)
}

// GroupOrder is the owner's order of the groups (R23.7): group ids, first
// first ("grouporder", a list; ids of groups gone since may be in it).
func (s *Store) GroupOrder(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.LRange(ctx, s.k("grouporder"), 0, -1).Result()
	return ids, wrap(err, "read the order of the groups")
}

// SetGroupOrder replaces the owner's order of the groups.
func (s *Store) SetGroupOrder(ctx context.Context, ids []string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.k("grouporder"))
		if len(ids) > 0 {
			vals := make([]any, len(ids))
			for i, id := range ids {
				vals[i] = id
			}
			p.RPush(ctx, s.k("grouporder"), vals...)
		}
		return nil
	})
	return wrap(err, "set the order of the groups")
}
