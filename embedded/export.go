package embedded

import (
	"context"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
)

// Export writes every key of the database c reaches as RESP commands that
// recreate it in an empty Redis (R20.4), and returns how many keys it wrote.
// Keys are read in batches, each at one point in time; on a database that
// changes meanwhile the batches are of different moments (stop the relay
// first for an exact copy; the embedded store's data directory cannot be
// exported while a relay runs on it).
func Export(ctx context.Context, c redis.Cmdable, w io.Writer) (int, error) {
	n := 0
	var pending []string
	flush := func(keys []string) error {
		for len(keys) > 0 {
			recs, retry, err := ReadKeys(ctx, c, keys)
			if err != nil {
				return err
			}
			now := time.Now()
			for _, r := range recs {
				cmds := r.Commands(now)
				if len(cmds) > 0 {
					n++
				}
				for _, cmd := range cmds {
					if err := WriteRESP(w, cmd); err != nil {
						return err
					}
				}
			}
			keys = retry // a key whose type changed while read: read it again
		}
		return nil
	}
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
		err := flush(pending)
		pending = pending[:0]
		return err
	})
	if err == nil {
		err = flush(pending)
	}
	return n, err
}
