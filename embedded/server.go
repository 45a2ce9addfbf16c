package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofrs/flock"
	"github.com/redis/go-redis/v9"
)

// Options configure an embedded server.
type Options struct {
	// Dir is the data directory (created 0700 when missing).
	Dir    string
	Logger *slog.Logger
	// Every is the checkpoint interval (default 1 s: a crash loses at most
	// about the last second of changes, R20.1).
	Every time.Duration
	// CompactAt is the segment bytes that start a merge into the base file
	// (default 4 MiB or half the base file, whichever is larger); more than
	// 64 segment files start one too, however small (R25.4).
	CompactAt int64
	// ReadOnly loads the directory and writes nothing to it: no checkpoint,
	// no merge, no clean-up of files a stopped merge or write left
	// (`relay export`).
	ReadOnly bool
}

// LockedError is a data directory another process holds (R20.2).
type LockedError struct {
	Dir string
	PID int // 0 when the lock file names none
}

func (e *LockedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s: one relay process per data directory (stop it, or give this one its own --data-dir, or use a real Redis for several processes)", e.Dir, who)
}

// Server is a running embedded store.
type Server struct {
	opts Options
	log  *slog.Logger
	lock *flock.Flock
	mini *miniredis.Miniredis
	pass string
	tr   *tracker
	cli  *redis.Client // the checkpointer's own connection

	mu        sync.Mutex // one checkpoint at a time; guards the fields below
	seq       uint64     // the last segment written
	baseSeq   uint64     // the last segment merged into the base file
	baseBytes int64
	segBytes  int64
	keys      map[string]*keyState // every key written to the data directory and not deleted

	compacting atomic.Bool
	closing    atomic.Bool // Close runs: its last checkpoint starts no merge
	compactWG  sync.WaitGroup
	stop       chan struct{}
	done       chan struct{}
	closeOnce  sync.Once
	closeErr   error

	stats statCounters
}

type statCounters struct {
	runs, checkpoints, records, bytes, compactions atomic.Int64
	lastCheckpointNs, lastCompactNs                atomic.Int64
}

// Stats are the persistence's counters (bench, metrics).
type Stats struct {
	Runs                                     int64 // checkpoints begun, those that found nothing to write too
	Checkpoints, Records, Bytes, Compactions int64
	LastCheckpoint, LastCompaction           time.Duration
	BaseBytes, SegmentBytes                  int64
}

// Open locks the data directory, loads its dataset into a new server on a
// loopback port and starts the checkpoints. A data file that cannot be read
// is a *CorruptError and a directory in use a *LockedError; neither touches
// a file.
func Open(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.CompactAt <= 0 {
		o.CompactAt = 4 << 20
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	s := &Server{opts: o, log: o.Logger, keys: map[string]*keyState{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.takeLock(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.shutdown()
		}
	}()
	if err := s.listen(); err != nil {
		return nil, err
	}
	start := time.Now()
	keys, err := s.load()
	if err != nil {
		return nil, err
	}
	s.tr = newTracker(s.mini.Server(), s.log)
	s.tr.onCommand = (&ttlClock{m: s.mini}).lazy(ttlEvery)
	if !o.ReadOnly {
		s.mini.Server().SetPreHook(s.tr.hook)
	}
	s.log.Info("embedded store: data directory loaded", "data_dir", dir, "keys", keys,
		"base_bytes", s.baseBytes, "segment_bytes", s.segBytes, "took", time.Since(start).Round(time.Millisecond))
	if o.ReadOnly {
		close(s.done)
	} else {
		go s.loop()
	}
	ok = true
	return s, nil
}

// listen starts the server on a loopback port behind a new random password,
// and its client.
func (s *Server) listen() error {
	var pw [16]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return err
	}
	s.pass = hex.EncodeToString(pw[:])
	s.mini = miniredis.NewMiniRedis()
	s.mini.RequireAuth(s.pass)
	if err := s.mini.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("embedded store: listen on loopback: %w", err)
	}
	s.cli = redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.pass, PoolSize: 2, MaxRetries: -1,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	return nil
}

// Addr is the server's loopback address.
func (s *Server) Addr() string { return s.mini.Addr() }

