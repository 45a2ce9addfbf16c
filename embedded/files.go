package embedded

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/renameio/v2"
)

// The data directory holds:
//
//	LOCK                    flock(2) of the process that owns the directory; its PID inside
//	base.rdat               every key as of the segments it merged (header: their last number)
//	seg-0000000000000042.rdat  keys changed in one checkpoint, in the order written
//
// A file is header, records, footer:
//
//	header  "RELAYDB" 0x01, kind ('B' base, 'S' segment), seq (uint64 BE)
//	record  uvarint length, then the record's bytes (see encodeRecord)
//	footer  uvarint 0, uvarint record count, CRC-32 (IEEE, BE) of every byte before it
//
// Files are written whole (a new file, fsync, rename, fsync of the
// directory), so a crash leaves the previous ones as they were; a file that
// does not read back whole is corrupt, never half-written.
const (
	baseName   = "base.rdat"
	segPrefix  = "seg-"
	fileSuffix = ".rdat"
	lockName   = "LOCK"
	magic      = "RELAYDB\x01"
	kindBase   = 'B'
	kindSeg    = 'S'
	maxField   = 512 << 20 // no single string of the dataset is this long
)

// CorruptError is a data file that cannot be read (R20.3).
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("data file %s cannot be read: %v (left as it is; move it away or restore a backup)", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

func segName(seq uint64) string { return fmt.Sprintf("%s%016d%s", segPrefix, seq, fileSuffix) }

// segments lists the segment files of dir by number, ascending.
func segments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, segPrefix) || !strings.HasSuffix(n, fileSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(n, segPrefix), fileSuffix), 10, 64)
		if err != nil {
			continue // not ours
		}
		out = append(out, seq)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// fileWriter writes one data file atomically.
type fileWriter struct {
	pf    *renameio.PendingFile
	w     *bufio.Writer
	crc   hash.Hash32
	count uint64
	n     int64
	buf   []byte
	// paced: the writer rests twice as long as it worked after every
	// pacedStep bytes, so a merge in the background takes at most a third of
	// a core from the calls the relay serves meanwhile (it still ends well
	// within a second for 10,000 sessions).
	paced     bool
	stepStart time.Time
	stepBytes int64
}

const pacedStep = 256 << 10

func newFileWriter(path string, kind byte, seq uint64) (*fileWriter, error) {
	pf, err := renameio.NewPendingFile(path, renameio.WithPermissions(0o600), renameio.WithTempDir(filepath.Dir(path)))
	if err != nil {
		return nil, err
	}
	fw := &fileWriter{pf: pf, crc: crc32.NewIEEE()}
	fw.w = bufio.NewWriterSize(io.MultiWriter(pf, fw.crc), 256<<10)
	h := make([]byte, 0, len(magic)+9)
	h = append(h, magic...)
	h = append(h, kind)
	h = binary.BigEndian.AppendUint64(h, seq)
	if err := fw.write(h); err != nil {
		_ = pf.Cleanup()
		return nil, err
	}
	return fw, nil
}

func (fw *fileWriter) write(b []byte) error {
	n, err := fw.w.Write(b)
	fw.n += int64(n)
	return err
}

func (fw *fileWriter) add(r *Record) error {
	fw.buf = encodeRecord(fw.buf[:0], r)
	var l [binary.MaxVarintLen64]byte
	if err := fw.write(l[:binary.PutUvarint(l[:], uint64(len(fw.buf)))]); err != nil {
		return err
	}
	fw.count++
	if err := fw.write(fw.buf); err != nil {
		return err
	}
	if fw.paced {
		fw.stepBytes += int64(len(fw.buf))
		if fw.stepStart.IsZero() {
			fw.stepStart = time.Now()
		} else if fw.stepBytes >= pacedStep {
			time.Sleep(min(2*time.Since(fw.stepStart), 40*time.Millisecond))
			fw.stepStart, fw.stepBytes = time.Now(), 0
		}
	}
	return nil
}

