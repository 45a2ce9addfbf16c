package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/oar/relay/config"
)

// (p) paired relays: a cross-relay send→reply at one client against the same
// send on one relay plus one loopback HTTP round trip, and remote event
// delivery through the peer protocol's polling.

type peerResult struct {
	rounds              int
	local, remote, http dist
	ratio               float64 // remote p50 ÷ (local p50 + http p50)
	poll                time.Duration
	events, delivered   int
	delivery            dist
	deliveryOn          string
}

// benchPeer runs two relays (alpha with the caller, bravo paired from alpha)
// in this process, each on its own key prefix, and measures interleaved
// rounds: a send alpha→alpha, a send alpha→bravo, a GET /healthz of bravo.
func benchPeer(ctx context.Context, b *bench, prefix string, rounds, events int) (peerResult, error) {
	res := peerResult{rounds: rounds, poll: 3 * time.Second}
	adjust := func(name string) func(*config.Config) {
		return func(c *config.Config) {
			c.Name = name
			c.Timing.Coalesce = 0 // measure the transport, not the 30 s coalescing window
			c.Settings.AgentSessions = true
		}
	}
	alpha, err := startRelayWith(b.o.redisURL, prefix+"a", b.o.concurrency, b.hc, adjust("alpha"))
	if err != nil {
		return res, err
	}
	defer func() { _ = alpha.stop() }()
	bravo, err := startRelayWith(b.o.redisURL, prefix+"b", b.o.concurrency, b.hc, adjust("bravo"))
	if err != nil {
		return res, err
	}
	defer func() { _ = bravo.stop() }()
	var tok map[string]any
	if st, err := bravo.ownerCall(ctx, http.MethodPost, "/api/v1/peer-tokens", map[string]any{}, &tok); err != nil || st != http.StatusCreated {
		return res, fmt.Errorf("peer token: %d %v: %w", st, tok, err)
	}
	var pr map[string]any
	if st, err := alpha.ownerCall(ctx, http.MethodPost, "/api/v1/relays", map[string]any{"url": bravo.url, "token": tok["token"]}, &pr); err != nil || st != http.StatusCreated {
		return res, fmt.Errorf("pair: %d %v: %w", st, pr, err)
	}
	caller, err := alpha.createSession(ctx, "caller")
	if err != nil {
		return res, err
	}
	local, err := alpha.createSession(ctx, "local target")
	if err != nil {
		return res, err
	}
	remote, err := bravo.createSession(ctx, "remote target")
	if err != nil {
		return res, err
	}
	watched, err := bravo.createSession(ctx, "watched")
	if err != nil {
		return res, err
	}
	// The owner unlocks bravo in the caller's conversation (a mention).
	if st, err := alpha.ownerCall(ctx, http.MethodPost, "/api/v1/sessions/"+caller.ID+"/messages", map[string]any{"text": "work with @bravo"}, nil); err != nil || st >= 300 {
		return res, fmt.Errorf("mention: %d: %w", st, err)
	}
	rl := alpha.app.Relay()
	call := func(args map[string]any) (map[string]any, error) {
		raw, _ := json.Marshal(args)
		out, failed := rl.CallTool(ctx, caller.ID, raw, nil)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			return nil, err
		}
		if failed {
			return m, fmt.Errorf("%s: %v %v", args["action"], m["code"], m["error"])
		}
		return m, nil
	}
	send := func(relayName, sid, text string) (time.Duration, error) {
		t0 := time.Now()
		m, err := call(map[string]any{"action": "send", "relay": relayName, "session": sid, "text": text, "wait_seconds": 30})
		if err != nil {
			return 0, err
		}
		if m["status"] != "done" {
			return 0, fmt.Errorf("send to %s: status %v", relayName, m["status"])
		}
		return time.Since(t0), nil
	}
	probe := func() (time.Duration, error) {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, bravo.url+"/healthz", nil)
		resp, err := b.hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return time.Since(t0), nil
	}
	var lo, re, ht []time.Duration
	for i := -3; i < rounds; i++ { // 3 warm-up rounds
		dl, err := send("this", local.ID, fmt.Sprintf("local %d", i))
		if err != nil {
			return res, err
		}
		dr, err := send("bravo", remote.ID, fmt.Sprintf("remote %d", i))
		if err != nil {
			return res, err
		}
		dh, err := probe()
		if err != nil {
			return res, err
		}
		if i >= 0 {
			lo, re, ht = append(lo, dl), append(re, dr), append(ht, dh)
		}
	}
	res.local, res.remote, res.http = newDist(lo), newDist(re), newDist(ht)
	if b.o.rtCallers {
		// Where each relay's Redis round trips of a cross-relay send come from.
		const n = 50
		for _, rp := range []*relayProc{alpha, bravo} {
			rp.rt.callers.Store(true)
			defer rp.rt.record()()
		}
		for i := range n {
			if _, err := send("bravo", remote.ID, fmt.Sprintf("sites %d", i)); err != nil {
				return res, err
			}
		}
		for _, x := range []struct {
			name string
			rp   *relayProc
		}{{"alpha (caller)", alpha}, {"bravo (target)", bravo}} {
			fmt.Fprintf(os.Stderr, "(p) %s: Redis round trips of a cross-relay send by calling site, per send (%d sends):\n", x.name, n)
			for _, line := range x.rp.rt.sites() {
				var k int
				var where string
				if _, err := fmt.Sscanf(line, "%d", &k); err == nil {
					where = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "0123456789"))
					fmt.Fprintf(os.Stderr, "  %6.2f  %s\n", float64(k)/n, where)
				}
			}
			x.rp.rt.callers.Store(false)
		}
	}
	if d := res.local.p50() + res.http.p50(); d > 0 {
		res.ratio = float64(res.remote.p50()) / float64(d)
	}
	// Remote events: the caller subscribes to a bravo session (its first-
	// subscribe card is pre-approved: no turn runs the call here).
	if err := alpha.app.Store().SetFlag(ctx, caller.ID, "subscribed"); err != nil {
		return res, err
	}
	m, err := call(map[string]any{"action": "subscribe", "relay": "bravo", "sessions": []string{watched.ID}, "events": []string{"turn_end"}})
	if err != nil {
		return res, err
	}
	_ = m
	sent := map[string]time.Time{}
	for i := 0; i < events; i++ {
		text := fmt.Sprintf("ev-%d", i)
		var out map[string]any
		if st, err := bravo.ownerCall(ctx, http.MethodPost, "/api/v1/sessions/"+watched.ID+"/messages", map[string]any{"text": text}, &out); err != nil || st >= 300 {
			return res, fmt.Errorf("event prompt: %d: %w", st, err)
		}
		sent[text] = time.Time{}
		time.Sleep(500 * time.Millisecond)
	}
	// turn_end times on bravo, delivery times on alpha (the event message's createdAt).
	endAt := func() (map[string]time.Time, error) {
		out := map[string]time.Time{}
		var d struct {
			Messages []struct {
				Role, Text string
				CreatedAt  time.Time `json:"createdAt"`
			} `json:"messages"`
		}
		if _, err := bravo.ownerCall(ctx, http.MethodGet, "/api/v1/sessions/"+watched.ID+"?last=1000", nil, &d); err != nil {
			return nil, err
		}
		for _, msg := range d.Messages {
			if msg.Role == "assistant" && strings.HasPrefix(msg.Text, "echo: ev-") {
				out[strings.TrimPrefix(msg.Text, "echo: ")] = msg.CreatedAt
			}
		}
		return out, nil
	}
	evLine := regexp.MustCompile(`turn_end \(done\) "echo: (ev-\d+)"`)
	deadline := time.Now().Add(30 * time.Second)
	var got map[string]time.Time
	for time.Now().Before(deadline) {
		got = map[string]time.Time{}
		var d struct {
			Messages []struct {
				Role, Text string
				CreatedAt  time.Time `json:"createdAt"`
			} `json:"messages"`
		}
		if _, err := alpha.ownerCall(ctx, http.MethodGet, "/api/v1/sessions/"+caller.ID+"?last=1000", nil, &d); err != nil {
			return res, err
		}
		for _, msg := range d.Messages {
			if msg.Role != "event" {
				continue
			}
			for _, mm := range evLine.FindAllStringSubmatch(msg.Text, -1) {
				if _, seen := got[mm[1]]; !seen {
					got[mm[1]] = msg.CreatedAt
				}
			}
		}
		if len(got) >= events {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	ends, err := endAt()
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	for k, at := range got {
		if e, ok := ends[k]; ok {
			lat = append(lat, at.Sub(e))
		}
	}
	res.events, res.delivered, res.delivery = events, len(lat), newDist(lat)
	res.deliveryOn = "the watched turn's reply (createdAt on bravo) → the event message in the watcher (createdAt on alpha)"
	return res, nil
}

func tablePeer(row rowFunc, r peerResult) {
	row("p", fmt.Sprintf("cross-relay send→reply, 1 client (in-process CallTool on alpha, scripted instant reply), %d interleaved rounds", r.rounds),
		fmt.Sprintf("alpha→bravo p50 **%s** (p99 %s) · alpha→alpha p50 %s (p99 %s) · loopback HTTP GET p50 %s", fms(r.remote.p50()), fms(r.remote.p99()),
			fms(r.local.p50()), fms(r.local.p99()), fms(r.http.p50())), "", "")
	v := "PASS"
	if r.ratio > 1.5 {
		v = "FAIL"
	}
	row("p", "cross-relay p50 ÷ (same send on one relay p50 + one loopback HTTP round trip p50)", fmt.Sprintf("**%.2f×**", r.ratio), "≤ 1.5×", v)
	v = "PASS"
	if r.delivered < r.events || r.delivery.p99() >= 4*time.Second {
		v = "FAIL"
	}
	row("p", fmt.Sprintf("remote event delivery, polling every %s, %d turn_end events at 2/s (%s); coalescing 0", r.poll, r.events, r.deliveryOn),
		fmt.Sprintf("p50 %s, p99 **%s** (n=%d of %d)", fms(r.delivery.p50()), fms(r.delivery.p99()), r.delivered, r.events), "p99 < 4 s", v)
}
