package relaytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/redisurl"
	"github.com/redis/go-redis/v9"
)

// SPEC §20 with real processes: `relay serve` on the embedded default (no
// Redis URL), kept in a data directory, stopped and started again (R20.1),
// refusing a damaged file (R20.3) and a second process (R20.2), and moved to
// a real redis-server with `relay export` (R20.4).

// embProc is one `relay serve` subprocess on the embedded default (dataDir)
// or, with redisURL, on a real Redis; started again on the same address.
type embProc struct {
	t        *testing.T
	label    string
	bin      string
	addr     string
	cfg      string
	dataDir  string // --data-dir, for the embedded default
	redisURL string // --redis instead, when set
	flag     string // --owner-token; "" starts without one (the relay generates one on its first start)
	token    string // the owner token calls use: flag, or the generated one read from the log
	api      *Relay // URL and tb only: the owner and MCP clients of the harness
	child
	out *syncBuffer
}

// embConfig is the config file of the tests' processes: agent sessions on,
// no coalescing window (an event message goes as soon as it is released).
func embConfig(t *testing.T, folder string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := fmt.Sprintf("name: desk\nfolders: [%s]\ndefault_cwd: %s\nsettings:\n  agent_sessions: true\ntiming:\n  coalesce: 0s\n", folder, folder)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newEmbProc prepares a process (not started); it is killed when the test ends.
func newEmbProc(t *testing.T, label, cfg, dataDir, redisURL, ownerToken string) *embProc {
	t.Helper()
	addr := freeAddr(t)
	p := &embProc{t: t, label: label, bin: peerRelayBinary(t), addr: addr, cfg: cfg, dataDir: dataDir, redisURL: redisURL,
		flag: ownerToken, token: ownerToken, api: &Relay{tb: t, URL: "http://" + addr}, out: &syncBuffer{}}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- output of %s (%s) ----\n%s", label, addr, p.out.String())
		}
	})
	return p
}

func (p *embProc) args() []string {
	a := []string{"serve", "--addr", p.addr, "--config", p.cfg}
	if p.redisURL != "" {
		a = append(a, "--redis", p.redisURL)
	} else {
		a = append(a, "--data-dir", p.dataDir)
	}
	if p.flag != "" {
		a = append(a, "--owner-token", p.flag)
	}
	return a
}

// start (re)starts the process and waits until it is ready.
func (p *embProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, p.args()...)
	cmd.Env = relayEnv() // no REDIS_URL (CI sets one): --data-dir is the embedded default
	took := runServe(p.t, &p.child, cmd, p.out, p.label, p.api.URL)
	p.t.Logf("%s ready on %s after %s", p.label, p.addr, took.Round(time.Millisecond))
}

// pid is the running process's id.
func (p *embProc) pid() int {
	p.t.Helper()
	cmd := p.running()
	if cmd == nil {
		p.t.Fatalf("%s is not running", p.label)
	}
	return cmd.Process.Pid
}

// stop ends the process with SIGTERM (a clean stop) and requires exit status 0.
func (p *embProc) stop() {
	p.t.Helper()
	ran, exit, err := p.child.stop(30 * time.Second)
	if err != nil || !ran || exit != nil {
		p.t.Fatalf("%s: clean stop: ran %v, exit %v, %v", p.label, ran, exit, err)
	}
}

// crash ends the process with SIGKILL (no last checkpoint) and reaps it.
func (p *embProc) crash() {
	p.t.Helper()
	cmd, exited := p.take()
	if cmd == nil {
		p.t.Fatalf("%s is not running", p.label)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		p.t.Fatalf("%s: after SIGKILL: %v", p.label, err)
	}
}

var ownerTokenLogRe = regexp.MustCompile(`generated an owner token.* owner_token=([0-9a-f]+)`)

// generatedTokens are the owner tokens the process logged as generated, all starts.
func (p *embProc) generatedTokens() []string {
	var out []string
	for _, m := range ownerTokenLogRe.FindAllStringSubmatch(p.out.String(), -1) {
		out = append(out, m[1])
	}
	return out
}

// owner is an owner API call with the process's owner token.
func (p *embProc) owner(method, path string, body, out any) int {
	p.t.Helper()
	return p.api.do(method, path, p.token, body, out)
}

