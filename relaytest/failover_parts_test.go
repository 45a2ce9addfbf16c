package relaytest

import (
	"strings"
	"testing"
	"time"
)

// TestFailoverTimelineUnbidden: the failover tests forgive a lost prompt only
// near a change of master that no kill caused (R21.3): a kill's own change
// is not one, a change with no kill before it is, and only within 5 s.
func TestFailoverTimelineUnbidden(t *testing.T) {
	tl := &foTimeline{begin: time.Now()}
	tl.kill("kill 1")
	tl.change("a", "b") // the kill's failover
	at := time.Now()
	if tl.nearUnbidden(at) {
		t.Fatalf("a kill's own failover counted as one no kill caused:\n%s", tl)
	}
	tl.change("b", "a") // no kill before it
	if !tl.nearUnbidden(at) || !tl.nearUnbidden(at.Add(4*time.Second)) {
		t.Fatalf("a failover no kill caused is not seen near it:\n%s", tl)
	}
	if tl.nearUnbidden(at.Add(-6*time.Second)) || tl.nearUnbidden(at.Add(6*time.Second)) {
		t.Fatalf("a failover no kill caused is seen more than 5 s away:\n%s", tl)
	}
	if got := tl.near(at); !strings.Contains(got, "kill 1") || !strings.Contains(got, "no kill caused") {
		t.Fatalf("near: %s", got)
	}
}

// TestAsReplicaConf: a killed cluster master's nodes.conf (as redis-server
// wrote it) rewritten from the cluster's view after the failover: it starts
// as a replica of the node that took its slots, and claims none.
func TestAsReplicaConf(t *testing.T) {
	conf := `4910 127.0.0.1:20532@30532 slave e4d2 0 1796476664309 3 connected
e4d2 127.0.0.1:20333@30333 master - 0 1796476664410 3 connected 10923-16383
4cf5 127.0.0.1:22478@32478 slave b84f 0 1796476665015 2 connected
1cac 127.0.0.1:21934@31934 myself,master - 0 1796476664000 1 connected 0-5460
1dd4 127.0.0.1:20070@30070 slave 1cac 0 1796476665015 1 connected
b84f 127.0.0.1:22759@32759 master - 0 1796476664410 2 connected 5461-10922
vars currentEpoch 6 lastVoteEpoch 0
`
	// The view of a node that stayed: 1dd4 took 1cac's slots.
	live := `4910 127.0.0.1:20532@30532 slave e4d2 0 1796476664309 3 connected
e4d2 127.0.0.1:20333@30333 myself,master - 0 1796476664410 3 connected 10923-16383
4cf5 127.0.0.1:22478@32478 slave b84f 0 1796476665015 2 connected
1cac 127.0.0.1:21934@31934 master,fail - 1796476670000 1796476664000 1 disconnected
1dd4 127.0.0.1:20070@30070 master - 0 1796476675015 7 connected 0-5460
b84f 127.0.0.1:22759@32759 master - 0 1796476664410 2 connected 5461-10922
`
	got, err := asReplicaConf(conf, live)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if n := strings.Count(got, "myself"); n != 1 {
		t.Fatalf("%d myself lines:\n%s", n, got)
	}
	var me string
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "myself") {
			me = l
		}
		if strings.HasPrefix(l, "1cac ") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d lines of the killed node (its failed line from the live view kept?):\n%s", n, got)
	}
	if f := strings.Fields(me); f[0] != "1cac" || f[2] != "myself,slave" || f[3] != "1dd4" || len(f) != 8 {
		t.Fatalf("the killed node's line %q: want 1cac, myself,slave of 1dd4, no slots", me)
	}
	if !strings.Contains(got, "1dd4 127.0.0.1:20070@30070 master - 0 1796476675015 7 connected 0-5460") ||
		!strings.Contains(got, "e4d2 127.0.0.1:20333@30333 master ") || lines[len(lines)-1] != "vars currentEpoch 6 lastVoteEpoch 0" {
		t.Fatalf("the other lines are not the live view's:\n%s", got)
	}
	if _, err := asReplicaConf(conf, strings.ReplaceAll(live, "0-5460", "")); err == nil {
		t.Fatalf("no live master of the killed node's slots: want an error")
	}
}
