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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// Paired relays as real `relay serve` processes (§4.3–4.10, R8.20–R8.21,
// §13), driven through the owner API over loopback HTTP. Each relay has its
// own key prefix on the test Redis; the two processes of one relay share one.

// peerRelayBinary builds ./cmd/relay once for the peer process tests.
func peerRelayBinary(t *testing.T) string {
	t.Helper()
	return buildBinary(t, "github.com/oar/relay/cmd/relay")
}

// freeAddr picks a free loopback port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// peerProc is one `relay serve` process.
type peerProc struct {
	t     *testing.T
	label string // bravo1, bravo2, … (the relay's name is in the config)
	bin   string
	rd    *Redis
	addr  string
	cfg   string
	name  string
	api   *Relay // the owner API client (URL and tb only: no in-process app)
	st    *store.Store
	child
	out *syncBuffer
	env []string // more environment of the process (the traces test's OTEL_*)
}

// startPeerProc starts `relay serve` named name on rd with timing (YAML lines
// under timing:) and stops it when the test ends.
func startPeerProc(t *testing.T, label, name string, rd *Redis, timing string) *peerProc {
	t.Helper()
	return startPeerProcWith(t, label, name, rd, timing, "", nil)
}

// startPeerProcWith is startPeerProc with more YAML (top-level lines after
// timing's) and more environment.
func startPeerProcWith(t *testing.T, label, name string, rd *Redis, timing, more string, env []string) *peerProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), label+".yaml")
	yaml := fmt.Sprintf("name: %s\nfolders: [%s]\ndefault_cwd: %s\nsettings:\n  agent_sessions: true\n", name, rd.Dir, rd.Dir)
	if timing != "" {
		yaml += "timing:\n" + timing
	}
	yaml += more
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ru, err := redisurl.Parse(rd.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := ru.NewClient()
	addr := freeAddr(t)
	p := &peerProc{t: t, label: label, bin: peerRelayBinary(t), rd: rd, addr: addr, cfg: cfg, name: name,
		api: &Relay{tb: t, URL: "http://" + addr}, st: store.New(rdb, rd.Prefix), out: &syncBuffer{}, env: env}
	t.Cleanup(func() {
		p.kill()
		_ = rdb.Close()
		if t.Failed() {
			t.Logf("---- output of %s (%s) ----\n%s", label, addr, p.out.String())
		}
	})
	p.start()
	return p
}

// start (re)starts the process on its address and waits until it is ready.
func (p *peerProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, "serve", "--addr", p.addr, "--redis", p.rd.URL, "--owner-token", OwnerToken,
		"--config", p.cfg, "--log-level", "debug")
	cmd.Env = relayEnv(append([]string{"RELAY_KEY_PREFIX=" + p.rd.Prefix}, p.env...)...)
	took := runServe(p.t, &p.child, cmd, p.out, p.label, p.api.URL)
	p.t.Logf("%s (relay %q) ready on %s after %s", p.label, p.name, p.addr, took.Round(time.Millisecond))
}

// relayEnv is the test's environment without RELAY_* and REDIS_URL (a relay
// subprocess gets only the settings its test gives it), plus extra.
func relayEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RELAY_") || strings.HasPrefix(kv, "REDIS_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runServe starts cmd, a `relay serve` whose API is at url, as c's process
// (its output, after a start marker, into out) and waits until /readyz
// answers 200; the test fails if it exits first or is not ready in 20 s.
// It returns how long the start took.
func runServe(t *testing.T, c *child, cmd *exec.Cmd, out *syncBuffer, label, url string) time.Duration {
	t.Helper()
	begin := time.Now()
	fmt.Fprintf(out, "==== %s start %s ====\n", label, time.Now().Format("15:04:05.000"))
	cmd.Stdout, cmd.Stderr = out, out
	exited, err := c.run(cmd)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited at start: %v\n%s", label, err, out.String())
		default:
		}
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "%s not ready within 20 s", label)
	return time.Since(begin)
}

// stop ends the process with SIGTERM and waits for it.
func (p *peerProc) stop() {
	p.t.Helper()
	begin := time.Now()
	ran, exit, err := p.child.stop(20 * time.Second)
	if err != nil {
		p.t.Fatalf("%s: %v", p.label, err)
	}
	if ran {
		p.t.Logf("%s stopped (SIGTERM) after %s: %v", p.label, time.Since(begin).Round(time.Millisecond), exit)
	}
}

