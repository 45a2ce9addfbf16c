// Package embedded is the relay's default store when no Redis is
// configured (SPEC §20): a miniredis server on a loopback port of its own,
// guarded by a random password, whose dataset is kept in a data directory.
//
// Persistence works by keys, not by commands: a pre-hook on the server sees
// every command (also those a Lua script or a MULTI runs) and marks the keys
// that command may change. Once a second the checkpointer reads the marked
// keys in one MULTI (one consistent point in time), and writes those that
// changed as a new segment file (temporary file, fsync, rename). Segments are
// merged into the base file in the background, off the server's lock. A
// start loads the base and then the segments in order. `relay export` turns
// the same records into RESP commands for `redis-cli --pipe`.
package embedded

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Key types, as TYPE answers them. A record of type TypeNone is a deletion.
const (
	TypeNone   = "none"
	TypeString = "string"
	TypeHash   = "hash"
	TypeList   = "list"
	TypeSet    = "set"
	TypeZSet   = "zset"
	TypeStream = "stream"
)

// Record is the whole state of one key at one point in time.
type Record struct {
	Key  string
	Type string
	// ExpireAt is the key's expiry in Unix milliseconds; 0 = none.
	ExpireAt int64
	// Str is a string key's value.
	Str string
	// Items: a hash's field, value pairs; a list's elements in order; a set's
	// members; a sorted set's members (with Scores).
	Items  []string
	Scores []float64
	// Entries are a stream's entries in order.
	Entries []StreamEntry
}

// StreamEntry is one entry of a stream.
type StreamEntry struct {
	ID     string
	Fields []string // field, value pairs
}

// Expired says whether the record's key has expired at now.
func (r *Record) Expired(now time.Time) bool {
	return r.ExpireAt > 0 && r.ExpireAt <= now.UnixMilli()
}

// Commands returns the commands that create the key as the record has it,
// in an empty database (nil for a deletion or an expired key). Each command
// is its arguments, the name first. Big values are split over several
// commands of at most chunk elements, so no single command grows unbounded.
func (r *Record) Commands(now time.Time) [][]string {
	if r.Type == TypeNone || r.Expired(now) {
		return nil
	}
	const chunk = 512
	var out [][]string
	add := func(name string, per int, items []string) {
		for len(items) > 0 {
			n := min(len(items), chunk*per)
			cmd := make([]string, 0, 2+n)
			cmd = append(cmd, name, r.Key)
			out = append(out, append(cmd, items[:n]...))
			items = items[n:]
		}
	}
	switch r.Type {
	case TypeString:
		out = append(out, []string{"SET", r.Key, r.Str})
	case TypeHash:
		add("HSET", 2, r.Items)
	case TypeList:
		add("RPUSH", 1, r.Items)
	case TypeSet:
		add("SADD", 1, r.Items)
	case TypeZSet:
		pairs := make([]string, 0, 2*len(r.Items))
		for i, m := range r.Items {
			pairs = append(pairs, strconv.FormatFloat(r.Scores[i], 'g', -1, 64), m)
		}
		add("ZADD", 2, pairs)
	case TypeStream:
		for _, e := range r.Entries {
			cmd := make([]string, 0, 3+len(e.Fields))
			cmd = append(cmd, "XADD", r.Key, e.ID)
			out = append(out, append(cmd, e.Fields...))
		}
	}
	if r.ExpireAt > 0 && len(out) > 0 {
		out = append(out, []string{"PEXPIREAT", r.Key, strconv.FormatInt(r.ExpireAt, 10)})
	}
	return out
}

// WriteRESP writes one command as a RESP array of bulk strings (what
// `redis-cli --pipe` reads).
func WriteRESP(w io.Writer, args []string) error {
	buf := make([]byte, 0, 64)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	_, err := w.Write(buf)
	return err
}

// validate checks a decoded record's shape.
func (r *Record) validate() error {
	switch r.Type {
	case TypeNone, TypeString, TypeList, TypeSet, TypeStream:
	case TypeHash:
		if len(r.Items)%2 != 0 {
			return fmt.Errorf("key %q: hash with an odd number of items", r.Key)
		}
	case TypeZSet:
		if len(r.Items) != len(r.Scores) {
			return fmt.Errorf("key %q: sorted set with %d members and %d scores", r.Key, len(r.Items), len(r.Scores))
		}
	default:
		return fmt.Errorf("key %q: unknown type %q", r.Key, r.Type)
	}
	return nil
}
