package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/embedded"
)

// Row i: the embedded default at rest (R25.4). A real `relay serve` process
// (the binary of -relay-bin, else ./cmd/relay built here) on the embedded
// default, left alone after one session and one answered turn: its process
// CPU over the idle window (utime + stime of /proc/PID/stat) and the data
// files it wrote. Beside it, to tell the embedded server's part from the
// relay's own polling: the same binary on the real Redis (the relay
// process's CPU; redis-server's from INFO, where any client counts), and
// the embedded server alone on the first relay's data directory, in a child
// process of this program with no client (its own loops only: the TTL clock
// before a command and the checkpoint after a write: at rest, none).

type idleRun struct {
	cpu      time.Duration // process CPU over the window
	keys     int64         // keys in the store at the end (embedded: the data directory's)
	segs     uint64        // segment files written in the window
	merges   int           // base file rewrites in the window
	redisCPU time.Duration // redis-server's CPU over the window (real Redis only)
	files    int           // data files in the directory at the end
}

type idleResult struct {
	bin, binNote     string
	sessions         int
	window, settle   time.Duration
	emb, real, alone idleRun
	loadAvg          [2]string
}

// idleEmbeddedMode is the child process of the "embedded server alone" run:
// `bench -embedded-idle DIR` opens DIR, prints "ready" and stays until
// SIGTERM.
const idleEmbeddedMode = "-embedded-idle"

func runEmbeddedIdle(dir string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded-idle:", err)
		os.Exit(1)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
	n, _ := c.DBSize(ctx).Result()
	_ = c.Close()
	fmt.Println("ready", n)
	<-ctx.Done()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "embedded-idle:", err)
		os.Exit(1)
	}
}

// procCPU is a process's CPU time so far (utime + stime, /proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("/proc/PID/stat: too few fields")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// dataSeq is the last segment number a data directory wrote or merged, and
// the base file's identity (its header's number and modification time).
func dataSeq(dir string) (last uint64, base string, files int) {
	if f, err := os.Open(filepath.Join(dir, "base.rdat")); err == nil {
		var h [17]byte
		if _, err := io.ReadFull(f, h[:]); err == nil {
			last = binary.BigEndian.Uint64(h[9:])
		}
		if fi, err := f.Stat(); err == nil {
			base = fmt.Sprint(last, fi.ModTime().UnixNano())
		}
		_ = f.Close()
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".rdat") {
			files++
		}
		if s, ok := strings.CutPrefix(n, "seg-"); ok {
			if seq, err := strconv.ParseUint(strings.TrimSuffix(s, ".rdat"), 10, 64); err == nil {
				last = max(last, seq)
			}
		}
	}
	return last, base, files
}

// redisCPU is redis-server's CPU so far (INFO cpu).
func redisCPU(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	s, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var sum float64
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// idleProc is one child process whose CPU is measured.
type idleProc struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan error
}

// lockedBuffer is a process's output, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startIdleProc(name string, args []string, env []string) (*idleProc, error) {
	p := &idleProc{cmd: exec.Command(name, args...), done: make(chan error, 1)}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

func (p *idleProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		return fmt.Errorf("did not stop within 30 s after SIGTERM (killed: %w)", err)
	}
}

// relayBinary is -relay-bin, else ./cmd/relay built into dir.
func (b *bench) relayBinary(ctx context.Context, dir string) (string, string, error) {
	if b.o.relayBin != "" {
		return b.o.relayBin, "-relay-bin", nil
	}
	bin := filepath.Join(dir, "relay")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/oar/relay/cmd/relay").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("go build ./cmd/relay: %w: %s", err, out)
	}
	return bin, "built from this checkout", nil
}