func (p *peerProc) signal(sig syscall.Signal) {
	p.t.Helper()
	cmd := p.running()
	if cmd == nil {
		p.t.Fatalf("%s is not running", p.label)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peerProc) turn(id string) *store.Turn {
	p.t.Helper()
	tr, err := p.st.GetTurn(context.Background(), id)
	if err != nil {
		p.t.Fatalf("%s: turn %s: %v", p.label, id, err)
	}
	return tr
}

// waitTurn waits until a turn reaches one of the statuses.
func (p *peerProc) waitTurn(id string, d time.Duration, statuses ...store.TurnStatus) *store.Turn {
	p.t.Helper()
	return waitTurnStatus(p.t, d, p.turn, p.label+": ", id, statuses)
}

// waitDone waits for a turn to end and fails unless it is done.
func (p *peerProc) waitDone(id string, d time.Duration) *store.Turn {
	p.t.Helper()
	tr := p.waitTurn(id, d, store.TurnDone, store.TurnError, store.TurnStopped)
	if tr.Status != store.TurnDone {
		p.t.Fatalf("%s: turn %s ended %s: %s", p.label, id, tr.Status, tr.Error)
	}
	return tr
}

// say writes as the owner in a session and waits for the turn to end.
func (p *peerProc) say(s Session, text string) *store.Turn {
	p.t.Helper()
	return p.waitDone(p.api.Message(s.ID, text), 30*time.Second)
}

// tool runs one relay_tool call in a turn of s (a scripted step) and returns
// its result; with a decision, the call's card is awaited and answered.
func (p *peerProc) tool(s Session, args map[string]any, decision string) map[string]any {
	p.t.Helper()
	mid := p.api.Message(s.ID, masked(Script(stepTool(args))))
	if decision != "" {
		card := p.api.WaitCard(s.ID)
		p.t.Logf("%s: card %s for %v: %v", p.label, card["id"], card["action"], card["lines"])
		p.api.Decide(card["id"].(string), decision)
	}
	tr := p.waitDone(mid, 60*time.Second)
	res := ToolResults(tr.Reply)
	if len(res) != 1 {
		p.t.Fatalf("%s: reply holds %d tool results, want 1: %q", p.label, len(res), tr.Reply)
	}
	return res[0]
}

func (p *peerProc) relays() []map[string]any {
	p.t.Helper()
	var out struct {
		Relays []map[string]any `json:"relays"`
	}
	if st := p.api.Owner("GET", "/api/v1/relays", nil, &out); st != http.StatusOK {
		p.t.Fatalf("%s: GET /relays: %d", p.label, st)
	}
	return out.Relays
}

// pairProcs pairs from with to (a peer token made on to, POST /relays on from).
func pairProcs(t *testing.T, from, to *peerProc) map[string]any {
	t.Helper()
	var tok map[string]any
	if st := to.api.Owner("POST", "/api/v1/peer-tokens", map[string]any{"label": from.name}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token on %s: %d %v", to.label, st, tok)
	}
	var p map[string]any
	if st := from.api.Owner("POST", "/api/v1/relays", map[string]any{"url": to.api.URL, "token": tok["token"]}, &p); st != http.StatusCreated {
		t.Fatalf("pair %s → %s: %d %v", from.label, to.label, st, p)
	}
	if p["name"] != to.name || p["online"] != true || p["permission"] != "full" {
		t.Fatalf("pairing %s → %s: %v", from.label, to.label, p)
	}
	return p
}

// relayEntry finds a relay in a list_relays result.
func relayEntry(t *testing.T, res map[string]any, name string) map[string]any {
	t.Helper()
	if res["ok"] != true {
		t.Fatalf("list_relays: %v", res)
	}
	list, _ := res["relays"].([]any)
	for _, x := range list {
		if m, _ := x.(map[string]any); m != nil && m["name"] == name {
			return m
		}
	}
	t.Fatalf("list_relays has no %q: %v", name, res)
	return nil
}

// replyResults are the tool results inside the reply a send returned.
func replyResults(t *testing.T, res map[string]any) []map[string]any {
	t.Helper()
	rp, _ := res["reply"].(map[string]any)
	txt, _ := rp["text"].(string)
	if txt == "" {
		t.Fatalf("send result has no reply text: %v", res)
	}
	return ToolResults(txt)
}

func TestPeerProcessesSendAndList(t *testing.T) {
	NeedsSharedRedis(t, "it reads each `relay serve` child's Redis itself")
	t.Parallel()
	begin := time.Now()
	alpha := startPeerProc(t, "alpha", "alpha", NewRedis(t), "")
	bravo := startPeerProc(t, "bravo", "bravo", NewRedis(t), "")
	pairProcs(t, alpha, bravo)

	sa := alpha.api.NewSession(map[string]any{"title": "caller"})
	sb := bravo.api.NewSession(map[string]any{"title": "target"})

	// list_relays: bravo online, full, locked until the owner mentions it.
	res := alpha.tool(sa, map[string]any{"action": "list_relays"}, "")
	b := relayEntry(t, res, "bravo")
	if b["online"] != true || b["permission"] != "full" || b["unlocked"] != false {
		t.Fatalf("bravo before the mention: %v", b)
	}
	locked := alpha.tool(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "too early", "wait_seconds": 5}, "")
	if locked["code"] != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("send to a locked relay: %v", locked)
	}
	alpha.say(sa, "please ask @bravo for help")
	b = relayEntry(t, alpha.tool(sa, map[string]any{"action": "list_relays"}, ""), "bravo")
	if b["online"] != true || b["permission"] != "full" || b["unlocked"] != true {
		t.Fatalf("bravo after the mention: %v", b)
	}

	// send: bravo's agent answers, the reply comes back.
	sent := time.Now()
	res = alpha.tool(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "hello there", "wait_seconds": 20}, "")
	t.Logf("send alpha → bravo with reply took %s", time.Since(sent).Round(time.Millisecond))
	if res["ok"] != true {
		t.Fatalf("send: %v", res)
	}
	if rp, _ := res["reply"].(map[string]any); rp == nil || rp["text"] != "echo: hello there" {
		t.Fatalf("send reply: %v", res)
	}

	// Bravo keeps the prompt with its remote line and the from metadata (R4.8).
	wantLine := `[Remote prompt from an agent on relay "alpha" · session "caller" · scripted-1 · acting for the user]`
	var prompt map[string]any
	for _, m := range bravo.api.Messages(sb.ID, "") {
		if txt, _ := m["text"].(string); strings.Contains(txt, "hello there") && m["role"] != "assistant" {
			prompt = m
		}
	}
	if prompt == nil {
		t.Fatalf("bravo has no stored prompt: %v", bravo.api.Messages(sb.ID, ""))
	}
	if txt := prompt["text"].(string); !strings.HasPrefix(txt, wantLine+"\n") {
		t.Fatalf("stored prompt on bravo:\n got %q\nwant it to start with %q", txt, wantLine)
	}
	from, _ := prompt["from"].(map[string]any)
	if from == nil || from["relay"] != "alpha" || from["session"] != sa.ID || from["title"] != "caller" || from["model"] != "scripted-1" {
		t.Fatalf("from metadata on bravo: %v (message %v)", from, prompt)
	}

	// R4.4 b: a prompt from alpha's agent unlocks alpha in the bravo
	// conversation once bravo has paired alpha too.
	res = bravo.tool(sb, map[string]any{"action": "list_relays"}, "")
	if list, _ := res["relays"].([]any); len(list) != 1 {
		t.Fatalf("bravo lists relays before it paired alpha: %v", res)
	}
	pairProcs(t, bravo, alpha)
	a := relayEntry(t, bravo.tool(sb, map[string]any{"action": "list_relays"}, ""), "alpha")
	if a["online"] != true || a["unlocked"] != false {
		t.Fatalf("alpha on bravo before its agent wrote again: %v", a)
	}
	if res := bravo.tool(sb, map[string]any{"action": "list_sessions", "relay": "alpha"}, ""); res["code"] != "REMOTE_RELAY_LOCKED" {
		t.Fatalf("alpha from the bravo conversation before its agent wrote again: %v", res)
	}
	res = alpha.tool(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "second", "wait_seconds": 20}, "")
	if rp, _ := res["reply"].(map[string]any); res["ok"] != true || rp == nil || rp["text"] != "echo: second" {
		t.Fatalf("second send: %v", res)
	}
	a = relayEntry(t, bravo.tool(sb, map[string]any{"action": "list_relays"}, ""), "alpha")
	if a["online"] != true || a["permission"] != "full" || a["unlocked"] != true {
		t.Fatalf("alpha on bravo after its agent wrote: %v", a)
	}
	// The bravo conversation may now reach alpha (reading needs no card).
	res = bravo.tool(sb, map[string]any{"action": "list_sessions", "relay": "alpha"}, "")
	if res["ok"] != true || !strings.Contains(fmt.Sprint(res["sessions"]), sa.ID) {
		t.Fatalf("list_sessions on alpha from bravo: %v", res)
	}
	t.Logf("TestPeerProcessesSendAndList took %s", time.Since(begin).Round(time.Millisecond))
}

