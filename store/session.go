package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay"
)

// Ref names a session on a relay (startedBy, from).
type Ref = relay.Ref

// Session is one agent conversation's record (R7.4 fields, R7.10 settings).
type Session struct {
	ID       string
	Title    string
	Provider string
	Model    string
	Effort   string
	Mode     string
	Cwd      string
	Repo     string
	Branch   string
	// Token is the session's bearer token, known only when the session is
	// made (shown once, R18.19); TokenHash, its SHA-256, is what is stored.
	Token             string
	TokenHash         string
	CreatedAt         time.Time
	LastActivityAt    time.Time
	Archived          bool
	ArchivedAt        time.Time
	GroupID           string
	StartedBy         *Ref
	MayCreateSessions bool
	AutoCompactWindow int
	ThinkingEnabled   string // "" | "on" | "off"
	ThinkingDisplay   string
	// AgentSession is the agent CLI's own conversation id (R17.2) and
	// AgentProvider the provider that made it. Only SetAgentSession and
	// ClearAgentSession write them (fields() leaves them out, so a settings
	// save never puts back an old id).
	AgentSession  string
	AgentProvider string
	// Preview is the start of the text of the session's last prompt or
	// reply (R23.1), as the turn scripts keep it (previewLua); read only.
	Preview string
}

// fields is the session's stored form: the fields whose value is not the
// zero value (sessionFrom reads a missing field as its zero value: "", 0,
// false, no time, no StartedBy); cleared names the others, which a save
// deletes; "last" is left out while it equals "created". An idle session's
// hash so keeps only what it says (issue 36: the eleven empty or zero
// settings and the second timestamp cost 128–192 B a session of listpack).
func (s *Session) fields() (set map[string]any, cleared []string) {
	sb := ""
	if s.StartedBy != nil {
		b, _ := json.Marshal(s.StartedBy)
		sb = string(b)
	}
	acw := ""
	if s.AutoCompactWindow != 0 {
		acw = strconv.Itoa(s.AutoCompactWindow)
	}
	msz := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(ms(t), 10)
	}
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return ""
	}
	last := msz(s.LastActivityAt)
	if last == msz(s.CreatedAt) {
		last = "" // never active since it was made: read back as created
	}
	all := [...][2]string{
		{"id", s.ID}, {"title", s.Title}, {"provider", s.Provider}, {"model", s.Model}, {"effort", s.Effort},
		{"mode", s.Mode}, {"cwd", s.Cwd}, {"repo", s.Repo}, {"branch", s.Branch}, {"tokh", s.tokh()},
		{"created", msz(s.CreatedAt)}, {"last", last}, {"archived", flag(s.Archived)},
		{"archivedAt", msz(s.ArchivedAt)}, {"group", s.GroupID}, {"startedBy", sb},
		{"mayCreate", flag(s.MayCreateSessions)}, {"acw", acw}, {"think", s.ThinkingEnabled},
		{"thinkDisp", s.ThinkingDisplay},
	}
	set = make(map[string]any, len(all))
	for _, f := range all {
		if f[1] == "" {
			cleared = append(cleared, f[0])
		} else {
			set[f[0]] = f[1]
		}
	}
	return set, cleared
}

// tokh is the stored form of the session's token.
func (s *Session) tokh() string {
	if s.Token != "" {
		return TokenHash(s.Token)
	}
	return s.TokenHash
}

