package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// rtCounter is a go-redis hook that counts round trips (one per command or
// pipeline sent) of the client it is added to and, while recording, keeps
// how long each took (from the caller's view: pool, write, wait, read).
type rtCounter struct {
	n  atomic.Int64
	on atomic.Bool

	mu  sync.Mutex
	lat []time.Duration

	callers   atomic.Bool    // also count round trips by calling site (-rtcallers)
	bySite    map[string]int // "func (file:line)" of the first frame in the relay's packages or asynq
	siteCount int
}

// site names the first caller in the relay's own packages (or asynq's),
// past the store and the waker's go-redis hook.
func site() string {
	pcs := make([]uintptr, 40)
	n := runtime.Callers(4, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "github.com/oar/relay/") && !strings.Contains(f.Function, "/relay/store.") &&
			!strings.Contains(f.Function, "/relay/worker.(*Waker)") ||
			strings.Contains(f.Function, "github.com/hibiken/asynq.") {
			return fmt.Sprintf("%s (%s:%d)", strings.TrimPrefix(f.Function, "github.com/"), filepath.Base(f.File), f.Line)
		}
		if !more {
			return "?"
		}
	}
}

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rtCounter) observe(t0 time.Time) {
	c.n.Add(1)
	if c.on.Load() {
		d := time.Since(t0)
		where := ""
		if c.callers.Load() {
			where = site()
		}
		c.mu.Lock()
		if len(c.lat) < 1<<20 {
			c.lat = append(c.lat, d)
		}
		if where != "" {
			if c.bySite == nil {
				c.bySite = map[string]int{}
			}
			c.bySite[where]++
			c.siteCount++
		}
		c.mu.Unlock()
	}
}

// sites returns the round trips by calling site, most first.
func (c *rtCounter) sites() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, v := range c.bySite {
		out = append(out, fmt.Sprintf("%7d %s", v, k))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t0 := time.Now()
		err := next(ctx, cmd)
		c.observe(t0)
		return err
	}
}

func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t0 := time.Now()
		err := next(ctx, cmds)
		c.observe(t0)
		return err
	}
}

// record starts keeping round-trip times; the returned func stops and returns them.
func (c *rtCounter) record() func() dist {
	c.mu.Lock()
	c.lat = c.lat[:0]
	c.mu.Unlock()
	c.on.Store(true)
	return func() dist {
		c.on.Store(false)
		c.mu.Lock()
		defer c.mu.Unlock()
		return newDist(c.lat)
	}
}

// snapshot is what the meter reads at a phase's start and end.
type snapshot struct {
	rts      int64         // round trips of the counted client
	cmds     int64         // Redis total_commands_processed (includes commands run inside Lua)
	procCPU  time.Duration // this process (the relay, the bare servers; with -inproc the clients too), user + system
	redisCPU time.Duration // redis-server, user + system
	waits    int64         // times the counted client waited for a pool connection
	waitTime time.Duration // and how long in all
	machBusy time.Duration // CPU time all processes of the machine used (/proc/stat)
	wall     time.Duration // monotonic time of the snapshot
}

// machineBusy reads the machine's busy CPU time (all CPUs) from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 7 { // steal and guest time is counted in user already / not ours
			break
		}
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond // USER_HZ = 100
}

var monoStart = time.Now()

func takeSnapshot(ctx context.Context, rdb redis.UniversalClient, c *rtCounter, client redis.UniversalClient) snapshot {
	var s snapshot
	s.machBusy, s.wall = machineBusy(), time.Since(monoStart)
	if c != nil {
		s.rts = c.n.Load()
	}
	if client != nil {
		ps := client.PoolStats()
		s.waits, s.waitTime = int64(ps.WaitCount), time.Duration(ps.WaitDurationNs)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.procCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	info, err := rdb.Info(ctx, "stats", "cpu").Result()
	if err != nil {
		return s
	}
	var user, sys float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			s.cmds, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_user":
			user, _ = strconv.ParseFloat(v, 64)
		case "used_cpu_sys":
			sys, _ = strconv.ParseFloat(v, 64)
		}
	}
	s.redisCPU = time.Duration((user + sys) * float64(time.Second))
	return s
}

func (s snapshot) sub(a snapshot) snapshot {
	return snapshot{rts: s.rts - a.rts, cmds: s.cmds - a.cmds, procCPU: s.procCPU - a.procCPU, redisCPU: s.redisCPU - a.redisCPU,
		waits: s.waits - a.waits, waitTime: s.waitTime - a.waitTime, machBusy: s.machBusy - a.machBusy, wall: s.wall - a.wall}
}

func (s snapshot) add(a snapshot) snapshot {
	return snapshot{rts: s.rts + a.rts, cmds: s.cmds + a.cmds, procCPU: s.procCPU + a.procCPU, redisCPU: s.redisCPU + a.redisCPU,
		waits: s.waits + a.waits, waitTime: s.waitTime + a.waitTime, machBusy: s.machBusy + a.machBusy, wall: s.wall + a.wall}
}

// meter takes snapshots of one Redis server and one counted client.
type meter struct {
	rdb    redis.UniversalClient // INFO is read here
	rt     *rtCounter            // round trips of the counted client
	client redis.UniversalClient // the counted client (pool stats)
}

func (m meter) snap(ctx context.Context) snapshot { return takeSnapshot(ctx, m.rdb, m.rt, m.client) }

// perOp is the cost of one operation between two snapshots.
type perOp struct {
	rts, cmds         float64
	procCPU, redisCPU time.Duration
	clientCPU         time.Duration // the driver child's, when the clients ran there
	waits             float64
	waitTime          time.Duration
}

// load says how busy the machine was over a phase (a snapshot difference),
// in CPUs, and how much of it this run's processes were (client is the
// driver child's CPU).
func (s snapshot) load(client time.Duration) string {
	if s.wall <= 0 {
		return "?"
	}
	all := s.machBusy.Seconds() / s.wall.Seconds()
	ours := (s.procCPU + s.redisCPU + client).Seconds() / s.wall.Seconds()
	return fmt.Sprintf("%.2f of %d CPUs busy, %.2f of them this run (relay process, clients, Redis)", all, runtime.NumCPU(), ours)
}

// per divides a phase's cost (a snapshot difference) by its n operations.
func (s snapshot) per(n int) perOp {
	if n <= 0 {
		return perOp{}
	}
	f := float64(n)
	return perOp{rts: float64(s.rts) / f, cmds: float64(s.cmds) / f,
		procCPU: time.Duration(float64(s.procCPU) / f), redisCPU: time.Duration(float64(s.redisCPU) / f),
		waits: float64(s.waits) / f, waitTime: time.Duration(float64(s.waitTime) / f)}
}

// withClient adds the clients' CPU (measured in the driver child) over n operations.
func (p perOp) withClient(d time.Duration, n int) perOp {
	if n > 0 {
		p.clientCPU = d / time.Duration(n)
	}
	return p
}

func (p perOp) String() string {
	cpu := fmt.Sprintf("CPU %s relay process", fms(p.procCPU))
	if p.clientCPU > 0 {
		cpu += fmt.Sprintf(" + %s MCP clients", fms(p.clientCPU))
	}
	out := fmt.Sprintf("%.1f Redis round trips · %.1f Redis commands · %s + %s Redis",
		p.rts, p.cmds, cpu, fms(p.redisCPU))
	if p.waits > 0 {
		out += fmt.Sprintf(" · %.2f pool waits (%s)", p.waits, fms(p.waitTime))
	}
	return out
}