// peerNames are the relays of these tests.
var peerNames = []string{"alpha", "bravo", "charlie"}

// masked hides the relay names in a script the owner writes (JSON: "\u0062ravo"
// is "bravo" to the scripted agent), so the owner's message mentions no relay
// (R4.4): only the tests' plain messages unlock relays.
func masked(script string) string {
	for _, n := range peerNames {
		script = strings.ReplaceAll(script, n, fmt.Sprintf(`\u%04x`, n[0])+n[1:])
	}
	return script
}

// pairAll pairs every relay with every other one.
func pairAll(t *testing.T, ps ...*peerProc) {
	t.Helper()
	for _, from := range ps {
		for _, to := range ps {
			if from != to {
				pairProcs(t, from, to)
			}
		}
	}
}

// TestPeerHopLimitThreeRelays: R4.7 with alpha → bravo → charlie (→ alpha).
func TestPeerHopLimitThreeRelays(t *testing.T) {
	NeedsSharedRedis(t, "it reads each `relay serve` child's Redis itself")
	t.Parallel()
	begin := time.Now()
	alpha := startPeerProc(t, "alpha", "alpha", NewRedis(t), "")
	bravo := startPeerProc(t, "bravo", "bravo", NewRedis(t), "")
	charlie := startPeerProc(t, "charlie", "charlie", NewRedis(t), "")
	pairAll(t, alpha, bravo, charlie)

	sa := alpha.api.NewSession(map[string]any{"title": "origin"})
	home := alpha.api.NewSession(map[string]any{"title": "home"}) // what charlie's agent would prompt
	sb := bravo.api.NewSession(map[string]any{"title": "middle"})
	sc := charlie.api.NewSession(map[string]any{"title": "far"})
	// The owners unlock the next relay in each conversation, so only the hop limit decides.
	alpha.say(sa, "work with @bravo")
	bravo.say(sb, "work with @charlie")
	charlie.say(sc, "work with @alpha")

	// charlie's agent prompts alpha back; bravo's agent prompts charlie with that.
	back := masked(Script(stepTool(map[string]any{"action": "send", "relay": "alpha", "session": home.ID, "text": "back home", "wait_seconds": 5})))
	middle := masked(Script(stepTool(map[string]any{"action": "send", "relay": "charlie", "session": sc.ID, "text": back, "wait_seconds": 25})))
	send := map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": middle, "wait_seconds": 40}

	// 1. The owner on alpha did not mention charlie: bravo's agent may not pass the prompt on.
	res := alpha.tool(sa, send, "")
	if res["ok"] != true {
		t.Fatalf("alpha → bravo: %v", res)
	}
	inner := replyResults(t, res)
	if len(inner) != 1 || inner[0]["code"] != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("bravo → charlie without the owner's mention on alpha: %v", inner)
	}
	t.Logf("bravo → charlie refused: %v", inner[0]["error"])
	if msgs := charlie.api.Messages(sc.ID, ""); strings.Contains(fmt.Sprint(msgs), "Remote prompt") {
		t.Fatalf("charlie got a prompt despite the hop limit: %v", msgs)
	}

	// 2. The owner on alpha mentions charlie: bravo → charlie goes through,
	// and charlie's agent prompting alpha (chain [alpha, bravo, charlie]) is refused.
	alpha.say(sa, "charlie may help too")
	res = alpha.tool(sa, send, "")
	if res["ok"] != true {
		t.Fatalf("alpha → bravo (2): %v", res)
	}
	inner = replyResults(t, res)
	if len(inner) != 1 || inner[0]["ok"] != true {
		t.Fatalf("bravo → charlie after the owner on alpha mentioned charlie: %v", inner)
	}
	far := replyResults(t, inner[0])
	if len(far) != 1 || far[0]["code"] != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("charlie → alpha on the chain [alpha, bravo, charlie]: %v", far)
	}
	t.Logf("charlie → alpha refused: %v", far[0]["error"])
	var prompt map[string]any
	for _, m := range charlie.api.Messages(sc.ID, "") {
		if txt, _ := m["text"].(string); strings.Contains(txt, "back home") && m["role"] != "assistant" {
			prompt = m
		}
	}
	wantLine := `[Remote prompt from an agent on relay "bravo" · session "middle" · scripted-1 · acting for the user]`
	if prompt == nil || !strings.HasPrefix(prompt["text"].(string), wantLine+"\n") {
		t.Fatalf("charlie's stored prompt: %v", prompt)
	}
	if msgs := alpha.api.Messages(home.ID, ""); len(msgs) != 0 {
		t.Fatalf("alpha's home session got a prompt despite the hop limit: %v", msgs)
	}

	// 3. A chain that begins on bravo (its owner wrote): [bravo, charlie] → alpha
	// needs alpha unlocked by the bravo owner's mention. That alpha's agent
	// wrote into the bravo conversation (R4.4 b, it is unlocked there) does not count.
	fresh := map[string]any{"action": "send", "relay": "charlie", "session": sc.ID, "text": back, "wait_seconds": 25}
	res = bravo.tool(sb, fresh, "")
	far = replyResults(t, res)
	if res["ok"] != true || len(far) != 1 || far[0]["code"] != "REMOTE_RELAY_HOP_LIMIT" {
		t.Fatalf("charlie → alpha on the chain [bravo, charlie], alpha not mentioned by bravo's owner: %v / %v", res, far)
	}
	bravo.say(sb, "alpha may hear about it too")
	res = bravo.tool(sb, fresh, "")
	far = replyResults(t, res)
	if res["ok"] != true || len(far) != 1 || far[0]["ok"] != true {
		t.Fatalf("charlie → alpha on the chain [bravo, charlie] after bravo's owner mentioned alpha: %v / %v", res, far)
	}
	if msgs := alpha.api.Messages(home.ID, ""); len(msgs) == 0 || !strings.Contains(fmt.Sprint(msgs[0]["text"]), `[Remote prompt from an agent on relay "charlie" · session "far"`) {
		t.Fatalf("alpha's home session after the allowed hop: %v", msgs)
	}
	t.Logf("TestPeerHopLimitThreeRelays took %s", time.Since(begin).Round(time.Millisecond))
}

