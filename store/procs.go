package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
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