func (p *embProc) newSession(title string) Session {
	p.t.Helper()
	var out map[string]any
	if st := p.owner("POST", "/api/v1/sessions", map[string]any{"title": title}, &out); st != http.StatusCreated {
		p.t.Fatalf("%s: create session: %d %v", p.label, st, out)
	}
	return Session{ID: out["id"].(string), Token: out["token"].(string), Title: out["title"].(string)}
}

func (p *embProc) message(sid, text string) {
	p.t.Helper()
	var out map[string]any
	if st := p.owner("POST", "/api/v1/sessions/"+sid+"/messages", map[string]any{"text": text}, &out); st != http.StatusAccepted {
		p.t.Fatalf("%s: message: %d %v", p.label, st, out)
	}
}

// session is a session's record with its last 1,000 messages.
func (p *embProc) session(sid string) map[string]any {
	p.t.Helper()
	var out map[string]any
	if st := p.owner("GET", "/api/v1/sessions/"+sid+"?last=1000", nil, &out); st != http.StatusOK {
		p.t.Fatalf("%s: GET session %s: %d %v", p.label, sid, st, out)
	}
	return out
}

// messages are a session's messages of one role ("" = all).
func (p *embProc) messages(sid, role string) []map[string]any {
	p.t.Helper()
	var kept []map[string]any
	for _, x := range p.session(sid)["messages"].([]any) {
		if m := x.(map[string]any); role == "" || m["role"] == role {
			kept = append(kept, m)
		}
	}
	return kept
}

// waitMessage waits up to d for a message of role whose text holds frag.
func (p *embProc) waitMessage(sid, role, frag string, d time.Duration) map[string]any {
	p.t.Helper()
	var got map[string]any
	Eventually(p.t, d, func() bool {
		for _, m := range p.messages(sid, role) {
			if strings.Contains(m["text"].(string), frag) {
				got = m
				return true
			}
		}
		return false
	}, "%s: a %s message in %s holding %q", p.label, role, sid, frag)
	return got
}

// say writes as the owner and waits for the scripted agent's echo.
func (p *embProc) say(sid, text string) {
	p.t.Helper()
	p.message(sid, text)
	p.waitMessage(sid, "assistant", "echo: "+text, 60*time.Second)
	Eventually(p.t, 30*time.Second, func() bool { return p.session(sid)["state"] == "idle" }, "%s: session %s to be idle", p.label, sid)
}

// inTurn runs one relay_tool call in a turn of s (a scripted tool step),
// allows the card it asks, and returns the call's result.
func (p *embProc) inTurn(s Session, tool map[string]any) map[string]any {
	p.t.Helper()
	tool["relay"] = "this"
	before := len(p.messages(s.ID, "assistant"))
	p.message(s.ID, Script(stepTool(tool)))
	var card string
	Eventually(p.t, 30*time.Second, func() bool {
		var out struct {
			Cards []map[string]any `json:"cards"`
		}
		p.owner("GET", "/api/v1/cards", nil, &out)
		for _, c := range out.Cards {
			if c["session"] == s.ID {
				card = c["id"].(string)
				return true
			}
		}
		return false
	}, "%s: a card in %s", p.label, s.ID)
	var out map[string]any
	if st := p.owner("POST", "/api/v1/cards/"+card, map[string]any{"decision": "allow"}, &out); st != http.StatusOK {
		p.t.Fatalf("%s: allow %s: %d %v", p.label, card, st, out)
	}
	var reply []map[string]any
	Eventually(p.t, 60*time.Second, func() bool {
		ms := p.messages(s.ID, "assistant")
		if len(ms) <= before {
			return false
		}
		reply = ToolResults(ms[len(ms)-1]["text"].(string))
		return true
	}, "%s: the reply of the turn in %s", p.label, s.ID)
	if len(reply) != 1 || reply[0]["ok"] != true {
		p.t.Fatalf("%s: %v in a turn: %v", p.label, tool, reply)
	}
	Eventually(p.t, 30*time.Second, func() bool { return p.session(s.ID)["state"] == "idle" }, "%s: session %s to be idle", p.label, s.ID)
	return reply[0]
}

