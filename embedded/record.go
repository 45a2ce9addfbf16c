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
	"sort"
	"strconv"
	"strings"
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

// Patch types: a change to a key a record of its whole state came before
// (in the base file or an earlier segment). A checkpoint writes these for
// keys whose commands named fields or members, or appended, so what it
// writes follows the change rather than the key's size.
const (
	PatchHash   = "hash+"   // Items: fields set (pairs); Del: fields removed
	PatchSet    = "set+"    // Items: members added; Del: members removed
	PatchZSet   = "zset+"   // Items, Scores: members set; Del: members removed
	PatchList   = "list+"   // Items: elements appended at the tail
	PatchStream = "stream+" // Entries: appended; FirstID: the first entry kept ("" = none)
)

// IsPatch says whether t is a patch type.
func IsPatch(t string) bool { return strings.HasSuffix(t, "+") }

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
	// Del: a patch's removed fields or members.
	Del []string
	// FirstID: a stream patch's first entry left after trimming ("" = none).
	FirstID string
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
	if r.Type == TypeNone || r.Expired(now) || IsPatch(r.Type) {
		return nil
	}
	var out [][]string
	add := func(name string, per int, items []string) { out = appendChunked(out, name, r.Key, per, items) }
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
		pairs := scorePairs(r.Items, r.Scores)
		add("ZADD", 2, pairs)
	case TypeStream:
		out = appendXAdds(out, r.Key, r.Entries)
	}
	if r.ExpireAt > 0 && len(out) > 0 {
		out = append(out, []string{"PEXPIREAT", r.Key, strconv.FormatInt(r.ExpireAt, 10)})
	}
	return out
}

// appendChunked appends NAME KEY ITEMS… commands of at most 512 groups of
// per items each, so no single command grows unbounded.
func appendChunked(out [][]string, name, key string, per int, items []string) [][]string {
	const chunk = 512
	for len(items) > 0 {
		n := min(len(items), chunk*per)
		cmd := make([]string, 0, 2+n)
		cmd = append(cmd, name, key)
		out = append(out, append(cmd, items[:n]...))
		items = items[n:]
	}
	return out
}

// scorePairs is ZADD's score, member arguments.
func scorePairs(members []string, scores []float64) []string {
	pairs := make([]string, 0, 2*len(members))
	for i, m := range members {
		pairs = append(pairs, strconv.FormatFloat(scores[i], 'g', -1, 64), m)
	}
	return pairs
}

// appendXAdds appends one XADD KEY ID FIELDS… per entry.
func appendXAdds(out [][]string, key string, entries []StreamEntry) [][]string {
	for _, e := range entries {
		cmd := make([]string, 0, 3+len(e.Fields))
		cmd = append(cmd, "XADD", key, e.ID)
		out = append(out, append(cmd, e.Fields...))
	}
	return out
}

// patchCommands returns the commands that apply a patch record to its key
// as it is.
func (r *Record) patchCommands() [][]string {
	var out [][]string
	add := func(name string, per int, items []string) { out = appendChunked(out, name, r.Key, per, items) }
	switch r.Type {
	case PatchHash:
		add("HSET", 2, r.Items)
		add("HDEL", 1, r.Del)
	case PatchSet:
		add("SADD", 1, r.Items)
		add("SREM", 1, r.Del)
	case PatchZSet:
		pairs := scorePairs(r.Items, r.Scores)
		add("ZADD", 2, pairs)
		add("ZREM", 1, r.Del)
	case PatchList:
		add("RPUSH", 1, r.Items)
	case PatchStream:
		out = appendXAdds(out, r.Key, r.Entries)
		if r.FirstID != "" {
			out = append(out, []string{"XTRIM", r.Key, "MINID", r.FirstID})
		} else {
			out = append(out, []string{"XTRIM", r.Key, "MAXLEN", "0"})
		}
	}
	if r.ExpireAt > 0 {
		out = append(out, []string{"PEXPIREAT", r.Key, strconv.FormatInt(r.ExpireAt, 10)})
	} else {
		out = append(out, []string{"PERSIST", r.Key})
	}
	return out
}

