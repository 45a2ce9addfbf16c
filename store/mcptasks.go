package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// MCP Tasks (R24.1): a relay_tool call that waits, made a task for a client
// that declared the extension. The task is a hash {relay}:mcptask:<id>, so
// every serve process answers tasks/get and a restart keeps it; it expires
// MCPTaskKept after it ended (while working, MCPTaskWorkingTTL after its
// last change). A task records the process that runs its call (Proc): a
// process killed mid-call leaves its task working, and tasks/get on another
// process completes it once that process is no longer seen (ProcSeen).

// MCPTask statuses.
const (
	MCPTaskWorking   = "working"
	MCPTaskCompleted = "completed"
	MCPTaskCancelled = "cancelled"
)

// How long a task is kept.
const (
	// MCPTaskKept is how long a task is kept once it ended.
	MCPTaskKept = time.Hour
	// MCPTaskWorkingTTL bounds a working task whose process went away: each
	// change renews it; no wait of a call (a card, then a reply, each at most
	// the longest wait per call, 3600 s) outlasts it.
	MCPTaskWorkingTTL = 3 * time.Hour
)

// MCPTask is one task's record.
type MCPTask struct {
	ID      string
	Owner   string // the session whose token made it
	Status  string
	Card    bool   // it waits on the owner's approval card
	CardID  string // that card ("" before one)
	Proc    string // the process running its call (Relay.WorkerID)
	Turn    string // the turn whose reply it waits for ("" before one is queued)
	Created time.Time
	Updated time.Time
	Expires time.Time // when the record goes (0: not known)
	Result  []byte    // the CallToolResult's envelope (completed)
	IsError bool      // the result is a failure
}

func (s *Store) mcpTaskKey(id string) string { return s.k("mcptask", id) }

// CreateMCPTask writes a new working task (one MULTI: the hash and its TTL).
func (s *Store) CreateMCPTask(ctx context.Context, t *MCPTask) error {
	key := s.mcpTaskKey(t.ID)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "owner", t.Owner, "status", MCPTaskWorking, "card", boolField(t.Card), "cardid", t.CardID, "turn", t.Turn, "proc", t.Proc,
			"created", msField(t.Created), "updated", msField(t.Updated), "expires", msField(t.Updated.Add(MCPTaskWorkingTTL)))
		p.PExpire(ctx, key, MCPTaskWorkingTTL)
		return nil
	})
	return wrap(err, "create mcp task %s", t.ID)
}

// GetMCPTask reads a task; ErrNotFound when there is none (never made, or
// expired).
func (s *Store) GetMCPTask(ctx context.Context, id string) (*MCPTask, error) {
	m, err := s.rdb.HGetAll(ctx, s.mcpTaskKey(id)).Result()
	if err != nil {
		return nil, wrap(err, "read mcp task %s", id)
	}
	if len(m) == 0 || m["status"] == "" {
		return nil, ErrNotFound
	}
	return &MCPTask{ID: id, Owner: m["owner"], Status: m["status"], Card: m["card"] == "1", CardID: m["cardid"], Turn: m["turn"], Proc: m["proc"],
		Created: msTime(m["created"]), Updated: msTime(m["updated"]), Expires: msTime(m["expires"]),
		Result: []byte(m["result"]), IsError: m["iserr"] == "1"}, nil
}

// updateMCPTaskScript is UpdateMCPTask's step: a change applies only to a
// working task (a cancelled one stays cancelled, a completed one completed).
var updateMCPTaskScript = redis.NewScript(`
-- KEYS[1] = {relay}:mcptask:<id>  the task hash
-- ARGV[1] = the new status
-- ARGV[2] = the change's time (unix ms)
-- ARGV[3] = the key's TTL from now (ms)
-- ARGV[4..] = more field, value pairs to set
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return -1 end
if st ~= 'working' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated', ARGV[2], 'expires', tostring(tonumber(ARGV[2]) + tonumber(ARGV[3])))
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// MCPTaskChange is one change of a working task.
type MCPTaskChange struct {
	Status  string // MCPTaskWorking, MCPTaskCompleted or MCPTaskCancelled
	Card    *bool  // set: it waits (or no longer waits) on a card
	CardID  string // set: the card it waits on
	Turn    string // set: the turn it waits for
	Result  []byte // set (completed): the result envelope
	IsError bool
}

// UpdateMCPTask applies c to task id when it is working, at now. It reports
// whether it applied; ErrNotFound when there is no such task. A task that
// ends is kept MCPTaskKept from now.
func (s *Store) UpdateMCPTask(ctx context.Context, id string, c MCPTaskChange, now time.Time) (bool, error) {
	ttl := MCPTaskWorkingTTL
	if c.Status != MCPTaskWorking {
		ttl = MCPTaskKept
	}
	argv := []any{c.Status, msField(now), ttl.Milliseconds()}
	if c.Card != nil {
		argv = append(argv, "card", boolField(*c.Card))
	}
	if c.CardID != "" {
		argv = append(argv, "cardid", c.CardID)
	}
	if c.Turn != "" {
		argv = append(argv, "turn", c.Turn)
	}
	if c.Result != nil {
		argv = append(argv, "result", string(c.Result), "iserr", boolField(c.IsError))
	}
	n, err := updateMCPTaskScript.Run(ctx, s.scr, []string{s.mcpTaskKey(id)}, argv...).Int()
	if err != nil {
		return false, wrap(err, "update mcp task %s", id)
	}
	if n < 0 {
		return false, ErrNotFound
	}
	return n == 1, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func msField(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