// sessionTitles is the owner's list of sessions: id → title.
func (p *embProc) sessionTitles() map[string]string {
	p.t.Helper()
	var out struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if st := p.owner("GET", "/api/v1/sessions?scope=all&limit=1000", nil, &out); st != http.StatusOK {
		p.t.Fatalf("%s: GET /sessions: %d", p.label, st)
	}
	m := map[string]string{}
	for _, s := range out.Sessions {
		m[s["id"].(string)] = s["title"].(string)
	}
	return m
}

// schedules is the owner's list of active schedules by id.
func (p *embProc) schedules() map[string]map[string]any {
	p.t.Helper()
	var out struct {
		Schedules []map[string]any `json:"schedules"`
	}
	if st := p.owner("GET", "/api/v1/schedules", nil, &out); st != http.StatusOK {
		p.t.Fatalf("%s: GET /schedules: %d", p.label, st)
	}
	m := map[string]map[string]any{}
	for _, s := range out.Schedules {
		m[s["id"].(string)] = s
	}
	return m
}

// inbox is the owner's open asks by id.
func (p *embProc) inbox() map[string]map[string]any {
	p.t.Helper()
	var out struct {
		Asks []map[string]any `json:"asks"`
	}
	if st := p.owner("GET", "/api/v1/inbox", nil, &out); st != http.StatusOK {
		p.t.Fatalf("%s: GET /inbox: %d", p.label, st)
	}
	m := map[string]map[string]any{}
	for _, a := range out.Asks {
		m[a["id"].(string)] = a
	}
	return m
}

// subscriptions lists a conversation's subscriptions over MCP, by id.
func embSubscriptions(m *MCP) map[string]map[string]any {
	env := m.MustOK(map[string]any{"action": "list_subscriptions", "relay": "this"})
	out := map[string]map[string]any{}
	for _, x := range env["subscriptions"].([]any) {
		s := x.(map[string]any)
		out[s["id"].(string)] = s
	}
	return out
}