// apply applies patch p to r, the whole state of the same key, as the
// patch's commands would (a merge of segments into the base file).
func (r *Record) apply(p *Record) {
	r.ExpireAt = p.ExpireAt
	switch p.Type {
	case PatchHash:
		r.applyHash(p)
	case PatchSet:
		r.applySet(p)
	case PatchZSet:
		r.applyZSet(p)
	case PatchList:
		r.Items = append(r.Items, p.Items...)
	case PatchStream:
		r.applyStream(p)
	}
}

// applyHash sets the patch's fields and deletes its deleted ones; the
// fields stay sorted.
func (r *Record) applyHash(p *Record) {
	m := make(map[string]string, len(r.Items)/2+len(p.Items)/2)
	for i := 0; i+1 < len(r.Items); i += 2 {
		m[r.Items[i]] = r.Items[i+1]
	}
	for i := 0; i+1 < len(p.Items); i += 2 {
		m[p.Items[i]] = p.Items[i+1]
	}
	for _, f := range p.Del {
		delete(m, f)
	}
	fields := make([]string, 0, len(m))
	for f := range m {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	r.Items = r.Items[:0]
	for _, f := range fields {
		r.Items = append(r.Items, f, m[f])
	}
}

// applySet adds the patch's members and removes its removed ones; the
// members stay sorted.
func (r *Record) applySet(p *Record) {
	m := make(map[string]bool, len(r.Items)+len(p.Items))
	for _, x := range r.Items {
		m[x] = true
	}
	for _, x := range p.Items {
		m[x] = true
	}
	for _, x := range p.Del {
		delete(m, x)
	}
	r.Items = r.Items[:0]
	for x := range m {
		r.Items = append(r.Items, x)
	}
	sort.Strings(r.Items)
}

// applyZSet adds the patch's members with their scores and removes its
// removed ones; the members stay in the sorted set's order.
func (r *Record) applyZSet(p *Record) {
	m := make(map[string]float64, len(r.Items)+len(p.Items))
	for i, x := range r.Items {
		m[x] = r.Scores[i]
	}
	for i, x := range p.Items {
		m[x] = p.Scores[i]
	}
	for _, x := range p.Del {
		delete(m, x)
	}
	members := make([]string, 0, len(m))
	for x := range m {
		members = append(members, x)
	}
	sort.Slice(members, func(i, j int) bool {
		a, b := m[members[i]], m[members[j]]
		return a < b || (a == b && members[i] < members[j])
	})
	r.Items, r.Scores = members, make([]float64, len(members))
	for i, x := range members {
		r.Scores[i] = m[x]
	}
}

// applyStream appends the patch's entries and keeps those from its first
// id on (the stream as trimmed).
func (r *Record) applyStream(p *Record) {
	r.Entries = append(r.Entries, p.Entries...)
	keep := r.Entries[:0]
	for _, e := range r.Entries {
		if p.FirstID != "" && !streamIDLess(e.ID, p.FirstID) {
			keep = append(keep, e)
		}
	}
	r.Entries = keep
}

// empty says whether a whole record holds no element (its key would not
// exist in Redis; a stream may exist empty).
func (r *Record) empty() bool {
	switch r.Type {
	case TypeHash, TypeList, TypeSet, TypeZSet:
		return len(r.Items) == 0
	}
	return false
}

// streamIDLess compares two stream entry ids "MS-SEQ".
func streamIDLess(a, b string) bool {
	am, as := splitStreamID(a)
	bm, bs := splitStreamID(b)
	return am < bm || (am == bm && as < bs)
}

func splitStreamID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}

// patchType is the patch type of a whole type.
func patchType(t string) string { return t + "+" }

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
	case TypeNone, TypeString, TypeList, TypeSet, TypeStream, PatchSet, PatchList, PatchStream:
	case TypeHash, PatchHash:
		if len(r.Items)%2 != 0 {
			return fmt.Errorf("key %q: hash with an odd number of items", r.Key)
		}
	case TypeZSet, PatchZSet:
		if len(r.Items) != len(r.Scores) {
			return fmt.Errorf("key %q: sorted set with %d members and %d scores", r.Key, len(r.Items), len(r.Scores))
		}
	default:
		return fmt.Errorf("key %q: unknown type %q", r.Key, r.Type)
	}
	return nil
}