// commit writes the footer, fsyncs, renames into place and fsyncs the
// directory. It returns the file's size.
func (fw *fileWriter) commit() (int64, error) {
	var f []byte
	f = binary.AppendUvarint(f, 0)
	f = binary.AppendUvarint(f, fw.count)
	if err := fw.write(f); err != nil {
		_ = fw.pf.Cleanup()
		return 0, err
	}
	if err := fw.w.Flush(); err != nil {
		_ = fw.pf.Cleanup()
		return 0, err
	}
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], fw.crc.Sum32())
	if _, err := fw.pf.Write(c[:]); err != nil {
		_ = fw.pf.Cleanup()
		return 0, err
	}
	if err := fw.pf.CloseAtomicallyReplace(); err != nil {
		_ = fw.pf.Cleanup()
		return 0, err
	}
	if err := syncDir(filepath.Dir(fw.pf.Name())); err != nil {
		return 0, err
	}
	return fw.n + 4, nil
}

func (fw *fileWriter) abort() { _ = fw.pf.Cleanup() }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// readFile reads a data file of the given kind, calling fn for each record
// in order. It returns the header's sequence number. Any defect (short
// file, bad magic, a checksum that does not match, a record that does not
// decode) is a *CorruptError; records already handed to fn are then to be
// discarded by the caller.
func readFile(path string, kind byte, fn func(*Record) error) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, &CorruptError{Path: path, Err: err}
	}
	defer func() { _ = f.Close() }() // read only: a close error loses nothing
	fr := &fileReader{path: path, crc: crc32.NewIEEE(), br: bufio.NewReaderSize(f, 256<<10)}
	if fi, err := f.Stat(); err == nil {
		fr.size = fi.Size()
	}
	fr.r = &crcReader{r: fr.br, crc: fr.crc}
	seq, err := fr.header(kind)
	if err != nil {
		return 0, err
	}
	count, err := fr.records(fn)
	if err != nil {
		return 0, err
	}
	if err := fr.footer(count); err != nil {
		return 0, err
	}
	return seq, nil
}

// fileReader reads one data file for readFile: header, records, footer.
type fileReader struct {
	path string
	size int64 // the file's size (0: unknown)
	crc  hash.Hash32
	br   *bufio.Reader
	r    *crcReader // br, its bytes counted in crc
}

func (fr *fileReader) corrupt(format string, a ...any) error {
	return &CorruptError{Path: fr.path, Err: fmt.Errorf(format, a...)}
}

// header reads the header of a file of the given kind and returns its
// sequence number.
func (fr *fileReader) header(kind byte) (uint64, error) {
	h := make([]byte, len(magic)+9)
	if _, err := io.ReadFull(fr.r, h); err != nil {
		return 0, fr.corrupt("header: %v", short(err))
	}
	if string(h[:len(magic)]) != magic {
		return 0, fr.corrupt("not a relay data file (bad magic)")
	}
	if h[len(magic)] != kind {
		return 0, fr.corrupt("file kind %q, want %q", h[len(magic)], kind)
	}
	return binary.BigEndian.Uint64(h[len(magic)+1:]), nil
}

// records reads the records up to the footer's 0, calling fn for each, and
// returns how many there were.
func (fr *fileReader) records(fn func(*Record) error) (uint64, error) {
	var count uint64
	var buf []byte
	for {
		l, err := binary.ReadUvarint(fr.r)
		if err != nil {
			return 0, fr.corrupt("after %d records: %v", count, short(err))
		}
		if l == 0 {
			return count, nil
		}
		if l > maxField*4 || int64(l) > fr.size { // a damaged length: no buffer larger than the file
			return 0, fr.corrupt("record %d: length %d", count, l)
		}
		if uint64(cap(buf)) < l {
			buf = make([]byte, l)
		}
		buf = buf[:l]
		if _, err := io.ReadFull(fr.r, buf); err != nil {
			return 0, fr.corrupt("record %d: %v", count, short(err))
		}
		rec, err := decodeRecord(buf)
		if err != nil {
			return 0, fr.corrupt("record %d: %v", count, err)
		}
		if err := fn(rec); err != nil {
			return 0, err
		}
		count++
	}
}

// footer reads the rest of the footer and checks it against the count of
// records read and the checksum of every byte before it; nothing may follow.
func (fr *fileReader) footer(count uint64) error {
	n, err := binary.ReadUvarint(fr.r)
	if err != nil {
		return fr.corrupt("footer: %v", short(err))
	}
	if n != count {
		return fr.corrupt("footer counts %d records, file has %d", n, count)
	}
	want := fr.crc.Sum32()
	var c [4]byte
	if _, err := io.ReadFull(fr.br, c[:]); err != nil {
		return fr.corrupt("checksum: %v", short(err))
	}
	if got := binary.BigEndian.Uint32(c[:]); got != want {
		return fr.corrupt("checksum %08x, contents give %08x", got, want)
	}
	if _, err := fr.br.ReadByte(); err != io.EOF {
		return fr.corrupt("bytes after the checksum")
	}
	return nil
}