func sessionFrom(m map[string]string) *Session {
	s := &Session{
		ID: m["id"], Title: m["title"], Provider: m["provider"], Model: m["model"], Effort: m["effort"],
		Mode: m["mode"], Cwd: m["cwd"], Repo: m["repo"], Branch: m["branch"], TokenHash: m["tokh"],
		CreatedAt: fromMS(atoi64(m["created"])), LastActivityAt: fromMS(atoi64(m["last"])),
		Archived: m["archived"] == "1", ArchivedAt: fromMS(atoi64(m["archivedAt"])), GroupID: m["group"],
		MayCreateSessions: m["mayCreate"] == "1", AutoCompactWindow: int(atoi64(m["acw"])),
		ThinkingEnabled: m["think"], ThinkingDisplay: m["thinkDisp"],
		AgentSession: m["agentSession"], AgentProvider: m["agentProvider"], Preview: m["pv"],
	}
	if _, ok := m["last"]; !ok {
		s.LastActivityAt = s.CreatedAt // not written while it equals created
	}
	if v := m["startedBy"]; v != "" {
		var r Ref
		if json.Unmarshal([]byte(v), &r) == nil {
			s.StartedBy = &r
		}
	}
	return s
}

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func atoi64(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func (s *Store) sessKey(id string) string { return s.k("sess", id) }

// CreateSession writes a new session and its indexes.
func (s *Store) CreateSession(ctx context.Context, sess *Session) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set, _ := sess.fields() // a new hash: nothing to clear
		p.HSet(ctx, s.sessKey(sess.ID), set)
		p.Set(ctx, s.tokKey(sess.tokh()), sess.ID, 0)
		p.ZAdd(ctx, s.k("sids"), redis.Z{Member: sess.ID})
		p.ZAdd(ctx, s.k("sessions", "active"), redis.Z{Score: float64(ms(sess.LastActivityAt)), Member: sess.ID})
		return nil
	})
	if err != nil {
		return fmt.Errorf("create session %s: %w", sess.ID, err)
	}
	return nil
}

// GetSession reads one session; ErrNotFound when it does not exist.
func (s *Store) GetSession(ctx context.Context, id string) (*Session, error) {
	m, err := s.rdb.HGetAll(ctx, s.sessKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	return sessionFrom(m), nil
}

// GetSessions reads several sessions in one round trip; missing ones are nil.
func (s *Store) GetSessions(ctx context.Context, ids []string) ([]*Session, error) {
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.sessKey(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get sessions: %w", err)
	}
	out := make([]*Session, len(ids))
	for i, c := range cmds {
		if m := c.Val(); len(m) > 0 {
			out[i] = sessionFrom(m)
		}
	}
	return out, nil
}

// SaveSession writes every field of sess (settings changes): the set ones,
// and those back at their zero value deleted, in one MULTI.
func (s *Store) SaveSession(ctx context.Context, sess *Session) error {
	set, cleared := sess.fields()
	key := s.sessKey(sess.ID)
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, set)
		if len(cleared) > 0 {
			p.HDel(ctx, key, cleared...)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("save session %s: %w", sess.ID, err)
	}
	return nil
}

// SetSessionFields writes some fields of a session (field names as stored: mode, model, effort, provider).
func (s *Store) SetSessionFields(ctx context.Context, id string, kv map[string]string) error {
	if err := s.rdb.HSet(ctx, s.sessKey(id), kv).Err(); err != nil {
		return fmt.Errorf("set session %s: %w", id, err)
	}
	return nil
}

// SessionByToken returns the session id a token (the session's own or its
// running turn's) names, "" when none; it is looked up by its hash (R18.19).
func (s *Store) SessionByToken(ctx context.Context, token string) (string, error) {
	id, err := s.rdb.Get(ctx, s.tokKey(TokenHash(token))).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, wrap(err, "session of a token")
}

// ResolveSessionID finds the session whose id is idOrPrefix or starts with it.
// ok=false with matches>1 means the prefix is ambiguous.
func (s *Store) ResolveSessionID(ctx context.Context, idOrPrefix string) (id string, matches int, err error) {
	return s.resolve(ctx, s.k("sids"), idOrPrefix)
}

func (s *Store) resolve(ctx context.Context, key, prefix string) (string, int, error) {
	res, err := s.rdb.ZRangeByLex(ctx, key, prefixRange(prefix)).Result()
	if err != nil {
		return "", 0, fmt.Errorf("resolve %s: %w", prefix, err)
	}
	id, n := pickMatch(res, prefix)
	return id, n, nil
}