// Password is the server's random password (each start makes a new one).
func (s *Server) Password() string { return s.pass }

// Dir is the data directory.
func (s *Server) Dir() string { return s.opts.Dir }

// Stats returns the persistence's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	base, seg := s.baseBytes, s.segBytes
	s.mu.Unlock()
	return Stats{Runs: s.stats.runs.Load(), Checkpoints: s.stats.checkpoints.Load(), Records: s.stats.records.Load(), Bytes: s.stats.bytes.Load(),
		Compactions: s.stats.compactions.Load(), LastCheckpoint: time.Duration(s.stats.lastCheckpointNs.Load()),
		LastCompaction: time.Duration(s.stats.lastCompactNs.Load()), BaseBytes: base, SegmentBytes: seg}
}

func (s *Server) takeLock() error {
	path := filepath.Join(s.opts.Dir, lockName)
	s.lock = flock.New(path, flock.SetPermissions(0o600))
	got, err := s.lock.TryLock()
	if err != nil {
		return fmt.Errorf("data directory %s: lock: %w", s.opts.Dir, err)
	}
	if !got {
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return &LockedError{Dir: s.opts.Dir, PID: pid}
	}
	return os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
}

// load reads the base file and then each later segment into the server.
func (s *Server) load() (int, error) {
	ctx := context.Background()
	ld := &loader{ctx: ctx, p: s.cli.Pipeline(), now: time.Now()}
	if err := s.loadBase(ld); err != nil {
		return 0, err
	}
	segs, err := segments(s.opts.Dir)
	if err != nil {
		return 0, fmt.Errorf("data directory: %w", err)
	}
	for _, seq := range segs {
		if seq <= s.baseSeq {
			continue // merged already (a merge that stopped before removing it)
		}
		if err := s.loadSegment(ld, seq); err != nil {
			return 0, err
		}
	}
	if err := ld.flush(); err != nil {
		return 0, fmt.Errorf("embedded store: load the data directory: %w", err)
	}
	if !s.opts.ReadOnly {
		s.removeLeftovers(segs)
	}
	n, err := s.cli.DBSize(ctx).Result()
	return int(n), err
}

// loadBase reads the base file, if there is one, into ld.
func (s *Server) loadBase(ld *loader) error {
	basePath := filepath.Join(s.opts.Dir, baseName)
	fi, err := os.Stat(basePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &CorruptError{Path: basePath, Err: err}
	}
	seq, err := readFile(basePath, kindBase, func(r *Record) error {
		if liveOnly(r.Key) {
			return nil // kept by an older version: the live process writes it again
		}
		s.noteWritten(r)
		return ld.add(r, false)
	})
	if err != nil {
		return err
	}
	s.baseSeq, s.seq, s.baseBytes = seq, seq, fi.Size()
	return nil
}

// loadSegment reads segment seq into ld, over the keys read before.
func (s *Server) loadSegment(ld *loader, seq uint64) error {
	path := filepath.Join(s.opts.Dir, segName(seq))
	got, err := readFile(path, kindSeg, func(r *Record) error {
		if liveOnly(r.Key) {
			return nil
		}
		s.noteWritten(r)
		return ld.add(r, true)
	})
	if err != nil {
		return err
	}
	if got != seq {
		return &CorruptError{Path: path, Err: fmt.Errorf("names segment %d in its header", got)}
	}
	if fi, err := os.Stat(path); err == nil {
		s.segBytes += fi.Size()
	}
	s.seq = seq
	return nil
}

// removeLeftovers removes, once all is read, the merged segments a stopped
// merge left behind, and the temporary files of writes a crash cut short
// (never renamed into place, so never part of the data).
func (s *Server) removeLeftovers(segs []uint64) {
	for _, seq := range segs {
		if seq <= s.baseSeq {
			_ = os.Remove(filepath.Join(s.opts.Dir, segName(seq)))
		}
	}
	ents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "."+segPrefix) || strings.HasPrefix(n, "."+baseName) {
			_ = os.Remove(filepath.Join(s.opts.Dir, n))
		}
	}
}

