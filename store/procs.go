package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is one live process of a relay, as it announces itself in Redis.
type Proc struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"` // the relay name it serves
	Role    string    `json:"role"` // serve | worker
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Seen    time.Time `json:"seen"`
}

// procsKey is the hash of processes on this prefix (field: process id).
func (s *Store) procsKey() string { return s.k("procs") }

// AnnounceProc records (or refreshes) a process.
func (s *Store) AnnounceProc(ctx context.Context, p Proc) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("announce process %s: %w", p.ID, err)
	}
	return wrap(s.rdb.HSet(ctx, s.procsKey(), p.ID, b).Err(), "announce process %s", p.ID)
}

// RemoveProc forgets a process (clean shutdown).
func (s *Store) RemoveProc(ctx context.Context, id string) error {
	return wrap(s.rdb.HDel(ctx, s.procsKey(), id).Err(), "remove process %s", id)
}

// LiveProcs lists the processes seen since `since`; older entries are removed.
func (s *Store) LiveProcs(ctx context.Context, since time.Time) ([]Proc, error) {
	m, err := s.rdb.HGetAll(ctx, s.procsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("read processes: %w", err)
	}
	var out []Proc
	for id, v := range m {
		var p Proc
		if json.Unmarshal([]byte(v), &p) != nil || p.Seen.Before(since) {
			s.rdb.HDel(ctx, s.procsKey(), id)
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// ProcSeen is when process id last announced itself (zero when it is not
// in the hash: removed, or never announced): one field, not the whole hash.
func (s *Store) ProcSeen(ctx context.Context, id string) (time.Time, error) {
	v, err := s.rdb.HGet(ctx, s.procsKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read process %s: %w", id, err)
	}
	var p Proc
	_ = json.Unmarshal([]byte(v), &p) // unreadable: Seen zero, as gone (LiveProcs removes it)
	return p.Seen, nil
}

// killAckKey is the hash of one kill request's answers (R23.6): field the
// answering process's id, value "1" when it ended a process, else "0".
func (s *Store) killAckKey(req string) string { return s.k("killack", req) }

// killAckTTL bounds how long a kill request's answers are kept.
const killAckTTL = time.Minute

// AckKill records this process's answer to a kill request and tells the
// asking process ("killack:REQ").
func (s *Store) AckKill(ctx context.Context, req, proc string, killed bool) error {
	v := "0"
	if killed {
		v = "1"
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.killAckKey(req), proc, v)
		p.Expire(ctx, s.killAckKey(req), killAckTTL)
		p.Publish(ctx, s.NotifyChannel(), "killack:"+req)
		return nil
	})
	return wrap(err, "answer kill request %s", req)
}

// KillAcks reads the answers to a kill request: process id → killed.
func (s *Store) KillAcks(ctx context.Context, req string) (map[string]bool, error) {
	m, err := s.rdb.HGetAll(ctx, s.killAckKey(req)).Result()
	if err != nil {
		return nil, fmt.Errorf("read the answers to kill request %s: %w", req, err)
	}
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v == "1"
	}
	return out, nil
}