// prefixRange is the ZRANGEBYLEX range of the ids starting with prefix (two
// are enough to tell one from several).
func prefixRange(prefix string) *redis.ZRangeBy {
	return &redis.ZRangeBy{Min: "[" + prefix, Max: "[" + prefix + "\xff", Count: 2}
}

// pickMatch is the id prefix names among res, the ids starting with it: the
// only one, or the one equal to it; else "" and how many matched.
func pickMatch(res []string, prefix string) (string, int) {
	if len(res) == 1 {
		return res[0], 1
	}
	for _, r := range res {
		if r == prefix {
			return r, 1
		}
	}
	return "", len(res)
}

// ListSessionIDs lists session ids by scope (active|archived|all), most recent
// activity first, at most limit, with the total count.
func (s *Store) ListSessionIDs(ctx context.Context, scope string, limit int) ([]string, int, error) {
	var keys []string
	switch scope {
	case "active":
		keys = []string{s.k("sessions", "active")}
	case "archived":
		keys = []string{s.k("sessions", "archived")}
	default:
		keys = []string{s.k("sessions", "active"), s.k("sessions", "archived")}
	}
	type item struct {
		id    string
		score float64
	}
	var all []item
	total := 0
	for _, key := range keys {
		n, err := s.rdb.ZCard(ctx, key).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("list sessions of %s: %w", key, err)
		}
		total += int(n)
		zs, err := s.rdb.ZRevRangeWithScores(ctx, key, 0, int64(limit-1)).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("list sessions of %s: %w", key, err)
		}
		for _, z := range zs {
			all = append(all, item{z.Member.(string), z.Score})
		}
	}
	// merge (at most two sorted lists of <= limit each)
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].score > all[j-1].score; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	if len(all) > limit {
		all = all[:limit]
	}
	ids := make([]string, len(all))
	for i, it := range all {
		ids[i] = it.id
	}
	return ids, total, nil
}

// ArchiveSession marks the session archived and moves it between the indexes.
func (s *Store) ArchiveSession(ctx context.Context, id string, now time.Time) error {
	toks, err := s.rdb.HMGet(ctx, s.sessKey(id), "tokh", "turntok").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("archive session %s: %w", id, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.revokeTokens(ctx, p, id, toks) // R18.2
		p.HSet(ctx, s.sessKey(id), "archived", "1", "archivedAt", ms(now))
		p.ZRem(ctx, s.k("sessions", "active"), id)
		p.ZAdd(ctx, s.k("sessions", "archived"), redis.Z{Score: float64(ms(now)), Member: id})
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive session %s: %w", id, err)
	}
	return nil
}

// revokeTokens deletes the look-up keys of a session's token and its running
// turn's (hashes as read from its record: tokh, turntok).
func (s *Store) revokeTokens(ctx context.Context, p redis.Pipeliner, sid string, toks []any) {
	for _, v := range toks {
		if h, _ := v.(string); h != "" {
			p.Del(ctx, s.tokKey(h))
		}
	}
	p.HDel(ctx, s.sessKey(sid), "turntok")
}

// SessionQuiet says whether a session has no running turn, no queued prompt
// and no drain due (what deleting it waits for).
func (s *Store) SessionQuiet(ctx context.Context, sid string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.k("cur", sid), s.k("q", sid), s.k("drain", sid)).Result()
	return n == 0, wrap(err, "quiet of session %s", sid)
}

// sessionParts is what a session's deletion removes beside its own keys.
type sessionParts struct {
	toks      []any    // its token hashes (tokh, turntok)
	turns     []string // the turns of its messages and of its queue
	tasks     []string // its tasks' ids
	questions []string // its questions' ids
}

