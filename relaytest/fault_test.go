package relaytest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/store"
)

// ---- fault tests: processes killed mid-turn, Redis restarted under load ----

// relayWorkerProc is a `relay worker` subprocess.
type relayWorkerProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan error
	once   sync.Once
	err    error
}

// wait reaps the process once and returns how it exited.
func (w *relayWorkerProc) wait() error {
	w.once.Do(func() { w.err = <-w.exited })
	return w.err
}

// startRelayWorker starts the real binary as a worker of the relay on rd
// (its folders: rd.Dir, like TestWorkerKilledMidTurn); it is killed when the test ends.
func startRelayWorker(t *testing.T, bin, cfgFile string, rd *Redis, name string) *relayWorkerProc {
	t.Helper()
	w := &relayWorkerProc{out: &syncBuffer{}, exited: make(chan error, 1)}
	w.cmd = exec.Command(bin, "worker", "--redis", rd.URL, "--name", name, "--config", cfgFile)
	w.cmd.Env = append(os.Environ(), "RELAY_KEY_PREFIX="+rd.Prefix, "RELAY_CONFIG=", "RELAY_METRICS_ADDR=", "REDIS_URL=")
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.exited <- w.cmd.Wait() }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		_ = w.wait()
		if t.Failed() {
			t.Logf("relay worker (pid %d) output:\n%s", w.cmd.Process.Pid, w.out.String())
		}
	})
	return w
}

// sessionIdle reports why a session is not idle ("" when idle): a running
// turn, queued turns, a drain flag or a lease left behind.
func sessionIdle(r *Relay, sid string) string { return storeIdle(r.App.Store(), sid) }

// storeIdle is sessionIdle on a store (a relay in another process).
func storeIdle(st *store.Store, sid string) string {
	ctx := context.Background()
	if cur, err := st.CurrentTurn(ctx, sid); err != nil || cur != "" {
		return fmt.Sprintf("current turn %q (%v)", cur, err)
	}
	if q, err := st.QueuedTurns(ctx, sid); err != nil || len(q) > 0 {
		return fmt.Sprintf("queued turns %v (%v)", q, err)
	}
	flags, err := st.DrainFlags(ctx)
	if err != nil {
		return fmt.Sprintf("drain flags: %v", err)
	}
	if id, ok := flags[sid]; ok {
		return fmt.Sprintf("drain flag %q", id)
	}
	if h, err := st.LeaseHolder(ctx, sid); err != nil || h != "" {
		return fmt.Sprintf("lease held by %q (%v)", h, err)
	}
	return ""
}

// waitIdle waits up to d for a session to be idle and returns why it is not ("" when it is).
func waitIdle(r *Relay, sid string, d time.Duration) string {
	var why string
	testwait.Poll(d, 50*time.Millisecond, func() bool { why = sessionIdle(r, sid); return why == "" })
	return why
}

func durStats(ds []time.Duration) (lo, med, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	lo, hi = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		med = s[len(s)/2]
	} else {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return lo, med, hi
}

