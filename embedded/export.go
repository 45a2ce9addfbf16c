package embedded

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Export writes every key of the database c reaches as RESP commands that
// recreate it in an empty Redis (R20.4), and returns how many keys it wrote.
// Each key is written whole after a DEL of it (R25.5): loading the output
// twice, or into a Redis that has an older copy, leaves each key as exported
// (a list or a stream is not appended to what is there).
// Keys are read in batches, each at one point in time; on a database that
// changes meanwhile the batches are of different moments (stop the relay
// first for an exact copy; the embedded store's data directory cannot be
// exported while a relay runs on it).
func Export(ctx context.Context, c redis.Cmdable, w io.Writer) (int, error) {
	return export(ctx, c, w, false)
}

// ExportNode is Export on one master of a Redis Cluster: a batch is read in
// one MULTI per hash slot (a MULTI may not span slots), keys grouped by
// their hash tag.
func ExportNode(ctx context.Context, c redis.Cmdable, w io.Writer) (int, error) {
	return export(ctx, c, w, true)
}

// hashTag is what Redis Cluster hashes of key: between the first "{" and the
// first "}" after it when that is not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func export(ctx context.Context, c redis.Cmdable, w io.Writer, bySlot bool) (int, error) {
	x := &exporter{ctx: ctx, c: c, w: w, bySlot: bySlot}
	var pending []string
	seen := map[string]bool{} // SCAN may name a key twice; a list written twice would double
	err := ScanKeys(ctx, c, 1000, func(keys []string) error {
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				pending = append(pending, k)
			}
		}
		if len(pending) < 1000 {
			return nil
		}
		err := x.batch(pending)
		pending = pending[:0]
		return err
	})
	if err == nil {
		err = x.batch(pending)
	}
	return x.n, err
}

// exporter writes batches of keys for export.
type exporter struct {
	ctx    context.Context
	c      redis.Cmdable
	w      io.Writer
	bySlot bool // a MULTI per hash tag (ExportNode)
	n      int  // keys written
}

// batch reads keys and writes them: in one MULTI, or one per hash tag in
// the order the tags first come.
func (x *exporter) batch(keys []string) error {
	if !x.bySlot {
		return x.read(keys)
	}
	groups := map[string][]string{}
	var order []string
	for _, k := range keys {
		t := hashTag(k)
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], k)
	}
	for _, t := range order {
		if err := x.read(groups[t]); err != nil {
			return err
		}
	}
	return nil
}

// read reads keys at one point in time and writes them, again until no key
// changed its type while read.
func (x *exporter) read(keys []string) error {
	for len(keys) > 0 {
		recs, retry, err := ReadKeys(x.ctx, x.c, keys)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, r := range recs {
			if err := x.write(r, now); err != nil {
				return err
			}
		}
		keys = retry // a key whose type changed while read: read it again
	}
	return nil
}

// write writes one key's DEL and the commands that recreate it as of now
// (nothing for a key with none: expired meanwhile).
func (x *exporter) write(r *Record, now time.Time) error {
	cmds := r.Commands(now)
	if len(cmds) == 0 {
		return nil
	}
	x.n++
	if err := WriteRESP(x.w, []string{"DEL", r.Key}); err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := WriteRESP(x.w, cmd); err != nil {
			return err
		}
	}
	return nil
}