// loader sends records' commands to the server in pipelines.
type loader struct {
	ctx context.Context
	p   redis.Pipeliner
	now time.Time
	n   int
}

func (l *loader) add(r *Record, replace bool) error {
	cmds := r.Commands(l.now)
	if IsPatch(r.Type) {
		cmds = r.patchCommands()
	} else if replace {
		l.p.Del(l.ctx, r.Key)
		l.n++
	}
	for _, c := range cmds {
		args := make([]any, len(c))
		for i, a := range c {
			args[i] = a
		}
		l.p.Do(l.ctx, args...)
		l.n++
	}
	if l.n >= 1000 {
		return l.flush()
	}
	return nil
}

func (l *loader) flush() error {
	l.n = 0
	cmds, err := l.p.Exec(l.ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		for _, c := range cmds {
			if c.Err() != nil && !errors.Is(c.Err(), redis.Nil) {
				return fmt.Errorf("%v: %w", c.Args()[:min(2, len(c.Args()))], c.Err())
			}
		}
		return err
	}
	return nil
}

// hashBody is hashRecord of r without its expiry (compared apart, nearExpiry).
func hashBody(r *Record) uint64 {
	if r.ExpireAt == 0 {
		return hashRecord(r)
	}
	c := *r
	c.ExpireAt = 0
	return hashRecord(&c)
}

func hashRecord(r *Record) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(encodeRecord(nil, r))
	return h.Sum64()
}

// ttlEvery is how often at most miniredis's TTLs are counted down: before
// a command, when this much time went by since the last count (ttlClock).
const ttlEvery = 250 * time.Millisecond

// settle is how long after the last write command the checkpoints go on: a
// command's keys are marked by the pre-hook before it runs, so a checkpoint
// that read them before it ran must be followed by one after (no command the
// relay sends blocks; each runs within milliseconds of its hook).
const settle = 2 * time.Second

// loop checkpoints every Every while commands change the relay's keys, and
// for settle after the last one; at rest it sleeps until a write command
// comes (R25.4: no timer of its own while nothing changes).
func (s *Server) loop() {
	defer close(s.done)
	cp := time.NewTimer(time.Hour)
	cp.Stop()
	armed := false
	var last time.Time // the last checkpoint's start
	for {
		select {
		case <-s.stop:
			cp.Stop()
			return
		case <-s.tr.changed:
			if !armed { // Every after the first write, as a ticker would at most: the writes of one change go together
				armed = true
				cp.Reset(s.opts.Every)
			}
		case <-cp.C:
			armed = false
			last = time.Now()
			err := s.Checkpoint(context.Background())
			if err != nil {
				s.log.Error("embedded store: checkpoint failed (retried in a second)", "data_dir", s.opts.Dir, "err", err)
			}
			if err != nil || last.Sub(s.tr.lastWrite()) < settle {
				armed = true
				cp.Reset(s.opts.Every)
			}
		}
	}
}

// Compact merges every segment written so far into the base file.
func (s *Server) Compact() error {
	if s.opts.ReadOnly {
		return nil
	}
	for !s.compacting.CompareAndSwap(false, true) {
		time.Sleep(10 * time.Millisecond)
	}
	defer s.compacting.Store(false)
	s.mu.Lock()
	upto := s.seq
	s.mu.Unlock()
	return s.compact(upto)
}

// compact writes a new base file of the old one and the segments up to
// upto, then removes those segments. It reads files only: the server and
// the checkpoints go on meanwhile (new segments have higher numbers).
func (s *Server) compact(upto uint64) error {
	start := time.Now()
	s.mu.Lock()
	from := s.baseSeq
	s.mu.Unlock()
	if upto <= from {
		return nil
	}
	m, err := s.readSegments(from, upto)
	if err != nil {
		return err
	}
	n, err := m.writeBase(filepath.Join(s.opts.Dir, baseName), upto, time.Now())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.baseSeq, s.baseBytes = upto, n
	s.segBytes -= m.bytes
	s.mu.Unlock()
	for _, seq := range m.segs {
		_ = os.Remove(filepath.Join(s.opts.Dir, segName(seq)))
	}
	s.stats.compactions.Add(1)
	s.stats.lastCompactNs.Store(int64(time.Since(start)))
	return nil
}