// TestFaultKillTenTrials: ten times, a `relay worker` process running turns of two
// sessions (each with prompts queued behind) is SIGKILLed mid-turn while the serve
// process stays up. Each time the abandoned turns end as errors saying their worker
// stopped within 30 s (R18.11), every queued prompt runs in order, the sessions take
// new prompts, and no session is left with a running turn, a queue, a drain flag or a lease.
func TestFaultKillTenTrials(t *testing.T) {
	NeedsSharedRedis(t, "a serve and `relay worker` child processes on one Redis")
	if testing.Short() {
		t.Skip("builds the relay binary and kills ten worker processes (~3 min)")
	}
	t.Parallel()
	const trials = 10
	const bound = 30 * time.Second // R18.11
	begin := time.Now()
	bin := builtRelayBinary(t)
	rd := NewRedis(t)
	// The serve process has one worker slot; a blocker turn keeps it busy while the
	// subprocess takes the trial's turns, and is stopped before the kill so the serve
	// process can run the recovery.
	srv := Start(t, Options{Redis: rd, Concurrency: 1})
	srvID := srv.App.Relay().WorkerID()
	blocker := srv.NewSession(map[string]any{"title": "blocker"})
	cfgFile := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(cfgFile, []byte("folders: ["+rd.Dir+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("relay binary built, relay up after %s", time.Since(begin).Round(100*time.Millisecond))

	const queued = 3 // prompts queued behind each abandoned turn
	var (
		recoveries []time.Duration // per trial: kill → the last abandoned turn ended
		allTurns   []time.Duration // every abandoned turn
		sessions   []Session
	)
	for trial := 1; trial <= trials; trial++ {
		trialStart := time.Now()
		bt := srv.Message(blocker.ID, Script(stepSleep(120000), stepReply("blocker")))
		srv.WaitTurn(bt, 30*time.Second, store.TurnRunning)

		w := startRelayWorker(t, bin, cfgFile, rd, srv.Config.Name)

		a := srv.NewSession(map[string]any{"title": fmt.Sprintf("victim %d", trial)})
		b := srv.NewSession(map[string]any{"title": fmt.Sprintf("other %d", trial)})
		sessions = append(sessions, a, b)
		long := map[string]string{}     // session → its long turn
		behind := map[string][]string{} // session → prompts queued behind it
		for _, s := range []Session{a, b} {
			long[s.ID] = srv.Message(s.ID, Script(stepSleep(300000), stepReply("never")))
			for k := 0; k < queued; k++ {
				behind[s.ID] = append(behind[s.ID], srv.Message(s.ID, Script(stepSleep(50), stepReply(fmt.Sprintf("%s-q%d", s.ID, k)))))
			}
		}
		for _, s := range []Session{a, b} {
			srv.WaitTurn(long[s.ID], 30*time.Second, store.TurnRunning) // only the subprocess has free slots
			h, err := srv.App.Store().LeaseHolder(context.Background(), s.ID)
			if err != nil || h == "" || strings.HasPrefix(h, srvID+":") {
				t.Fatalf("trial %d: session %s's lease is %q (%v), want the subprocess's (serve process %s)", trial, s.ID, h, err, srvID)
			}
		}
		// Free the serve process's slot, then kill the subprocess mid-turn.
		var stopped map[string]any
		if st := srv.Owner("POST", "/api/v1/sessions/"+blocker.ID+"/stop", nil, &stopped); st != http.StatusOK {
			t.Fatalf("trial %d: stop blocker: %d %v", trial, st, stopped)
		}
		srv.WaitTurn(bt, 15*time.Second, store.TurnStopped)
		// Kill at a different point of the lease's 5 s renewal cycle in each trial
		// (0.5 s … 5 s into the turn), so the trials sample the whole cycle.
		into := time.Duration(trial) * 500 * time.Millisecond
		started := srv.Turn(long[a.ID]).StartedAt
		// Not a wait for work: the kill point in the cycle is what the trials vary.
		time.Sleep(time.Until(started.Add(into)))
		into = time.Since(started)
		if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := w.wait(); err == nil {
			t.Fatalf("trial %d: relay worker exited cleanly after SIGKILL", trial)
		}
		killed := time.Now()
		for _, s := range []Session{a, b} {
			if st := srv.Turn(long[s.ID]).Status; st != store.TurnRunning {
				t.Fatalf("trial %d: turn of %s is %s right after the kill, want still running", trial, s.ID, st)
			}
		}

		// Both abandoned turns end; recovery = kill → the turn's end.
		took := map[string]time.Duration{}
		testwait.Poll(time.Until(killed.Add(90*time.Second)), 50*time.Millisecond, func() bool {
			for _, s := range []Session{a, b} {
				if _, ok := took[s.ID]; ok {
					continue
				}
				if tr := srv.Turn(long[s.ID]); tr.Status != store.TurnRunning {
					d := time.Since(killed)
					if !tr.EndedAt.IsZero() && tr.EndedAt.After(killed) {
						d = tr.EndedAt.Sub(killed)
					}
					took[s.ID] = d
				}
			}
			return len(took) == 2
		})
		if len(took) < 2 {
			t.Fatalf("trial %d: abandoned turns still running 90 s after the kill (ended: %v)", trial, took)
		}
		worst := max(took[a.ID], took[b.ID])
		recoveries = append(recoveries, worst)
		allTurns = append(allTurns, took[a.ID], took[b.ID])
		for _, s := range []Session{a, b} {
			tr := srv.Turn(long[s.ID])
			if tr.Status != store.TurnError || !strings.Contains(tr.Error, "worker") || !strings.Contains(tr.Error, "stopped") {
				t.Fatalf("trial %d: abandoned turn of %s: %s %q, want an error saying its worker stopped", trial, s.ID, tr.Status, tr.Error)
			}
			if took[s.ID] > bound {
				t.Errorf("trial %d: the abandoned turn of %s ended %s after the kill, want within %s (R18.11)", trial, s.ID, took[s.ID].Round(100*time.Millisecond), bound)
			}
		}

		// Every prompt queued behind runs, in order (0 lost).
		for _, s := range []Session{a, b} {
			prev := srv.Turn(long[s.ID])
			for k, id := range behind[s.ID] {
				tr := srv.WaitTurn(id, 30*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
				if want := fmt.Sprintf("%s-q%d", s.ID, k); tr.Status != store.TurnDone || tr.Reply != want {
					t.Fatalf("trial %d: queued prompt %d of %s: %s %q %q, want done %q", trial, k, s.ID, tr.Status, tr.Reply, tr.Error, want)
				}
				if tr.StartedAt.Before(prev.EndedAt) {
					t.Fatalf("trial %d: queued prompt %d of %s started %s, before the turn ahead of it ended (%s)", trial, k, s.ID, tr.StartedAt, prev.EndedAt)
				}
				prev = tr
			}
		}
		// The sessions take new prompts.
		for _, s := range []Session{a, b} {
			id := srv.Message(s.ID, "after "+strconv.Itoa(trial))
			if tr := waitEnded(srv, id, 30*time.Second); tr.Status != store.TurnDone || tr.Reply != "echo: after "+strconv.Itoa(trial) {
				t.Fatalf("trial %d: new prompt in %s: %s %q %q", trial, s.ID, tr.Status, tr.Reply, tr.Error)
			}
		}
		// 0 sessions stuck.
		for _, s := range []Session{a, b, blocker} {
			if why := waitIdle(srv, s.ID, 10*time.Second); why != "" {
				t.Fatalf("trial %d: session %s (%s) stuck: %s", trial, s.ID, s.Title, why)
			}
		}
		t.Logf("trial %2d: killed %s into the turn; abandoned turns ended %s and %s after the kill (recovery %s); %d queued + 2 new prompts done; trial took %s",
			trial, into.Round(10*time.Millisecond), took[a.ID].Round(10*time.Millisecond), took[b.ID].Round(10*time.Millisecond),
			worst.Round(10*time.Millisecond), 2*queued, time.Since(trialStart).Round(100*time.Millisecond))
	}
	// After all trials every session of every trial is still idle.
	for _, s := range append(sessions, blocker) {
		if why := sessionIdle(srv, s.ID); why != "" {
			t.Errorf("session %s (%s) stuck at the end: %s", s.ID, s.Title, why)
		}
	}
	lo, med, hi := durStats(recoveries)
	alo, amed, ahi := durStats(allTurns)
	t.Logf("recovery over %d trials (kill → last abandoned turn ended): min %s, median %s, max %s (bound %s)",
		len(recoveries), lo.Round(10*time.Millisecond), med.Round(10*time.Millisecond), hi.Round(10*time.Millisecond), bound)
	t.Logf("over all %d abandoned turns: min %s, median %s, max %s; 0 prompts lost, 0 sessions stuck; test took %s",
		len(allTurns), alo.Round(10*time.Millisecond), amed.Round(10*time.Millisecond), ahi.Round(10*time.Millisecond),
		time.Since(begin).Round(time.Second))
}

// ---- Redis stopped and restarted with its append-only file, under load ----

// redisServer is a redis-server subprocess with AOF on one port and folder.
type redisServer struct {
	t    *testing.T
	port int
	dir  string

	child
	out *syncBuffer
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed: %v", err)
	}
	rs := &redisServer{t: t, port: freeLoopbackPort(t), dir: t.TempDir(), out: &syncBuffer{}}
	t.Cleanup(func() {
		rs.kill()
		if t.Failed() {
			t.Logf("redis-server output:\n%s", rs.out.String())
		}
	})
	rs.start()
	return rs
}

func (rs *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", rs.port) }

// start runs redis-server and waits until it answers PING.
func (rs *redisServer) start() {
	rs.t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(rs.port), "--bind", "127.0.0.1",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", rs.dir, "--save", "")
	cmd.Stdout, cmd.Stderr = rs.out, rs.out
	if _, err := rs.run(cmd); err != nil {
		rs.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rs.port), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	Eventually(rs.t, 15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}, "redis-server on port %d to answer", rs.port)
}

// stop ends redis-server with SIGTERM (it writes and syncs its AOF) and waits for it.
func (rs *redisServer) stop() {
	rs.t.Helper()
	if _, _, err := rs.child.stop(15 * time.Second); err != nil { // a SIGTERMed redis-server's exit status is not checked
		rs.t.Fatalf("redis-server: %v", err)
	}
}

// TestFaultRedisRestartWithAOF: a relay under load (20 sessions taking prompts, some
// turns sleeping) loses its Redis (SIGTERM) for 10 s; Redis comes back from its AOF
// (appendfsync always) on the same port and folder. /readyz says 503 while Redis is down
// and 200 after; every prompt the API accepted (2xx with a message id) runs to done,
// in order per session, and prompts that were refused leave nothing.
func TestFaultRedisRestartWithAOF(t *testing.T) {
	NeedsSharedRedis(t, "it stops and restarts its own redis-server")
	if testing.Short() {
		t.Skip("runs its own redis-server and stops it for 10 s")
	}
	t.Parallel()
	begin := time.Now()
	rs := startRedisServer(t)
	rd := &Redis{URL: rs.url(), Prefix: "t" + store.NewID(5), Dir: t.TempDir()}
	r := Start(t, Options{Redis: rd})

	const nSessions = 20
	sessions := make([]Session, nSessions)
	for i := range sessions {
		sessions[i] = r.NewSession(map[string]any{"title": fmt.Sprintf("load %d", i)})
	}
	client := &http.Client{Timeout: 15 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	readyz := func() int {
		resp, err := client.Get(r.URL + "/readyz")
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := readyz(); st != http.StatusOK {
		t.Fatalf("/readyz %d before the outage", st)
	}

	// The load (promptLoad), from before the outage until a few seconds after
	// Redis is back; its phase is 0 before the outage, 1 from its start, 2
	// after Redis answers again.
	var (
		phaseMu sync.Mutex
		phase   int
	)
	getPhase := func() int { phaseMu.Lock(); defer phaseMu.Unlock(); return phase }
	setPhase := func(p int) { phaseMu.Lock(); phase = p; phaseMu.Unlock() }
	load := &promptLoad{sessions: sessions, phase: getPhase,
		post: func(sid, text string) loadPrompt { return postPrompt(client, r.URL, sid, text) }}
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	load.start(3, stopLoad, &wg)
	acceptedIn := load.acceptedIn
	defer func() { // on a failure below, the senders still end
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
		wg.Wait()
	}()

	// Two turns certain to be running when Redis stops: one ends while it is down,
	// one after it is back; a short prompt waits behind each.
	straddle := []struct {
		name  string
		sleep int
		s     Session
		long  string
		after string
	}{{name: "ends during the outage", sleep: 4000}, {name: "ends after the outage", sleep: 14000}}
	Eventually(t, 30*time.Second, func() bool { return acceptedIn[0].Load() >= 2*nSessions }, "%d prompts of the load accepted before the outage", 2*nSessions)
	for i := range straddle {
		x := &straddle[i]
		x.s = r.NewSession(map[string]any{"title": "straddle: " + x.name})
		x.long = r.Message(x.s.ID, Script(stepSleep(x.sleep), stepReply("long done")))
		x.after = r.Message(x.s.ID, "behind the long turn")
	}
	for _, x := range straddle {
		r.WaitTurn(x.long, 5*time.Second, store.TurnRunning)
	}
	setPhase(1)
	down := time.Now()
	rs.stop()
	t.Logf("redis-server stopped (SIGTERM) %s after the load began", time.Since(begin).Round(100*time.Millisecond))
	var readyDuring []int
	// Not a wait for work: the outage lasts 10 s by design, /readyz sampled twice a second.
	for time.Since(down) < 10*time.Second {
		readyDuring = append(readyDuring, readyz())
		time.Sleep(500 * time.Millisecond)
	}
	rs.start()
	up := time.Now()
	setPhase(2)
	Eventually(t, 30*time.Second, func() bool { return readyz() == http.StatusOK }, "/readyz to be 200 after Redis is back")
	readyAfter := time.Since(up)
	for i, st := range readyDuring {
		if st != http.StatusServiceUnavailable {
			t.Errorf("/readyz sample %d while Redis was down: %d, want 503 (all: %v)", i, st, readyDuring)
			break
		}
	}
	// The load goes on after the outage until twice as many prompts as sessions were accepted again.
	Eventually(t, 30*time.Second, func() bool { return acceptedIn[2].Load() >= 2*nSessions }, "%d prompts of the load accepted after the outage", 2*nSessions)
	close(stopLoad)
	wg.Wait()
	loadEnded := time.Now()
	sent := load.sent

	// Count what was sent.
	var accepted, refused, transport [3]int
	for i := range sent {
		for _, p := range sent[i] {
			switch {
			case p.id != "":
				accepted[p.phase]++
			case p.status == 0:
				transport[p.phase]++
			default:
				refused[p.phase]++
			}
		}
	}
	t.Logf("prompts accepted before/during/after the outage: %v, refused (HTTP status ≠ 2xx): %v, transport errors: %v; /readyz 200 again %s after Redis restarted",
		accepted, refused, transport, readyAfter.Round(10*time.Millisecond))
	var lastRefused time.Time
	var refusedAfter []string
	for i := range sent {
		for _, p := range sent[i] {
			if p.id == "" && p.phase == 2 {
				if p.at.After(lastRefused) {
					lastRefused = p.at
				}
				if len(refusedAfter) < 3 {
					refusedAfter = append(refusedAfter, fmt.Sprintf("%d %s", p.status, strings.TrimSpace(p.err)))
				}
			}
		}
	}
	if !lastRefused.IsZero() {
		t.Logf("after Redis answered PING again, prompts were refused until %s after its restart, e.g. %q",
			lastRefused.Sub(up).Round(10*time.Millisecond), refusedAfter)
	}
	if accepted[0] == 0 || accepted[2] == 0 {
		t.Fatalf("the load did not get prompts accepted before and after the outage: %v", accepted)
	}
	for i := range sent {
		for _, p := range sent[i] {
			if p.id == "" && p.status != 0 && p.status < 500 {
				t.Errorf("session %d: prompt refused with %d (want 2xx or 5xx): %s", i, p.status, p.err)
			}
		}
	}

	// Every accepted prompt runs to done, in order per session.
	type pending struct{ sess, k int }
	var waiting []pending
	for i := range sent {
		for k, p := range sent[i] {
			if p.id != "" {
				waiting = append(waiting, pending{i, k})
			}
		}
	}
	ctx := context.Background()
	testwait.Poll(120*time.Second, 200*time.Millisecond, func() bool {
		var still []pending
		for _, w := range waiting {
			tr, err := r.App.Store().GetTurn(ctx, sent[w.sess][w.k].id)
			if err != nil || tr.Status == store.TurnQueued || tr.Status == store.TurnRunning {
				still = append(still, w)
			}
		}
		waiting = still
		return len(waiting) == 0
	})
	if len(waiting) > 0 {
		var lines []string
		for _, w := range waiting {
			id := sent[w.sess][w.k].id
			tr, err := r.App.Store().GetTurn(ctx, id)
			status := "?"
			if err == nil {
				status = string(tr.Status)
			}
			lines = append(lines, fmt.Sprintf("session %d (%s) prompt %d turn %s: %s (%v); session: %s",
				w.sess, sessions[w.sess].ID, w.k, id, status, err, sessionIdle(r, sessions[w.sess].ID)))
		}
		t.Fatalf("%d accepted prompts not ended 120 s after the load stopped:\n%s", len(waiting), strings.Join(lines, "\n"))
	}
	t.Logf("all accepted prompts ended %s after the load stopped", time.Since(loadEnded).Round(100*time.Millisecond))

	bad := 0
	for _, x := range straddle {
		long := waitEnded(r, x.long, 60*time.Second)
		after := waitEnded(r, x.after, 60*time.Second)
		t.Logf("turn running when Redis stopped, %s (session %s, turn %s, sleep %d ms): %s %q error %q; started %s, ended %s (Redis down %s, up %s); the prompt behind it: %s %q",
			x.name, x.s.ID, x.long, x.sleep, long.Status, long.Reply, long.Error, long.StartedAt.Format("15:04:05.000"),
			long.EndedAt.Format("15:04:05.000"), down.Format("15:04:05.000"), up.Format("15:04:05.000"), after.Status, after.Reply)
		if long.Status != store.TurnDone || long.Reply != "long done" {
			bad++
			t.Errorf("the accepted prompt whose turn was running when Redis stopped (%s) ended %s %q (error %q), want done %q",
				x.name, long.Status, long.Reply, long.Error, "long done")
		}
		if after.Status != store.TurnDone || after.Reply != "echo: behind the long turn" {
			bad++
			t.Errorf("the prompt queued behind the turn that %s: %s %q (error %q)", x.name, after.Status, after.Reply, after.Error)
		}
		if why := waitIdle(r, x.s.ID, 30*time.Second); why != "" {
			bad++
			t.Errorf("session %s stuck: %s", x.s.ID, why)
		}
	}
	for i, s := range sessions {
		var prev *store.Turn
		var acceptedTexts []string
		refusedTexts := map[string]bool{}
		// A write Redis ran as it shut down can lose its answer: Redis
		// exits from its cron, after running the command and writing it to
		// the AOF, before it writes the reply. The relay cannot tell such a
		// prompt from one never queued, so one refused as the store
		// stopped answering (REMOTE_RELAY_UNAVAILABLE or no answer) within
		// a second of the SIGTERM may be in the conversation.
		ambiguous := map[string]bool{}
		for k, p := range sent[i] {
			if p.id == "" {
				refusedTexts[p.text] = true
				if p.phase == 1 && p.at.Sub(down) < time.Second && (p.code == "REMOTE_RELAY_UNAVAILABLE" || p.status == 0) {
					ambiguous[p.text] = true
				}
				continue
			}
			acceptedTexts = append(acceptedTexts, p.text)
			tr := r.Turn(p.id)
			want := fmt.Sprintf("s%d-p%d", i, k)
			if tr.Status != store.TurnDone || tr.Reply != want {
				bad++
				t.Errorf("session %d (%s) prompt %d (turn %s, sent in phase %d): %s %q error %q, want done %q",
					i, s.ID, k, p.id, p.phase, tr.Status, tr.Reply, tr.Error, want)
			}
			if prev != nil && tr.StartedAt.Before(prev.EndedAt) {
				bad++
				t.Errorf("session %d prompt %d started %s, before the prompt ahead of it ended (%s)", i, k, tr.StartedAt, prev.EndedAt)
			}
			prev = tr
		}
		// The conversation holds the accepted prompts, in order, and no refused one.
		var users []string
		for _, m := range r.Messages(s.ID, "user") {
			txt, _ := m["text"].(string)
			if refusedTexts[txt] && ambiguous[txt] {
				t.Logf("session %d (%s): a prompt refused as Redis shut down is in the conversation (its answer was lost): %s", i, s.ID, txt)
				continue
			}
			if refusedTexts[txt] {
				bad++
				t.Errorf("session %d (%s): a prompt the API refused is in the conversation: %s", i, s.ID, txt)
				continue
			}
			users = append(users, txt)
		}
		if !slices.Equal(users, acceptedTexts) {
			bad++
			t.Errorf("session %d (%s): the conversation's prompts differ from the accepted ones:\n got %q\nwant %q", i, s.ID, users, acceptedTexts)
		}
		if why := waitIdle(r, s.ID, 30*time.Second); why != "" {
			bad++
			t.Errorf("session %d (%s) stuck: %s", i, s.ID, why)
		}
	}
	if bad == 0 {
		t.Logf("%d accepted prompts in %d sessions all done, in order; 0 lost; test took %s",
			accepted[0]+accepted[1]+accepted[2], nSessions, time.Since(begin).Round(100*time.Millisecond))
	}
}