func (b *bench) runIdle(ctx context.Context) (idleResult, error) {
	res := idleResult{window: time.Duration(b.o.idleSecs) * time.Second, settle: 15 * time.Second, sessions: b.o.idleSessions}
	if b.o.quick {
		res.settle = 5 * time.Second
	}
	res.loadAvg[0] = loadAvg()
	dir, err := os.MkdirTemp("", "relay-bench-idle-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if res.bin, res.binNote, err = b.relayBinary(ctx, dir); err != nil {
		return res, err
	}
	work := filepath.Join(dir, "work")
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "relay.yaml")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return res, err
	}
	yaml := fmt.Sprintf("name: idle\nfolders: [%s]\ndefault_cwd: %s\nsettings:\n  agent_sessions: true\n", work, work)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return res, err
	}
	for _, st := range []int{stEmb, stReal} {
		run, err := b.idleRelay(ctx, res, st, cfg, data)
		if err != nil {
			return res, fmt.Errorf("%s: %w", storeNames[st], err)
		}
		if st == stEmb {
			res.emb = run
		} else {
			res.real = run
		}
	}
	// The embedded server alone, on the data the relay left.
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	p, err := startIdleProc(self, []string{idleEmbeddedMode, data}, os.Environ())
	if err != nil {
		return res, err
	}
	if err := waitFor(ctx, 60*time.Second, func() bool { return strings.Contains(p.out.String(), "ready") }); err != nil {
		_ = p.stop()
		return res, fmt.Errorf("embedded server alone: not ready: %s", p.out.String())
	}
	res.alone, err = b.idleWindow(ctx, p.cmd.Process.Pid, res, data, false)
	if f := strings.Fields(p.out.String()[strings.Index(p.out.String(), "ready"):]); len(f) > 1 {
		res.alone.keys, _ = strconv.ParseInt(f[1], 10, 64)
	}
	if serr := p.stop(); err == nil && serr != nil {
		err = fmt.Errorf("embedded server alone: stop: %w: %s", serr, p.out.String())
	}
	res.loadAvg[1] = loadAvg()
	return res, err
}

// waitFor polls cond every 100 ms for at most d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// idleRelay starts the binary on store st, makes a session and one turn,
// lets it settle, and measures the idle window.
func (b *bench) idleRelay(ctx context.Context, res idleResult, st int, cfg, data string) (idleRun, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return idleRun{}, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	owner := "idle-" + newPrefix() + "-owner-token"
	args := []string{"serve", "--addr", addr, "--config", cfg}
	env := []string{"HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH"), "RELAY_OWNER_TOKEN=" + owner, "RELAY_KEY_PREFIX=" + b.iPrefix}
	if st == stEmb {
		args = append(args, "--data-dir", data)
	} else {
		env = append(env, "REDIS_URL="+b.o.redisURL)
	}
	p, err := startIdleProc(res.bin, args, env)
	if err != nil {
		return idleRun{}, err
	}
	defer func() { _ = p.stop() }()
	base := "http://" + addr
	if err := waitFor(ctx, 60*time.Second, func() bool {
		r, err := b.hc.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	}); err != nil {
		return idleRun{}, fmt.Errorf("not ready: %s", p.out.String())
	}
	call := func(method, path string, body, out any) (int, error) {
		var rd io.Reader
		if body != nil {
			j, _ := json.Marshal(body)
			rd = bytes.NewReader(j)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+owner)
		req.Header.Set("Content-Type", "application/json")
		r, err := b.hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer func() { _ = r.Body.Close() }()
		if out != nil {
			_ = json.NewDecoder(r.Body).Decode(out)
		}
		return r.StatusCode, nil
	}
	var sess struct {
		ID string `json:"id"`
	}
	if code, err := call("POST", "/api/v1/sessions", map[string]any{"title": "at rest"}, &sess); err != nil || code != http.StatusCreated {
		return idleRun{}, fmt.Errorf("create a session: %d %w", code, err)
	}
	if code, err := call("POST", "/api/v1/sessions/"+sess.ID+"/messages", map[string]any{"text": "one turn"}, nil); err != nil || code != http.StatusAccepted {
		return idleRun{}, fmt.Errorf("message: %d %w", code, err)
	}
	if err := waitFor(ctx, 60*time.Second, func() bool {
		var s struct {
			State    string           `json:"state"`
			Messages []map[string]any `json:"messages"`
		}
		if _, err := call("GET", "/api/v1/sessions/"+sess.ID+"?last=10", nil, &s); err != nil {
			return false
		}
		for _, m := range s.Messages {
			if m["role"] == "assistant" {
				return s.State == "idle"
			}
		}
		return false
	}); err != nil {
		return idleRun{}, errors.New("the turn was not answered")
	}
	// The rest of the sessions, 8 at a time.
	errs := make(chan error, 8)
	next := make(chan int)
	go func() {
		defer close(next)
		for i := 1; i < b.o.idleSessions; i++ {
			next <- i
		}
	}()
	for range 8 {
		go func() {
			var err error
			for i := range next {
				if err != nil {
					continue
				}
				var code int
				code, err = call("POST", "/api/v1/sessions", map[string]any{"title": fmt.Sprint("idle ", i)}, nil)
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("create session %d: %d", i, code)
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return idleRun{}, err
	}
	select {
	case <-ctx.Done():
		return idleRun{}, ctx.Err()
	case <-time.After(res.settle):
	}
	return b.idleWindow(ctx, p.cmd.Process.Pid, res, data, st == stReal)
}

// idleWindow measures a process's CPU, and the data directory's files,
// over the window.
func (b *bench) idleWindow(ctx context.Context, pid int, res idleResult, data string, real bool) (idleRun, error) {
	var run idleRun
	c0, err := procCPU(pid)
	if err != nil {
		return run, err
	}
	r0 := redisCPU(ctx, b.rdb)
	s0, base0, _ := dataSeq(data)
	bases := map[string]bool{base0: true}
	for end := time.Now().Add(res.window); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(min(time.Second, time.Until(end))):
		}
		if !real {
			_, base, _ := dataSeq(data)
			bases[base] = true
		}
	}
	c1, err := procCPU(pid)
	if err != nil {
		return run, err
	}
	run.cpu = c1 - c0
	if real {
		run.redisCPU = redisCPU(ctx, b.rdb) - r0
		return run, nil
	}
	s1, _, files := dataSeq(data)
	run.segs, run.merges, run.files = s1-s0, len(bases)-1, files
	return run, nil
}

