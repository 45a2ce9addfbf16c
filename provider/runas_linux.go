package provider

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// files runs fn with the user's file-system identity (R18.26): on an OS
// thread of its own whose fsuid, fsgid and supplementary groups are the
// user's, so the kernel checks fn's opens, creations and writes as it would
// the agent's own (the file-system capabilities of root are dropped with the
// fsuid), and what fn creates belongs to the user. The credentials of that
// thread alone change (raw setgroups/setfsuid, not the all-threads
// syscall.Setgroups); the thread is never handed back to the runtime: its
// goroutine ends locked to it, which ends the thread. A panic in fn is
// raised again in the caller. Without a user to switch to, fn just runs.
func (r *RunAs) files(fn func() error) error {
	if r == nil || !r.switches {
		return fn()
	}
	type outcome struct {
		err      error
		panicked bool
		p        any
	}
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		o := outcome{panicked: true}
		defer func() {
			if o.panicked {
				o.p = recover()
			}
			done <- o
		}()
		groups := make([]int, len(r.Groups))
		for i, g := range r.Groups {
			groups[i] = int(g)
		}
		if err := unix.Setgroups(groups); err != nil {
			o.err, o.panicked = fmt.Errorf("file access as user %q: setgroups: %w", r.Name, err), false
			return
		}
		_ = unix.Setfsgid(int(r.GID))
		_ = unix.Setfsuid(int(r.UID))
		// setfsuid/setfsgid report no failure: read them back (-1 changes nothing).
		if u, _ := unix.SetfsuidRetUid(-1); u != int(r.UID) {
			o.err, o.panicked = fmt.Errorf("file access as user %q: the thread's fsuid is %d", r.Name, u), false
			return
		}
		if g, _ := unix.SetfsgidRetGid(-1); g != int(r.GID) {
			o.err, o.panicked = fmt.Errorf("file access as user %q: the thread's fsgid is %d", r.Name, g), false
			return
		}
		o.err = fn()
		o.panicked = false
	}()
	o := <-done
	if o.panicked {
		panic(o.p)
	}
	return o.err
}