// listedIDs are the session ids a list_sessions result names.
func listedIDs(env map[string]any) []string {
	var ids []string
	list, _ := env["sessions"].([]any)
	for _, x := range list {
		if s, _ := x.(map[string]any); s != nil {
			if id, _ := s["id"].(string); id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func parseTS(t *testing.T, v any, what string) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%s: %v is not an RFC 3339 time", what, v)
	}
	return at
}

// ---- R20.1: a restart keeps every kind of record ----

// TestEmbeddedRestartKeepsEverything: on the embedded default, a relay stopped
// with SIGTERM (nothing lost) or SIGKILL two seconds after the last change
// (at most the last second lost) and started again on the same --data-dir
// still has every kind of record and acts on them: the sessions and their
// conversation, a session token that works on /mcp, the owner token it
// generated, a schedule that fires after the restart, a subscription that
// wakes its watcher, a held digest that arrives at its due time (R8.13), an
// open ask.
func TestEmbeddedRestartKeepsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` processes; waits for a one-minute digest")
	}
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(strings.TrimPrefix(fmt.Sprint(sig), "signal "), func(t *testing.T) {
			t.Parallel()
			embRestart(t, sig)
		})
	}
}

func embRestart(t *testing.T, sig syscall.Signal) {
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := newEmbProc(t, "desk", embConfig(t, folder), dataDir, "", "")
	p.start()
	if !strings.Contains(p.out.String(), "data_dir="+dataDir+" ") {
		t.Fatalf("the start log does not say where the data lives (data_dir=%s)", dataDir)
	}
	gen := p.generatedTokens()
	if len(gen) != 1 {
		t.Fatalf("first start without --owner-token: %d generated owner tokens in the log, want 1", len(gen))
	}
	p.token = gen[0]
	if st := p.api.do("GET", "/api/v1/settings", OwnerToken, nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("another token on the owner API: %d, want 401", st)
	}

	// The digest first: its one minute runs from the subscription (R8.8).
	dw := p.newSession("digest watcher")
	dt := p.newSession("digest target")
	mdw := p.api.Connect(dw.Token, nil)
	digest := p.inTurn(dw, map[string]any{"action": "subscribe", "sessions": []string{dt.ID},
		"events": []string{"turn_end"}, "digest_minutes": 1})["subscription"].(map[string]any)["id"].(string)
	p.say(dt.ID, "held before the restart")
	var held map[string]any
	Eventually(t, 30*time.Second, func() bool {
		held = embSubscriptions(mdw)[digest]
		n, _ := held["heldCount"].(float64)
		return n == 1
	}, "the digest subscription to hold the turn_end")
	due := parseTS(t, held["nextDeliveryAt"], "nextDeliveryAt")

	conv := p.newSession("conversation")
	p.say(conv.ID, "hello before the restart")

	w := p.newSession("watcher")
	watched := p.newSession("watched")
	sub := p.inTurn(w, map[string]any{"action": "subscribe", "sessions": []string{watched.ID},
		"events": []string{"turn_end"}})["subscription"].(map[string]any)["id"].(string)

	asker := p.newSession("asker")
	ask := p.api.Connect(asker.Token, nil).MustOK(map[string]any{"action": "ask", "relay": "this",
		"question": "Which region?", "options": []string{"eu-west", "us-east"}})["question_id"].(string)

	sched := p.newSession("scheduled")
	at := time.Now().Add(25 * time.Second).Truncate(time.Second)
	schID := p.api.Connect(sched.Token, nil).MustOK(map[string]any{"action": "schedule", "relay": "this",
		"text": "wake up after the restart", "title": "After restart", "at": at.Format(time.RFC3339)})["schedule_id"].(string)

	titles := p.sessionTitles() // with the busy session added at a SIGTERM
	if len(titles) != 7 {
		t.Fatalf("%d sessions before the stop, want 7: %v", len(titles), titles)
	}
	convMsgs := p.messages(conv.ID, "")

	var busy Session
	if sig == syscall.SIGKILL {
		// Not a wait for work: R20.1 bounds what a crash loses by time (about
		// the last second), so the crash comes 2 s after the last write.
		time.Sleep(2 * time.Second)
		p.crash()
	} else {
		// A turn runs at the stop: the shutdown hands it back to its queue,
		// writing in the very last moment (kept by the last checkpoint).
		busy = p.newSession("busy at the stop")
		p.message(busy.ID, Script(stepReply("started"), stepSleep(4000), stepReply("finished after the restart")))
		Eventually(t, 30*time.Second, func() bool { return p.session(busy.ID)["inFlight"] == "started" }, "the turn of %s to run", busy.ID)
		titles[busy.ID] = busy.Title
		p.stop()
	}
	p.start()
	back := time.Now()
	if back.After(at) {
		t.Logf("the relay was back %s after the schedule's time: it fires as a missed time (R9.3)", back.Sub(at).Round(time.Millisecond))
	}

	// The owner token: still the generated one, and no new one generated.
	if gen := p.generatedTokens(); len(gen) != 1 {
		t.Fatalf("after the restart: %d generated owner tokens in the log, want 1 (the first start's): %v", len(gen), gen)
	}
	if st := p.owner("GET", "/api/v1/settings", nil, nil); st != http.StatusOK {
		t.Fatalf("the generated owner token after the restart: %d", st)
	}

	// Sessions and the conversation.
	if got := p.sessionTitles(); !mapsEqual(got, titles) {
		t.Fatalf("sessions after the restart:\n got %v\nwant %v", got, titles)
	}
	got := p.messages(conv.ID, "")
	if len(got) != len(convMsgs) || len(got) < 2 {
		t.Fatalf("conversation after the restart: %d messages, want %d: %v", len(got), len(convMsgs), got)
	}
	for i, m := range got {
		if m["id"] != convMsgs[i]["id"] || m["role"] != convMsgs[i]["role"] || m["text"] != convMsgs[i]["text"] {
			t.Fatalf("conversation message %d after the restart: %v, want %v", i, m, convMsgs[i])
		}
	}

	if sig == syscall.SIGTERM {
		// The turn handed back at the stop runs again from its start, once.
		p.waitMessage(busy.ID, "assistant", "finished after the restart", 60*time.Second)
		var replies []string
		for _, m := range p.messages(busy.ID, "") {
			if m["role"] != "user" {
				replies = append(replies, fmt.Sprint(m["role"], ": ", m["text"]))
			}
		}
		if len(replies) != 1 || !strings.HasPrefix(replies[0], "assistant: started") || !strings.HasSuffix(replies[0], "finished after the restart") {
			t.Fatalf("the turn running at the stop, after the restart: %q", replies)
		}
	}

	// The held digest is still held, due when it was (checked at once: it goes at its time).
	if h := embSubscriptions(mdw)[digest]; time.Now().Before(due) &&
		(h == nil || h["heldCount"] != float64(1) || !parseTS(t, h["nextDeliveryAt"], "nextDeliveryAt").Equal(due)) {
		t.Fatalf("the digest subscription after the restart: %v, want 1 held, due %s", h, due)
	}

	// The session token works on /mcp.
	env := p.api.Connect(conv.Token, nil).MustOK(map[string]any{"action": "list_sessions", "relay": "this"})
	if ids := listedIDs(env); !slices.Contains(ids, watched.ID) || !slices.Contains(ids, sched.ID) {
		t.Fatalf("list_sessions with the session token after the restart names %v, want %s and %s among them", ids, watched.ID, sched.ID)
	}

	// The open ask.
	if a := p.inbox()[ask]; a == nil || a["status"] != "pending" || a["session"] != asker.ID {
		t.Fatalf("ask %s after the restart: %v (inbox %v)", ask, a, p.inbox())
	}

	// The subscription is there and wakes its watcher.
	var watching []string
	for _, x := range p.session(w.ID)["watching"].([]any) {
		watching = append(watching, x.(map[string]any)["id"].(string))
	}
	if !slices.Contains(watching, sub) {
		t.Fatalf("the watcher's subscriptions after the restart: %v, want %s", watching, sub)
	}
	p.say(watched.ID, "after the restart")
	p.waitMessage(w.ID, "event", `turn_end (done) "echo: after the restart"`, 60*time.Second)

	// The schedule fires, not before its time.
	if time.Now().Add(2 * time.Second).Before(at) { // (not while it fires)
		if s := p.schedules()[schID]; s == nil || !parseTS(t, s["nextFireAt"], "nextFireAt").Equal(at) {
			t.Fatalf("schedule %s after the restart: %v, want it due at %s", schID, s, at)
		}
	}
	fired := p.waitMessage(sched.ID, "schedule", schID, time.Until(at)+60*time.Second)
	if c := parseTS(t, fired["createdAt"], "schedule message createdAt"); c.Before(at) {
		t.Fatalf("the schedule fired at %s, before its time %s", c, at)
	}
	if n := len(p.messages(sched.ID, "schedule")); n != 1 {
		t.Fatalf("%d schedule messages, want 1", n)
	}

	// The held digest arrives when it was due.
	dm := p.waitMessage(dw.ID, "event", `"echo: held before the restart"`, time.Until(due)+60*time.Second)
	arrived := parseTS(t, dm["createdAt"], "digest createdAt")
	if arrived.Before(due) {
		t.Fatalf("the held digest arrived at %s, before it was due (%s)", arrived, due)
	}
	t.Logf("the held digest arrived %s after it was due", arrived.Sub(due).Round(time.Millisecond))

	// The ask still takes the owner's answer.
	var ans map[string]any
	if st := p.owner("POST", "/api/v1/inbox/"+ask, map[string]any{"choice": "eu-west"}, &ans); st != http.StatusOK || ans["status"] != "answered" {
		t.Fatalf("answer the ask after the restart: %d %v", st, ans)
	}
	p.stop()
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ---- R20.3: a damaged file stops the start and is left as it is ----

// newestDataFile is the data file written last (the highest segment when
// several share an mtime).
func newestDataFile(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.rdat"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.rdat in %s (%v)", dir, err)
	}
	sort.Slice(files, func(i, j int) bool {
		a, _ := os.Stat(files[i])
		b, _ := os.Stat(files[j])
		if !a.ModTime().Equal(b.ModTime()) {
			return a.ModTime().Before(b.ModTime())
		}
		return files[i] < files[j] // base.rdat < seg-…: segments are newer
	})
	return files[len(files)-1]
}

// runRelayOnce runs the binary to its end (at most 60 s) and returns its exit
// code, stdout and stderr.
func runRelayOnce(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = relayEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("relay %v did not end within 60 s\nstderr:\n%s", args, stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("relay %v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// snapshotFiles reads every data file of dir: name → contents.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.rdat"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(f)] = string(b)
	}
	return m
}

// TestEmbeddedCorruptFile: a relay stopped cleanly, then one byte in the
// middle of its newest data file flipped: `relay serve` on that directory
// exits 2 with exactly one line on stderr naming the file and what is wrong,
// and leaves every data file as it was, byte for byte and mtime (R20.3).
func TestEmbeddedCorruptFile(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` processes")
	}
	t.Parallel()
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := embConfig(t, folder)
	p := newEmbProc(t, "desk", cfg, dataDir, "", OwnerToken)
	p.start()
	s := p.newSession("before the damage")
	p.say(s.ID, "some history")
	p.stop()

	file := newestDataFile(t, dataDir)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour).Truncate(time.Second) // an mtime a rewrite could not keep by chance
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, dataDir)
	t.Logf("flipped byte %d of %d in %s", len(b)/2, len(b), filepath.Base(file))

	code, stdout, stderr := runRelayOnce(t, p.bin, "serve", "--addr", freeAddr(t), "--config", cfg,
		"--data-dir", dataDir, "--owner-token-file", ownerTokenFile(t))
	if code != 2 {
		t.Fatalf("relay serve on a damaged file: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want exactly one:\n%s", len(lines), stderr)
	}
	line := lines[0]
	_, why, _ := strings.Cut(line, file)
	if !strings.Contains(line, file) || !strings.Contains(why, "cannot be read: ") || len(strings.TrimSpace(strings.SplitN(why, "cannot be read: ", 2)[1])) == 0 {
		t.Fatalf("the line does not name the file %s and what is wrong: %q", file, line)
	}
	t.Logf("stderr: %s", line)
	if stdout != "" {
		t.Fatalf("stdout: %q, want nothing", stdout)
	}

	after := snapshotFiles(t, dataDir)
	if len(after) != len(before) {
		t.Fatalf("data files after the refused start: %d, want %d", len(after), len(before))
	}
	for name, c := range before {
		if after[name] != c {
			t.Fatalf("data file %s changed by the refused start", name)
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) {
		t.Fatalf("mtime of %s: %s, want %s (untouched)", file, fi.ModTime(), old)
	}
}