func (b *bench) tableI(row rowFunc, r idleResult) {
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / r.window.Seconds() }
	perMin := func(n uint64) float64 { return float64(n) * 60 / r.window.Seconds() }
	row("i", "the embedded default at rest: setup",
		fmt.Sprintf("a real `relay serve` process (%s: %s) with %d sessions (one with an answered turn, scripted; %d keys in the embedded store), then left alone %s before an idle window of %s; process CPU = utime + stime of /proc/PID/stat (10 ms ticks) over the window, as %% of one core; files = segment numbers the data directory used in the window (a merge's base file counted apart); load average %s at the start, %s at the end",
			r.binNote, r.bin, r.sessions, r.alone.keys, r.settle, r.window, r.loadAvg[0], r.loadAvg[1]), "", "")
	row("i", "data files written at rest (embedded default)",
		fmt.Sprintf("**%.1f a minute** (%d segment(s), %d merge(s) in %s; %d data file(s) at the end)", perMin(r.emb.segs), r.emb.segs, r.emb.merges, r.window, r.emb.files),
		"0", verdict(r.emb.segs == 0 && r.emb.merges == 0))
	row("i", "relay process CPU at rest (embedded default: miniredis runs in it)",
		fmt.Sprintf("**%.2f%%** of one core (%s in %s)", pct(r.emb.cpu), fms(r.emb.cpu), r.window), "< 0.1%", verdict(pct(r.emb.cpu) < 0.1))
	row("i", "where it goes: the same binary on the real Redis (the relay's own polling, client side), and the embedded server alone (a child process opening the same data directory, no client: its own loops; since issue 36 the TTL clock runs before a command and the checkpoint after a write, so none at rest)",
		fmt.Sprintf("relay process on the real Redis **%.2f%%** (%s; redis-server meanwhile %s, INFO: any client counts) · embedded server alone **%.3f%%** (%s; %d file(s) written) · so miniredis answering the relay's polling (asynq's Lua scripts, a new Lua state per EVALSHA) ≈ %.2f%% (embedded relay − real-Redis relay − server alone)",
			pct(r.real.cpu), fms(r.real.cpu), fms(r.real.redisCPU), pct(r.alone.cpu), fms(r.alone.cpu), r.alone.segs,
			pct(r.emb.cpu-r.real.cpu-r.alone.cpu)), "", "")
}