// sessionParts reads the keys of session sid's parts.
func (s *Store) sessionParts(ctx context.Context, sid string) (*sessionParts, error) {
	var sp sessionParts
	var err error
	if sp.toks, err = s.rdb.HMGet(ctx, s.sessKey(sid), "tokh", "turntok").Result(); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	msgs, err := s.rdb.LRange(ctx, s.msgsKey(sid), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	queued, err := s.rdb.LRange(ctx, s.k("q", sid), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	if sp.tasks, err = s.rdb.HKeys(ctx, s.k("tasks", sid)).Result(); err != nil {
		return nil, err
	}
	if sp.questions, err = s.rdb.ZRange(ctx, s.k("sq", sid), 0, -1).Result(); err != nil {
		return nil, err
	}
	sp.turns = append([]string{}, queued...)
	for _, raw := range msgs {
		var m Message
		if json.Unmarshal([]byte(raw), &m) == nil && m.ID != "" {
			sp.turns = append(sp.turns, m.ID)
		}
	}
	return &sp, nil
}

// DeleteSession removes a session and what is its alone (owner's DELETE
// /sessions/{id}): the record, token, messages and their turns, queue, tasks
// and their output, question cards, flags, loop count, its watcher state and
// the indexes naming it. busyKeys are its orchestrator's semaphores (BusyKey,
// PeerBusyKey; "" = none). Schedules, asks and subscriptions are ended by the
// domain before.
func (s *Store) DeleteSession(ctx context.Context, sid string, busyKeys ...string) error {
	parts, err := s.sessionParts(ctx, sid)
	if err != nil {
		return fmt.Errorf("delete session %s: %w", sid, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.revokeTokens(ctx, p, sid, parts.toks) // R18.2
		for _, id := range parts.turns {
			p.Del(ctx, s.turnKey(id))
			p.ZRem(ctx, s.k("tids"), id)
		}
		for _, id := range parts.tasks {
			p.Del(ctx, s.k("tout", id))
		}
		for _, id := range parts.questions {
			p.Del(ctx, s.k("question", id))
			p.ZRem(ctx, s.k("qids"), id)
		}
		for _, name := range []string{"sess", "msgs", "q", "qev", "cur", "drain", "tasks", "sq", "flags", "loop", "busy",
			"subs", "subsended", "subidx", "schinto", "schby", "schended", "asksby", "asksopen", "asksin",
			"buf", "win", "wakes", "wl", "wlnext", "dlv", "unlock", "rsubsended"} {
			p.Del(ctx, s.k(name, sid))
		}
		p.SRem(ctx, s.drainsKey(), sid)
		p.ZRem(ctx, s.k("sids"), sid)
		p.ZRem(ctx, s.k("sessions", "active"), sid)
		p.ZRem(ctx, s.k("sessions", "archived"), sid)
		for _, k := range busyKeys {
			if k != "" {
				p.SRem(ctx, k, sid)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete session %s: %w", sid, err)
	}
	return nil
}

// Extras is what a session listing needs beside the record.
type Extras struct {
	Cur    string // running turn id
	Queued int    // prompts waiting
	Count  int    // messages
	Named  int    // subscriptions naming the session
	Tasks  []*Task
}

// SessionExtras reads the running turn, message count and tasks of several
// sessions in one round trip.
func (s *Store) SessionExtras(ctx context.Context, ids []string) ([]Extras, error) {
	curs := make([]*redis.StringCmd, len(ids))
	counts := make([]*redis.IntCmd, len(ids))
	queued := make([]*redis.IntCmd, len(ids))
	named := make([]*redis.IntCmd, len(ids))
	tasks := make([]*redis.MapStringStringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			curs[i] = p.Get(ctx, s.k("cur", id))
			counts[i] = p.LLen(ctx, s.msgsKey(id))
			queued[i] = p.LLen(ctx, s.k("q", id))
			named[i] = p.SCard(ctx, s.k("subidx", id))
			tasks[i] = p.HGetAll(ctx, s.k("tasks", id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("session extras: %w", err)
	}
	out := make([]Extras, len(ids))
	for i := range ids {
		out[i].Cur = curs[i].Val()
		out[i].Count = int(counts[i].Val())
		out[i].Queued = int(queued[i].Val())
		out[i].Named = int(named[i].Val())
		out[i].Tasks = decodeTasks(tasks[i].Val())
	}
	return out, nil
}