// relayOnline reads a pairing's online state from GET /api/v1/relays.
func (p *peerProc) relayOnline(name string) bool {
	p.t.Helper()
	for _, r := range p.relays() {
		if r["name"] == name {
			return r["online"] == true
		}
	}
	p.t.Fatalf("%s: no pairing %q in %v", p.label, name, p.relays())
	return false
}

// failedEventPolls is how many of p's event polls of paired relays failed
// (relay_peer_requests_total of kind events with a code other than ok).
func (p *peerProc) failedEventPolls() float64 {
	p.t.Helper()
	return p.eventPolls(false)
}

// okEventPolls is how many of p's event polls of paired relays succeeded
// (relay_peer_requests_total of kind events with code ok).
func (p *peerProc) okEventPolls() float64 {
	p.t.Helper()
	return p.eventPolls(true)
}

// eventPolls sums relay_peer_requests_total of kind events: the polls with
// code ok, or (ok false) those with any other code.
func (p *peerProc) eventPolls(ok bool) float64 {
	p.t.Helper()
	resp, err := http.Get(p.api.URL + "/metrics")
	if err != nil {
		p.t.Fatalf("%s: /metrics: %v", p.label, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "relay_peer_requests_total{") && strings.Contains(l, `kind="events"`) && strings.Contains(l, `code="ok"`) == ok {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				n += v
			}
		}
	}
	return n
}

