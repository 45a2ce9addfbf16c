package embedded

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyState is what the data directory holds of a key, as far as the next
// checkpoint needs to know it.
type keyState struct {
	hash       uint64 // of the whole record last written, its expiry left out (hashBody); 0 once a patch followed it
	expireAt   int64  // the expiry of the whole record last written
	patch      uint64 // of the patch last written (0: none since the whole record)
	listLen    int64  // a list's length as written; -1 unknown
	streamLast string // a stream's last entry id as written; "" unknown
	// expires: the key was written with a TTL. It is then always read whole:
	// it may expire unseen and come back as a new key, which a patch of the
	// old one would mix with what expired.
	expires bool
}

// noteWritten records r, written to (or read from) the data directory, in
// the key states.
func (s *Server) noteWritten(r *Record) {
	if r.Type == TypeNone {
		delete(s.keys, r.Key)
		return
	}
	st := s.keys[r.Key]
	if !IsPatch(r.Type) {
		st = &keyState{hash: hashBody(r), expireAt: r.ExpireAt, listLen: -1, expires: r.ExpireAt > 0}
		switch r.Type {
		case TypeList:
			st.listLen = int64(len(r.Items))
		case TypeStream:
			if n := len(r.Entries); n > 0 {
				st.streamLast = r.Entries[n-1].ID
			}
		}
		s.keys[r.Key] = st
		return
	}
	if st == nil {
		return // a patch of a key never written whole cannot be read back: refused at load
	}
	st.hash, st.patch = 0, hashRecord(r)
	st.expires = st.expires || r.ExpireAt > 0
	switch r.Type {
	case PatchList:
		if st.listLen >= 0 {
			st.listLen += int64(len(r.Items))
		}
	case PatchStream:
		if n := len(r.Entries); n > 0 {
			st.streamLast = r.Entries[n-1].ID
		}
	}
}

// maxSegments is how many segment files may follow the base file before a
// checkpoint starts a merge, however small they are (R25.4).
const maxSegments = 64

// checkpointBatch is how many keys one MULTI of a checkpoint reads: the
// server's lock is held while it runs, so a burst of changes (thousands of
// sessions made at once) is read in steps rather than in one long stall.
const checkpointBatch = 1024