func short(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file ends early (truncated)")
	}
	return err
}

// crcReader feeds every byte read into crc.
type crcReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	one [1]byte
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.one[0] = b
		c.crc.Write(c.one[:])
	}
	return b, err
}

var typeCodes = []string{TypeNone, TypeString, TypeHash, TypeList, TypeSet, TypeZSet, TypeStream,
	PatchHash, PatchSet, PatchZSet, PatchList, PatchStream}

func typeCode(t string) byte {
	for i, s := range typeCodes {
		if s == t {
			return byte(i)
		}
	}
	panic("embedded: unknown type " + t)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// encodeRecord appends r's bytes: type code, key, expiry (varint ms), then
// by type: the value; the items; members with float64 scores; entries
// (id, fields).
func encodeRecord(b []byte, r *Record) []byte {
	b = append(b, typeCode(r.Type))
	b = appendString(b, r.Key)
	b = binary.AppendVarint(b, r.ExpireAt)
	switch r.Type {
	case TypeString:
		b = appendString(b, r.Str)
	case TypeHash, TypeList, TypeSet, PatchList:
		b = appendStrings(b, r.Items)
	case PatchHash, PatchSet:
		b = appendStrings(b, r.Items)
		b = appendStrings(b, r.Del)
	case TypeZSet, PatchZSet:
		b = binary.AppendUvarint(b, uint64(len(r.Items)))
		for i, m := range r.Items {
			b = appendString(b, m)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.Scores[i]))
		}
		if r.Type == PatchZSet {
			b = appendStrings(b, r.Del)
		}
	case TypeStream, PatchStream:
		if r.Type == PatchStream {
			b = appendString(b, r.FirstID)
		}
		b = binary.AppendUvarint(b, uint64(len(r.Entries)))
		for _, e := range r.Entries {
			b = appendString(b, e.ID)
			b = appendStrings(b, e.Fields)
		}
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) { // every element takes at least one byte
		if d.err == nil {
			d.err = fmt.Errorf("count %d past the record's end", n)
		}
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("string of %d bytes past the record's end", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) strs() []string {
	n := d.count()
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.str())
	}
	return out
}

func decodeRecord(b []byte) (*Record, error) {
	if len(b) == 0 || int(b[0]) >= len(typeCodes) {
		return nil, errors.New("unknown key type")
	}
	r := &Record{Type: typeCodes[b[0]]}
	d := &decoder{b: b[1:]}
	r.Key = d.str()
	r.ExpireAt = d.expiry()
	switch r.Type {
	case TypeString:
		r.Str = d.str()
	case TypeHash, TypeList, TypeSet, PatchList:
		r.Items = d.strs()
	case PatchHash, PatchSet:
		r.Items = d.strs()
		r.Del = d.strs()
	case TypeZSet, PatchZSet:
		d.zset(r)
	case TypeStream, PatchStream:
		d.stream(r)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d bytes left after the record", len(d.b))
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// expiry reads a record's expiry (a varint).
func (d *decoder) expiry() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad expiry")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// zset reads a sorted set's members with their scores, and a patch's
// removed members.
func (d *decoder) zset(r *Record) {
	n := d.count()
	for i := 0; i < n && d.err == nil; i++ {
		r.Items = append(r.Items, d.str())
		if len(d.b) < 8 {
			d.err = errors.New("score past the record's end")
			break
		}
		r.Scores = append(r.Scores, math.Float64frombits(binary.BigEndian.Uint64(d.b)))
		d.b = d.b[8:]
	}
	if r.Type == PatchZSet {
		r.Del = d.strs()
	}
}

// stream reads a patch's first id and a stream's entries.
func (d *decoder) stream(r *Record) {
	if r.Type == PatchStream {
		r.FirstID = d.str()
	}
	n := d.count()
	for i := 0; i < n && d.err == nil; i++ {
		e := StreamEntry{ID: d.str()}
		e.Fields = d.strs()
		r.Entries = append(r.Entries, e)
	}
}