// TestPeerLinkCutReplay (R8.21): bravo runs as two processes on one Redis;
// alpha polls bravo1. While bravo1 is down, bravo2 runs three turns of the
// watched session; when bravo1 answers again, alpha's conversation gets them
// as one message between link_lost and link_restored, each line replayed, once.
func TestPeerLinkCutReplay(t *testing.T) {
	NeedsSharedRedis(t, "two `relay serve` children of one relay on one Redis")
	t.Parallel()
	begin := time.Now()
	rdB := NewRedis(t)
	alpha := startPeerProc(t, "alpha", "alpha", NewRedis(t), "  peer_poll: 1s\n  peer_timeout: 2s\n  coalesce: 1s\n")
	bravo1 := startPeerProc(t, "bravo1", "bravo", rdB, "")
	bravo2 := startPeerProc(t, "bravo2", "bravo", rdB, "")
	pairProcs(t, alpha, bravo1)

	sa := alpha.api.NewSession(map[string]any{"title": "watcher"})
	sb := bravo2.api.NewSession(map[string]any{"title": "watched"})
	alpha.say(sa, "keep an eye on @bravo")
	res := alpha.tool(sa, map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{sb.ID}}, "allow")
	if res["ok"] != true {
		t.Fatalf("subscribe on bravo: %v", res)
	}
	sub, _ := res["subscription"].(map[string]any)
	t.Logf("subscribed on bravo: %v", sub)
	// Whatever the subscription delivers before the cut is the baseline: the
	// events bravo keeps in the subscription's stream (none: the watched
	// session runs nothing before the cut; all_idle at most), delivered on
	// alpha. That is reached once one of alpha's polls of bravo's events
	// succeeded since the subscription was made (its only remote one, so the
	// poll read this stream) and every event the stream holds then is a line
	// of alpha's event messages (what a poll brings waits out timing.coalesce).
	okPolls := alpha.okEventPolls()
	Eventually(t, 10*time.Second, func() bool { return alpha.okEventPolls() > okPolls }, "a poll of bravo's events since the subscription")
	kept, _, err := bravo1.st.SubEvents(context.Background(), str(sub["id"]), "0", 500)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() bool { return eventLines(alpha.api.EventTexts(sa.ID)) >= len(kept) },
		"the %d events bravo keeps for the subscription delivered on alpha", len(kept))
	before := len(alpha.api.EventTexts(sa.ID))
	t.Logf("baseline before the cut: %d events kept on bravo, %d event messages on alpha", len(kept), before)

	cut := time.Now()
	bravo1.stop()
	Eventually(t, 10*time.Second, func() bool { return !alpha.relayOnline("bravo") }, "alpha to see bravo offline")
	t.Logf("alpha sees bravo offline %s after the SIGTERM", time.Since(cut).Round(time.Millisecond))
	for _, text := range []string{"one", "two", "three"} {
		tr := bravo2.say(sb, text)
		if tr.Reply != "echo: "+text {
			t.Fatalf("turn on bravo2: %q", tr.Reply)
		}
	}
	// Two more of alpha's polls of bravo failed since the turns ended (the
	// second began after them) and brought nothing.
	failed := alpha.failedEventPolls()
	Eventually(t, 15*time.Second, func() bool { return alpha.failedEventPolls() >= failed+2 }, "two more failed polls of bravo1 while it is down")
	if got := alpha.api.EventTexts(sa.ID); len(got) != before {
		t.Fatalf("events delivered while the link was down: %q", got[before:])
	}

	back := time.Now()
	bravo1.start()
	var replay []string
	Eventually(t, 15*time.Second, func() bool {
		replay = nil
		for _, txt := range alpha.api.EventTexts(sa.ID) {
			if strings.Contains(txt, "link_lost") || strings.Contains(txt, "link_restored") {
				replay = append(replay, txt)
			}
		}
		return len(replay) > 0
	}, "the replay message in alpha's conversation")
	t.Logf("replay delivered %s after bravo1 came back", time.Since(back).Round(time.Millisecond))
	if len(replay) != 1 {
		t.Fatalf("want one replay message, got %d: %q", len(replay), replay)
	}
	lines := strings.Split(replay[0], "\n")
	t.Logf("replay message:\n%s", replay[0])
	// The default events include all_idle (R8.2): after each of the three
	// turns the watched session went idle, which is replayed as well.
	if lines[0] != domain.Header || len(lines) < 6 {
		t.Fatalf("replay message: want the header and at least 5 lines, got %q", lines)
	}
	if lines[1] != "[relay event] bravo · link_lost" {
		t.Fatalf("first line: %q", lines[1])
	}
	var turns []string
	mid := lines[2 : len(lines)-1]
	for _, l := range mid {
		switch {
		case strings.HasPrefix(l, fmt.Sprintf(`[relay event] replayed · bravo · session "watched" (%s): turn_end`, sb.ID[:8])):
			turns = append(turns, l)
		case l == fmt.Sprintf("[relay event] replayed · bravo · all_idle: no turn or task is running in the 1 watched session (subscription %s)", sub["id"]):
		default:
			t.Fatalf("unexpected line in the replay: %q", l)
		}
	}
	for i, text := range []string{"one", "two", "three"} {
		want := fmt.Sprintf(`[relay event] replayed · bravo · session "watched" (%s): turn_end (done) "echo: %s"`, sb.ID[:8], text)
		if i >= len(turns) || turns[i] != want {
			t.Fatalf("turn_end lines:\n got %q\nwant %q at %d", turns, want, i)
		}
	}
	if len(turns) != 3 {
		t.Fatalf("turn_end lines: %q", turns)
	}
	if last := lines[len(lines)-1]; last != fmt.Sprintf("[relay event] bravo · link_restored: %d replayed events, 0 held for later", len(mid)) {
		t.Fatalf("last line: %q (after %d replayed lines)", last, len(mid))
	}
	if !alpha.relayOnline("bravo") {
		t.Fatalf("bravo still offline on alpha after the replay")
	}

	// Nothing comes twice: one more turn comes as a live event, the first
	// message after the replay (the polls that brought it read on from the
	// replay's cursor: anything again would have come before it).
	bravo2.say(sb, "four")
	Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(strings.Join(alpha.api.EventTexts(sa.ID)[before+1:], "\n"), "echo: four")
	}, "the live event after the replay")
	if all := alpha.api.EventTexts(sa.ID); !strings.Contains(all[before+1], "echo: four") {
		t.Fatalf("event messages after the replay, before the live one: %q", all[before:])
	}
	// And the live one once: a later turn's event came after it.
	bravo2.say(sb, "five")
	Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(strings.Join(alpha.api.EventTexts(sa.ID)[before+1:], "\n"), "echo: five")
	}, "a later live event")
	after := strings.Join(alpha.api.EventTexts(sa.ID)[before+1:], "\n")
	if strings.Count(after, `turn_end (done) "echo: four"`) != 1 || strings.Contains(after, "replayed") || strings.Contains(after, "link_") ||
		strings.Contains(after, "echo: one") || strings.Contains(after, "echo: two") || strings.Contains(after, "echo: three") {
		t.Fatalf("event messages after the replay:\n%s", after)
	}
	t.Logf("TestPeerLinkCutReplay took %s", time.Since(begin).Round(time.Millisecond))
}