// Checkpoint writes what changed since the last one as a new segment: the
// whole state of keys a command changed as a whole, and patches (the fields,
// members, or appended elements) of keys only named parts of changed.
func (s *Server) Checkpoint(ctx context.Context) error {
	if s.opts.ReadOnly {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.runs.Add(1)
	start := time.Now()
	changes, all := s.tr.take()
	if all {
		for k := range s.keys {
			changes[k] = &change{kind: opWhole}
		}
		if err := ScanKeys(ctx, s.cli, 1000, func(ks []string) error {
			for _, k := range ks {
				changes[k] = &change{kind: opWhole}
			}
			return nil
		}); err != nil {
			s.tr.again(nil, true)
			return err
		}
	}
	// R25.4: live-only keys are never kept; deferred keys (asynq's counters
	// and queue names) alone make no file: they wait for the next change of
	// anything else, or the last checkpoint of a clean stop.
	deferred := 0
	for k := range changes {
		switch {
		case liveOnly(k):
			delete(changes, k)
		case deferredKey(k):
			deferred++
		}
	}
	if len(changes) == 0 {
		return nil
	}
	if deferred == len(changes) && !s.closing.Load() {
		s.tr.keepChanges(changes)
		return nil
	}
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []*Record
	for i := 0; i < len(keys); i += checkpointBatch {
		part := keys[i:min(i+checkpointBatch, len(keys))]
		recs, retry, err := s.readChanges(ctx, part, changes)
		if err != nil {
			s.tr.againChanges(changes)
			return err
		}
		s.tr.again(retry, false)
		out = append(out, recs...)
	}
	if len(out) == 0 {
		return nil
	}
	if !s.closing.Load() && onlyDeferred(out) {
		// The other keys read were as written (a task queued and done
		// between two checkpoints): the deferred keys wait.
		left := make(map[string]*change, len(out))
		for _, r := range out {
			left[r.Key] = changes[r.Key]
		}
		s.tr.keepChanges(left)
		return nil
	}
	seq := s.seq + 1
	fw, err := newFileWriter(filepath.Join(s.opts.Dir, segName(seq)), kindSeg, seq)
	if err == nil {
		for _, r := range out {
			if err = fw.add(r); err != nil {
				break
			}
		}
		if err != nil {
			fw.abort()
		}
	}
	var n int64
	if err == nil {
		n, err = fw.commit()
	}
	if err != nil {
		s.tr.againChanges(changes)
		return fmt.Errorf("write segment %d: %w", seq, err)
	}
	s.seq = seq
	for _, r := range out {
		s.noteWritten(r)
	}
	s.segBytes += n
	s.stats.checkpoints.Add(1)
	s.stats.records.Add(int64(len(out)))
	s.stats.bytes.Add(n)
	s.stats.lastCheckpointNs.Store(int64(time.Since(start)))
	// A merge when the segments pass their share of bytes, or maxSegments
	// files (R25.4: a day of small changes is thousands of files else).
	merge := s.segBytes >= max(s.opts.CompactAt, s.baseBytes/2) || s.seq-s.baseSeq > maxSegments
	if !s.closing.Load() && merge && s.compacting.CompareAndSwap(false, true) {
		s.compactWG.Add(1)
		go func(upto uint64) {
			defer s.compactWG.Done()
			defer s.compacting.Store(false)
			if err := s.compact(upto); err != nil {
				s.log.Error("embedded store: merging segments into the base file failed (tried again later)", "data_dir", s.opts.Dir, "err", err)
			}
		}(seq)
	}
	return nil
}

// nearExpiry says whether two reads of a key's expiry are the same expiry:
// both none, or within a second. A read gives now + PTTL, and miniredis
// counts a TTL down only every 250 ms, so two reads of an unchanged key
// differ by up to that; without the margin a key with a TTL that a pending
// command keeps marked would be written again at every checkpoint (R25.4).
// An expiry set again later than a second is written; one set again sooner
// is at most a second early on disk.
func nearExpiry(a, b int64) bool {
	if (a == 0) != (b == 0) {
		return false
	}
	return a-b <= 1000 && b-a <= 1000
}

// onlyDeferred says whether every record is of a deferred key.
func onlyDeferred(recs []*Record) bool {
	for _, r := range recs {
		if !deferredKey(r.Key) {
			return false
		}
	}
	return true
}

// How a checkpoint reads one key.
type readMode uint8

const (
	readWhole readMode = iota
	readHash
	readSet
	readZSet
	readListTail
	readStreamTail
)

// readChanges reads keys' changes at one point in time: their types first,
// then one MULTI reads each key's type again, its expiry, and its whole
// contents or only its changed part. It returns the records to write
// (unchanged keys and empty patches left out) and the keys to read whole
// again later (a type that changed between the two steps, or a list shorter
// than written).
func (s *Server) readChanges(ctx context.Context, keys []string, changes map[string]*change) (recs []*Record, retry []string, err error) {
	types, err := readTypes(ctx, s.cli, keys)
	if err != nil {
		return nil, nil, err
	}
	type read struct {
		mode  readMode
		elems []string
		typ   *redis.StatusCmd
		pttl  *redis.DurationCmd
		val   redis.Cmder
		extra redis.Cmder
	}
	reads := make([]read, len(keys))
	now := time.Now()
	_, err = s.cli.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			t, c, st := types[i].Val(), changes[k], s.keys[k]
			rd := &reads[i]
			rd.mode = modeOf(t, c, st)
			rd.typ = p.Type(ctx, k)
			rd.pttl = p.PTTL(ctx, k)
			if rd.mode == readHash || rd.mode == readSet || rd.mode == readZSet {
				rd.elems = make([]string, 0, len(c.elems))
				for e := range c.elems {
					rd.elems = append(rd.elems, e)
				}
				sort.Strings(rd.elems)
			}
			switch rd.mode {
			case readWhole:
				rd.val = queueWhole(ctx, p, k, t)
			case readHash:
				rd.val = p.HMGet(ctx, k, rd.elems...)
			case readSet:
				rd.val = p.SMIsMember(ctx, k, toAny(rd.elems)...)
			case readZSet:
				rd.val = p.Do(ctx, append([]any{"ZMSCORE", k}, toAny(rd.elems)...)...)
			case readListTail:
				rd.extra = p.LLen(ctx, k)
				rd.val = p.LRange(ctx, k, st.listLen, -1)
			case readStreamTail:
				rd.val = p.XRange(ctx, k, "("+st.streamLast, "+")
				rd.extra = p.XRangeN(ctx, k, "-", "+", 1)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("read keys: %w", err)
	}
	for i, k := range keys {
		rd := &reads[i]
		want, got := types[i].Val(), rd.typ.Val()
		st := s.keys[k]
		switch {
		case want != got:
			retry = append(retry, k)
			continue
		case got == TypeNone:
			if st != nil {
				recs = append(recs, &Record{Key: k, Type: TypeNone})
			}
			continue
		}
		var r *Record
		if rd.mode == readWhole {
			if r, err = wholeRecord(k, got, rd.pttl.Val(), rd.val, now); err != nil {
				return nil, nil, err
			}
			if st != nil && st.hash != 0 && st.hash == hashBody(r) && nearExpiry(st.expireAt, r.ExpireAt) {
				continue // written so already (a command that changed nothing)
			}
			recs = append(recs, r)
			continue
		}
		r = &Record{Key: k, Type: patchType(got), ExpireAt: expireAt(rd.pttl.Val(), now)}
		switch rd.mode {
		case readHash:
			for j, v := range rd.val.(*redis.SliceCmd).Val() {
				if x, ok := v.(string); ok {
					r.Items = append(r.Items, rd.elems[j], x)
				} else {
					r.Del = append(r.Del, rd.elems[j])
				}
			}
		case readSet:
			for j, in := range rd.val.(*redis.BoolSliceCmd).Val() {
				if in {
					r.Items = append(r.Items, rd.elems[j])
				} else {
					r.Del = append(r.Del, rd.elems[j])
				}
			}
		case readZSet:
			vals, _ := rd.val.(*redis.Cmd).Slice()
			for j, v := range vals {
				f, ok := zscore(v)
				if ok {
					r.Items = append(r.Items, rd.elems[j])
					r.Scores = append(r.Scores, f)
				} else {
					r.Del = append(r.Del, rd.elems[j])
				}
			}
		case readListTail:
			if rd.extra.(*redis.IntCmd).Val() < st.listLen {
				retry = append(retry, k) // shorter than written: read it whole
				continue
			}
			r.Items = rd.val.(*redis.StringSliceCmd).Val()
			if len(r.Items) == 0 {
				continue
			}
		case readStreamTail:
			r.Entries = streamEntries(rd.val.(*redis.XMessageSliceCmd).Val())
			if len(r.Entries) == 0 {
				continue // nothing appended yet (the command has not run)
			}
			if first := rd.extra.(*redis.XMessageSliceCmd).Val(); len(first) > 0 {
				r.FirstID = first[0].ID
			}
		}
		if len(r.Items) == 0 && len(r.Del) == 0 && len(r.Entries) == 0 {
			continue
		}
		if (rd.mode == readHash || rd.mode == readSet || rd.mode == readZSet) && st.patch == hashRecord(r) {
			// The same fields or members read again with the same values
			// (a command pending at the last checkpoint): written already.
			continue
		}
		recs = append(recs, r)
	}
	return recs, retry, nil
}

// modeOf is how a key of type t that changed by c is read: only the changed
// part when the data directory holds its whole state and the change allows
// it, else whole.
func modeOf(t string, c *change, st *keyState) readMode {
	if st == nil || c == nil || st.expires {
		return readWhole
	}
	switch {
	case c.kind == opHash && t == TypeHash:
		return readHash
	case c.kind == opSet && t == TypeSet:
		return readSet
	case c.kind == opZSet && t == TypeZSet:
		return readZSet
	case c.kind == opListAppend && t == TypeList && st.listLen >= 0:
		return readListTail
	case c.kind == opStreamAppend && t == TypeStream && st.streamLast != "":
		return readStreamTail
	}
	return readWhole
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// zscore reads one ZMSCORE answer (nil: not a member).
func zscore(v any) (float64, bool) {
	switch x := v.(type) {
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}
