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
	if !IsPatch(r.Type) {
		s.keys[r.Key] = wholeState(r)
		return
	}
	st := s.keys[r.Key]
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

// wholeState is the key state of the whole record r.
func wholeState(r *Record) *keyState {
	st := &keyState{hash: hashBody(r), expireAt: r.ExpireAt, listLen: -1, expires: r.ExpireAt > 0}
	switch r.Type {
	case TypeList:
		st.listLen = int64(len(r.Items))
	case TypeStream:
		if n := len(r.Entries); n > 0 {
			st.streamLast = r.Entries[n-1].ID
		}
	}
	return st
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
	changes, err := s.takeChanges(ctx)
	if err != nil || !s.worthWriting(changes) {
		return err
	}
	out, err := s.readBatches(ctx, changes)
	if err != nil || len(out) == 0 {
		return err
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
	n, err := writeSegment(filepath.Join(s.opts.Dir, segName(seq)), seq, out)
	if err != nil {
		s.tr.againChanges(changes)
		return fmt.Errorf("write segment %d: %w", seq, err)
	}
	s.noteSegment(seq, out, n, start)
	s.mergeIfDue(seq)
	return nil
}

// takeChanges takes the tracker's changes; after a command that may have
// changed any key, every key is read whole (those written and those held).
func (s *Server) takeChanges(ctx context.Context) (map[string]*change, error) {
	changes, all := s.tr.take()
	if !all {
		return changes, nil
	}
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
		return nil, err
	}
	return changes, nil
}

// worthWriting leaves the live-only keys out of changes and says whether
// the rest makes a file. R25.4: live-only keys are never kept; deferred keys
// (asynq's counters and queue names) alone make no file: they wait for the
// next change of anything else, or the last checkpoint of a clean stop.
func (s *Server) worthWriting(changes map[string]*change) bool {
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
		return false
	}
	if deferred == len(changes) && !s.closing.Load() {
		s.tr.keepChanges(changes)
		return false
	}
	return true
}

// readBatches reads the changed keys in order, checkpointBatch keys to a
// MULTI; the keys to read whole again go back to the tracker, and on an
// error every change does.
func (s *Server) readBatches(ctx context.Context, changes map[string]*change) ([]*Record, error) {
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
			return nil, err
		}
		s.tr.again(retry, false)
		out = append(out, recs...)
	}
	return out, nil
}

// writeSegment writes recs as segment seq at path and returns its size.
func writeSegment(path string, seq uint64, recs []*Record) (int64, error) {
	fw, err := newFileWriter(path, kindSeg, seq)
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if err := fw.add(r); err != nil {
			fw.abort()
			return 0, err
		}
	}
	return fw.commit()
}

// noteSegment records segment seq, n bytes of recs, as written: the key
// states and the counters.
func (s *Server) noteSegment(seq uint64, recs []*Record, n int64, start time.Time) {
	s.seq = seq
	for _, r := range recs {
		s.noteWritten(r)
	}
	s.segBytes += n
	s.stats.checkpoints.Add(1)
	s.stats.records.Add(int64(len(recs)))
	s.stats.bytes.Add(n)
	s.stats.lastCheckpointNs.Store(int64(time.Since(start)))
}

// mergeIfDue starts a merge of the segments up to seq in the background
// when they pass their share of bytes, or maxSegments files (R25.4: a day
// of small changes is thousands of files else), unless one runs already or
// the server is closing.
func (s *Server) mergeIfDue(seq uint64) {
	due := s.segBytes >= max(s.opts.CompactAt, s.baseBytes/2) || s.seq-s.baseSeq > maxSegments
	if s.closing.Load() || !due || !s.compacting.CompareAndSwap(false, true) {
		return
	}
	s.compactWG.Add(1)
	go func(upto uint64) {
		defer s.compactWG.Done()
		defer s.compacting.Store(false)
		if err := s.compact(upto); err != nil {
			s.log.Error("embedded store: merging segments into the base file failed (tried again later)", "data_dir", s.opts.Dir, "err", err)
		}
	}(seq)
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

// byElems says whether the mode reads only named fields or members.
func (m readMode) byElems() bool { return m == readHash || m == readSet || m == readZSet }

// keyRead is one key's reads in the MULTI of readChanges.
type keyRead struct {
	mode  readMode
	elems []string // byElems: the fields or members read, sorted
	typ   *redis.StatusCmd
	pttl  *redis.DurationCmd
	val   redis.Cmder
	extra redis.Cmder
}

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
	reads := make([]keyRead, len(keys))
	now := time.Now()
	_, err = s.cli.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			reads[i].queue(ctx, p, k, types[i].Val(), changes[k], s.keys[k])
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("read keys: %w", err)
	}
	for i, k := range keys {
		r, again, err := reads[i].record(k, types[i].Val(), s.keys[k], now)
		switch {
		case err != nil:
			return nil, nil, err
		case again:
			retry = append(retry, k)
		case r != nil:
			recs = append(recs, r)
		}
	}
	return recs, retry, nil
}

