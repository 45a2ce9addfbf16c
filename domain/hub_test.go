package domain

import "testing"

// fireWith hands its value to the key's waiters only while one waits, and
// the value goes with the last of them (a finished turn handed to a caller
// waiting in the same process, queue.go waitTurnOn).
func TestHubFireWith(t *testing.T) {
	h := newHub()
	h.fireWith("turn:a", "nobody waits")
	if v := h.val("turn:a"); v != nil {
		t.Fatalf("kept %v with no waiter", v)
	}
	ch1, unsub1 := h.sub("turn:a")
	ch2, unsub2 := h.sub("turn:a")
	h.fireWith("turn:a", "ended")
	for i, ch := range []chan struct{}{ch1, ch2} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d not woken", i)
		}
	}
	if v := h.val("turn:a"); v != "ended" {
		t.Fatalf("val %v, want the handed value", v)
	}
	if v := h.val("turn:b"); v != nil {
		t.Fatalf("another key's val %v", v)
	}
	unsub1()
	if v := h.val("turn:a"); v != "ended" {
		t.Fatalf("val %v gone while a waiter remains", v)
	}
	unsub2()
	if v := h.val("turn:a"); v != nil {
		t.Fatalf("val %v kept after the last waiter left", v)
	}
}