// ---- R20.2: one process per data directory ----

// TestEmbeddedSecondProcess: while a relay runs on a data directory, a second
// `relay serve` on it exits non-zero with a line naming the directory and the
// first process's PID; the first goes on serving (R20.2).
func TestEmbeddedSecondProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` processes")
	}
	t.Parallel()
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := embConfig(t, folder)
	p := newEmbProc(t, "first", cfg, dataDir, "", OwnerToken)
	p.start()
	s := p.newSession("first's")

	code, stdout, stderr := runRelayOnce(t, p.bin, "serve", "--addr", freeAddr(t), "--config", cfg,
		"--data-dir", dataDir, "--owner-token-file", ownerTokenFile(t))
	if code == 0 {
		t.Fatalf("a second relay serve on %s exited 0\nstdout:\n%s\nstderr:\n%s", dataDir, stdout, stderr)
	}
	pid := strconv.Itoa(p.pid())
	named := false
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, dataDir) && regexp.MustCompile(`\b`+pid+`\b`).MatchString(l) {
			named = true
			t.Logf("exit %d: %s", code, l)
		}
	}
	if !named {
		t.Fatalf("no line names the directory %s and the process %s:\n%s", dataDir, pid, stderr)
	}

	// The first keeps serving, its data too.
	if st := p.owner("GET", "/readyz", nil, nil); st != http.StatusOK {
		t.Fatalf("/readyz of the first process: %d", st)
	}
	p.say(s.ID, "still here")
	s2 := p.newSession("after the second try")
	p.stop()
	p.start()
	if got := p.sessionTitles(); got[s.ID] != "first's" || got[s2.ID] != "after the second try" {
		t.Fatalf("sessions after a restart: %v", got)
	}
	p.stop()
}

// ---- R20.4: relay export, from the embedded default to a real Redis ----

// redisKeys is every key of a Redis with its type and size, skipping keys
// that expire within a minute (they may be gone on one side and not yet on
// the other).
func redisKeys(t *testing.T, url string) map[string]string {
	t.Helper()
	ru, err := redisurl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	c := ru.NewClient()
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl >= 0 && ttl < time.Minute {
			continue
		}
		out[k] = keyShape(t, ctx, c, k)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pipeLine runs a shell line (bash, pipefail) and returns its combined output.
func pipeLine(t *testing.T, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Env = relayEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	t.Logf("%s\n%s", line, strings.TrimSpace(string(out)))
	return string(out)
}

// TestEmbeddedExportToRedis: the move from the embedded default to a real
// Redis as docs/OPERATIONS.md shows it (R20.4): stop the relay; `relay export
// --data-dir DIR | redis-cli -p PORT --pipe` into an empty redis-server;
// `relay serve --redis redis://127.0.0.1:PORT/0 --owner-token SAME` serves
// the same sessions and conversation, their tokens work on /mcp, the schedule
// is there and fires, the subscription wakes its watcher, the ask is open;
// the generated owner token travels with the data (a start without the flag
// takes it). Then `relay export --redis URL` of that Redis loads into another
// empty one with the same keys (a backup). While a relay runs on the
// directory, `relay export --data-dir` refuses, naming its process (R20.2).
func TestEmbeddedExportToRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` and redis-server processes")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed: %v", err)
	}
	t.Parallel()
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := embConfig(t, folder)
	emb := newEmbProc(t, "embedded", cfg, dataDir, "", "")
	emb.start()
	gen := emb.generatedTokens()
	if len(gen) != 1 {
		t.Fatalf("%d generated owner tokens in the log, want 1", len(gen))
	}
	emb.token = gen[0]
	a := emb.newSession("conversation")
	emb.say(a.ID, "hello on the embedded store")
	b := emb.newSession("other")
	mb := emb.api.Connect(b.Token, nil)
	at := time.Now().Add(30 * time.Second).Truncate(time.Second)
	schID := mb.MustOK(map[string]any{"action": "schedule", "relay": "this",
		"text": "fire on redis", "title": "Moved", "at": at.Format(time.RFC3339)})["schedule_id"].(string)
	ask := mb.MustOK(map[string]any{"action": "ask", "relay": "this", "question": "Move to Redis?", "options": []string{"yes", "no"}})["question_id"].(string)
	w := emb.newSession("watcher")
	sub := emb.inTurn(w, map[string]any{"action": "subscribe", "sessions": []string{a.ID}, "events": []string{"turn_end"}})["subscription"].(map[string]any)["id"].(string)
	titles := emb.sessionTitles()
	msgs := emb.messages(a.ID, "")
	scheds := emb.schedules()
	if scheds[schID] == nil {
		t.Fatalf("schedule %s not listed: %v", schID, scheds)
	}

	// Not while a relay runs on the directory.
	code, stdout, stderr := runRelayOnce(t, emb.bin, "export", "--data-dir", dataDir)
	if pid := strconv.Itoa(emb.pid()); code == 0 || stdout != "" || !strings.Contains(stderr, dataDir) || !strings.Contains(stderr, "process "+pid) {
		t.Fatalf("relay export of a directory in use by %s: exit %d, %d bytes on stdout, stderr %q; want non-zero, nothing, a line naming the directory and the process",
			pid, code, len(stdout), stderr)
	}

	rs := startRedisServer(t)
	// The three commands.
	emb.stop()
	pipeLine(t, fmt.Sprintf("%s export --data-dir %s | redis-cli -p %d --pipe", emb.bin, dataDir, rs.port))
	moved := newEmbProc(t, "redis", cfg, "", rs.url(), emb.token)
	moved.start()

	if got := moved.sessionTitles(); !mapsEqual(got, titles) {
		t.Fatalf("sessions on Redis:\n got %v\nwant %v", got, titles)
	}
	got := moved.messages(a.ID, "")
	if len(got) != len(msgs) {
		t.Fatalf("conversation on Redis: %v, want %v", got, msgs)
	}
	for i := range got {
		if got[i]["id"] != msgs[i]["id"] || got[i]["text"] != msgs[i]["text"] {
			t.Fatalf("conversation message %d on Redis: %v, want %v", i, got[i], msgs[i])
		}
	}
	env := moved.api.Connect(a.Token, nil).MustOK(map[string]any{"action": "list_sessions", "relay": "this"})
	if ids := listedIDs(env); !slices.Contains(ids, b.ID) || !slices.Contains(ids, w.ID) {
		t.Fatalf("list_sessions with the moved session token names %v, want %s and %s", ids, b.ID, w.ID)
	}
	if q := moved.inbox()[ask]; q == nil || q["status"] != "pending" {
		t.Fatalf("ask %s on Redis: %v", ask, moved.inbox())
	}
	if time.Now().Add(2 * time.Second).Before(at) { // (not while it fires)
		if s := moved.schedules()[schID]; s == nil || s["nextFireAt"] != scheds[schID]["nextFireAt"] {
			t.Fatalf("schedule %s on Redis: %v, want %v", schID, s, scheds[schID])
		}
	}
	moved.say(a.ID, "hello on redis")
	ev := moved.waitMessage(w.ID, "event", `turn_end (done) "echo: hello on redis"`, 60*time.Second)
	if !strings.Contains(ev["text"].(string), a.ID[:8]) {
		t.Fatalf("subscription %s's event on Redis: %v", sub, ev)
	}
	moved.waitMessage(b.ID, "schedule", schID, time.Until(at)+60*time.Second)
	moved.stop()
	// The generated owner token is in the data: a start without the flag takes it.
	moved.flag = ""
	moved.start()
	if n := len(moved.generatedTokens()); n != 0 {
		t.Fatalf("the relay on Redis generated %d owner tokens, want none (the moved one is kept)", n)
	}
	if st := moved.owner("GET", "/api/v1/settings", nil, nil); st != http.StatusOK {
		t.Fatalf("the moved generated owner token: %d", st)
	}
	moved.stop()

	// A backup of that Redis loads into another empty one with the same keys.
	dump := filepath.Join(t.TempDir(), "backup.resp")
	pipeLine(t, fmt.Sprintf("%s export --redis %s > %s", emb.bin, rs.url(), dump))
	rs2 := startRedisServer(t)
	pipeLine(t, fmt.Sprintf("redis-cli -p %d --pipe < %s", rs2.port, dump))
	k1, k2 := redisKeys(t, rs.url()), redisKeys(t, rs2.url())
	if len(k1) < 10 {
		t.Fatalf("only %d keys in the relay's Redis: %v", len(k1), k1)
	}
	if !mapsEqual(k1, k2) {
		var diff []string
		for k, v := range k1 {
			if k2[k] != v {
				diff = append(diff, fmt.Sprintf("%s: %s vs %q", k, v, k2[k]))
			}
		}
		for k, v := range k2 {
			if _, ok := k1[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: missing vs %s", k, v))
			}
		}
		sort.Strings(diff)
		t.Fatalf("the backup differs from its Redis (%d vs %d keys):\n%s", len(k1), len(k2), strings.Join(diff, "\n"))
	}
	t.Logf("backup: %d keys alike", len(k1))
}

// ownerTokenFile writes OwnerToken to a file of the test's own, for
// --owner-token-file: a token given as --owner-token logs a WARNING on
// stderr (R18.36), which tests that count stderr's lines do not expect.
func ownerTokenFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "owner-token")
	if err := os.WriteFile(f, []byte(OwnerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// keyShape is a key's type and size: "TYPE/N", N the elements of a list,
// set, zset, stream or hash, the bytes of a string.
func keyShape(t *testing.T, ctx context.Context, c redis.Cmdable, k string) string {
	t.Helper()
	typ, err := c.Type(ctx, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	switch typ {
	case "string":
		n, err = c.StrLen(ctx, k).Result()
	case "hash":
		n, err = c.HLen(ctx, k).Result()
	case "list":
		n, err = c.LLen(ctx, k).Result()
	case "set":
		n, err = c.SCard(ctx, k).Result()
	case "zset":
		n, err = c.ZCard(ctx, k).Result()
	case "stream":
		n, err = c.XLen(ctx, k).Result()
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s/%d", typ, n)
}