// merge is what the segments of a compaction hold, read in order.
type merge struct {
	// newer: the keys whose whole state (or deletion) a segment wrote, with
	// the patches after it applied; onBase: patches of keys whose whole
	// state is in the base file.
	newer  map[string]*Record
	onBase map[string][]*Record
	segs   []uint64 // the segments read
	bytes  int64    // their size
}

// readSegments reads the segments after from up to upto.
func (s *Server) readSegments(from, upto uint64) (*merge, error) {
	segs, err := segments(s.opts.Dir)
	if err != nil {
		return nil, err
	}
	m := &merge{newer: map[string]*Record{}, onBase: map[string][]*Record{}}
	for _, seq := range segs {
		if seq <= from || seq > upto {
			continue
		}
		path := filepath.Join(s.opts.Dir, segName(seq))
		if _, err := readFile(path, kindSeg, m.add); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(path); err == nil {
			m.bytes += fi.Size()
		}
		m.segs = append(m.segs, seq)
	}
	return m, nil
}

// add takes one record of a segment into the merge.
func (m *merge) add(r *Record) error {
	if liveOnly(r.Key) {
		return nil
	}
	if !IsPatch(r.Type) {
		m.newer[r.Key] = r
		delete(m.onBase, r.Key)
		return nil
	}
	if w, ok := m.newer[r.Key]; ok {
		if w.Type != TypeNone {
			w.apply(r)
		}
		return nil
	}
	m.onBase[r.Key] = append(m.onBase[r.Key], r)
	return nil
}

// writeBase writes the new base file, numbered upto, at basePath: the old
// one's keys with their patches applied, then the keys the segments wrote
// whole; keys expired at now or empty are left out. It returns its size.
func (m *merge) writeBase(basePath string, upto uint64, now time.Time) (int64, error) {
	fw, err := newFileWriter(basePath, kindBase, upto)
	if err != nil {
		return 0, err
	}
	fw.paced = true
	if err := m.copyBase(fw, basePath, now); err != nil {
		fw.abort()
		return 0, err
	}
	for _, r := range m.newer {
		if r.Type == TypeNone || r.Expired(now) || r.empty() {
			continue
		}
		if err := fw.add(r); err != nil {
			fw.abort()
			return 0, err
		}
	}
	return fw.commit()
}

// copyBase adds the old base file's keys at basePath, if there is one, to
// fw: those the segments wrote whole, expired at now or empty left out, the
// others with their patches applied.
func (m *merge) copyBase(fw *fileWriter, basePath string, now time.Time) error {
	if !fileExists(basePath) {
		return nil // no base file yet
	}
	_, err := readFile(basePath, kindBase, func(r *Record) error {
		if _, ok := m.newer[r.Key]; ok || liveOnly(r.Key) {
			return nil
		}
		for _, p := range m.onBase[r.Key] {
			r.apply(p)
		}
		if r.Expired(now) || r.empty() {
			return nil
		}
		return fw.add(r)
	})
	return err
}

// fileExists says whether path can be stat'ed.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Close takes a last checkpoint (a clean stop loses nothing: call it after
// every client of the server is done), stops the server and frees the data
// directory.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		close(s.stop)
		<-s.done
		s.compactWG.Wait()
		if err := s.Checkpoint(context.Background()); err != nil {
			s.closeErr = fmt.Errorf("embedded store: last checkpoint: %w", err)
			s.log.Error("embedded store: last checkpoint failed: changes of the last second are lost", "data_dir", s.opts.Dir, "err", err)
		}
		s.compactWG.Wait() // a merge the last checkpoint started ends before the directory is freed
		s.shutdown()
	})
	return s.closeErr
}

// Kill stops the server without a last checkpoint, as a crash would (tests).
func (s *Server) Kill() {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		close(s.stop)
		<-s.done
		s.compactWG.Wait()
		s.shutdown()
	})
}

func (s *Server) shutdown() {
	if s.cli != nil {
		_ = s.cli.Close()
	}
	if s.mini != nil {
		s.mini.Close()
	}
	if s.lock != nil {
		_ = s.lock.Unlock()
	}
}