// queue adds the reads of key k, of type t and changed by c, to the MULTI p.
func (rd *keyRead) queue(ctx context.Context, p redis.Pipeliner, k, t string, c *change, st *keyState) {
	rd.mode = modeOf(t, c, st)
	rd.typ = p.Type(ctx, k)
	rd.pttl = p.PTTL(ctx, k)
	if rd.mode.byElems() {
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

// record is the record to write of key k as read, of type want before the
// MULTI and with st in the data directory: nil when there is nothing to
// write; again when the key is to be read whole at the next checkpoint.
func (rd *keyRead) record(k, want string, st *keyState, now time.Time) (r *Record, again bool, err error) {
	got := rd.typ.Val()
	switch {
	case want != got:
		return nil, true, nil
	case got == TypeNone:
		if st != nil {
			return &Record{Key: k, Type: TypeNone}, false, nil
		}
		return nil, false, nil
	case rd.mode == readWhole:
		r, err = rd.whole(k, got, st, now)
		return r, false, err
	}
	r = &Record{Key: k, Type: patchType(got), ExpireAt: expireAt(rd.pttl.Val(), now)}
	if again := rd.fillPatch(r, st); again {
		return nil, true, nil
	}
	if len(r.Items) == 0 && len(r.Del) == 0 && len(r.Entries) == 0 {
		return nil, false, nil // nothing appended yet (the command has not run)
	}
	if rd.mode.byElems() && st.patch == hashRecord(r) {
		// The same fields or members read again with the same values
		// (a command pending at the last checkpoint): written already.
		return nil, false, nil
	}
	return r, false, nil
}

// whole is the whole record of key k of type t as read; nil when the data
// directory holds it so already (a command that changed nothing).
func (rd *keyRead) whole(k, t string, st *keyState, now time.Time) (*Record, error) {
	r, err := wholeRecord(k, t, rd.pttl.Val(), rd.val, now)
	if err != nil {
		return nil, err
	}
	if st != nil && st.hash != 0 && st.hash == hashBody(r) && nearExpiry(st.expireAt, r.ExpireAt) {
		return nil, nil
	}
	return r, nil
}

// fillPatch fills the patch r with what was read; again: a list shorter
// than written, to be read whole.
func (rd *keyRead) fillPatch(r *Record, st *keyState) (again bool) {
	switch rd.mode {
	case readHash:
		hashPatch(r, rd.elems, rd.val.(*redis.SliceCmd).Val())
	case readSet:
		setPatch(r, rd.elems, rd.val.(*redis.BoolSliceCmd).Val())
	case readZSet:
		vals, _ := rd.val.(*redis.Cmd).Slice()
		zsetPatch(r, rd.elems, vals)
	case readListTail:
		if rd.extra.(*redis.IntCmd).Val() < st.listLen {
			return true
		}
		r.Items = rd.val.(*redis.StringSliceCmd).Val()
	case readStreamTail:
		r.Entries = streamEntries(rd.val.(*redis.XMessageSliceCmd).Val())
		if first := rd.extra.(*redis.XMessageSliceCmd).Val(); len(r.Entries) > 0 && len(first) > 0 {
			r.FirstID = first[0].ID
		}
	}
	return false
}

// hashPatch: the fields read with a value are set, the others deleted.
func hashPatch(r *Record, fields []string, vals []any) {
	for j, v := range vals {
		if x, ok := v.(string); ok {
			r.Items = append(r.Items, fields[j], x)
		} else {
			r.Del = append(r.Del, fields[j])
		}
	}
}

// setPatch: the members read as in the set are added, the others removed.
func setPatch(r *Record, members []string, in []bool) {
	for j, is := range in {
		if is {
			r.Items = append(r.Items, members[j])
		} else {
			r.Del = append(r.Del, members[j])
		}
	}
}

// zsetPatch: the members read with a score are added with it, the others
// removed.
func zsetPatch(r *Record, members []string, vals []any) {
	for j, v := range vals {
		if f, ok := zscore(v); ok {
			r.Items = append(r.Items, members[j])
			r.Scores = append(r.Scores, f)
		} else {
			r.Del = append(r.Del, members[j])
		}
	}
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