// eventLines counts the event lines of event messages (after each message's header).
func eventLines(texts []string) int {
	n := 0
	for _, txt := range texts {
		for _, l := range strings.Split(txt, "\n") {
			if strings.HasPrefix(l, "[relay event] ") {
				n++
			}
		}
	}
	return n
}

// timedTool runs a tool call in a turn of s and returns its result and how
// long the turn took from the owner's message to its end.
func (p *peerProc) timedTool(s Session, args map[string]any) (map[string]any, time.Duration) {
	p.t.Helper()
	begin := time.Now()
	res := p.tool(s, args, "")
	return res, time.Since(begin)
}

// TestPeerProcessFaults: a paired relay that hangs or is down gives
// REMOTE_RELAY_OFFLINE within timing.peer_timeout while other sessions on the
// caller keep their speed (R13.4); a rejected token is REMOTE_RELAY_AUTH and
// nothing is paired.
func TestPeerProcessFaults(t *testing.T) {
	NeedsSharedRedis(t, "it reads each `relay serve` child's Redis itself")
	t.Parallel()
	begin := time.Now()
	const peerTimeout = 2 * time.Second
	alpha := startPeerProc(t, "alpha", "alpha", NewRedis(t), "  peer_timeout: 2s\n")
	bravo := startPeerProc(t, "bravo", "bravo", NewRedis(t), "")

	// A wrong token: refused, nothing stored (with or without a name).
	for _, body := range []map[string]any{
		{"url": bravo.api.URL, "token": "rpt_not-a-token-of-bravo"},
		{"url": bravo.api.URL, "token": "rpt_not-a-token-of-bravo", "name": "bravo"},
	} {
		var out map[string]any
		st := alpha.api.Owner("POST", "/api/v1/relays", body, &out)
		if st < 400 || st >= 500 || out["code"] != "REMOTE_RELAY_AUTH" {
			t.Fatalf("pairing with a wrong token: %d %v", st, out)
		}
		t.Logf("wrong token refused: %d %v", st, out["error"])
		if rs := alpha.relays(); len(rs) != 0 {
			t.Fatalf("a refused pairing was stored: %v", rs)
		}
	}

	pairProcs(t, alpha, bravo)
	caller := alpha.api.NewSession(map[string]any{"title": "caller"})
	other := alpha.api.NewSession(map[string]any{"title": "bystander"})
	sb := bravo.api.NewSession(map[string]any{"title": "target"})
	alpha.say(caller, "talk to @bravo")
	send := map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "ping", "wait_seconds": 0}
	if res := alpha.tool(caller, send, ""); res["ok"] != true {
		t.Fatalf("send while bravo is up: %v", res)
	}
	// The bystander's normal speed.
	var normal time.Duration
	for range 3 {
		b := time.Now()
		alpha.say(other, "how fast")
		if d := time.Since(b); normal == 0 || d < normal {
			normal = d
		}
	}
	t.Logf("a turn of the bystander takes %s", normal.Round(time.Millisecond))

	// bravo hangs (SIGSTOP: its port accepts, nothing answers): the call gives up after peer_timeout.
	bravo.signal(syscall.SIGSTOP)
	mid := alpha.api.Message(caller.ID, masked(Script(stepTool(send))))
	callStart := time.Now()
	alpha.waitTurn(mid, 10*time.Second, store.TurnRunning, store.TurnDone, store.TurnError)
	b := time.Now()
	alpha.say(other, "still fast?")
	during := time.Since(b)
	tr := alpha.waitDone(mid, 20*time.Second)
	took := time.Since(callStart)
	t.Logf("send to a hung bravo ended after %s; the bystander's turn meanwhile took %s", took.Round(time.Millisecond), during.Round(time.Millisecond))
	res := ToolResults(tr.Reply)
	if len(res) != 1 || res[0]["code"] != "REMOTE_RELAY_OFFLINE" {
		t.Fatalf("send to a hung relay: %q", tr.Reply)
	}
	if took > peerTimeout+3*time.Second || took < peerTimeout-200*time.Millisecond {
		t.Fatalf("send to a hung relay ended after %s, want about timing.peer_timeout (%s)", took, peerTimeout)
	}
	if during > normal+time.Second || during >= peerTimeout {
		t.Fatalf("the bystander's turn took %s while the call hung (normally %s)", during, normal)
	}
	res1, d := alpha.timedTool(caller, map[string]any{"action": "list_sessions", "relay": "bravo"})
	t.Logf("list_sessions on a hung bravo: %s after %s", res1["code"], d.Round(time.Millisecond))
	if res1["code"] != "REMOTE_RELAY_OFFLINE" || d > peerTimeout+3*time.Second {
		t.Fatalf("list_sessions on a hung relay after %s: %v", d, res1)
	}
	if alpha.relayOnline("bravo") {
		t.Fatalf("GET /relays shows a hung bravo online")
	}

	// bravo is down (SIGTERM): refused at once.
	bravo.signal(syscall.SIGCONT)
	bravo.stop()
	res1, d = alpha.timedTool(caller, send)
	t.Logf("send to a stopped bravo: %s after %s", res1["code"], d.Round(time.Millisecond))
	if res1["code"] != "REMOTE_RELAY_OFFLINE" || d > peerTimeout+time.Second {
		t.Fatalf("send to a stopped relay after %s: %v", d, res1)
	}
	b = time.Now()
	alpha.say(other, "and now?")
	if d := time.Since(b); d > normal+time.Second {
		t.Fatalf("the bystander's turn took %s with bravo down (normally %s)", d, normal)
	}
	lr := relayEntry(t, alpha.tool(caller, map[string]any{"action": "list_relays"}, ""), "bravo")
	if lr["online"] != false || lr["unlocked"] != true {
		t.Fatalf("list_relays with bravo down: %v", lr)
	}
	t.Logf("TestPeerProcessFaults took %s", time.Since(begin).Round(time.Millisecond))
}
