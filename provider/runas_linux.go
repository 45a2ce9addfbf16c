package provider

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// files runs fn with the user's file-system identity (R18.26): on an OS
// thread locked to it whose fsuid, fsgid and supplementary groups are the
// user's, so the kernel checks fn's opens, creations and writes as it would
// the agent's own (root's file-system capabilities go with the fsuid), and
// what fn creates belongs to the user. Only that thread's credentials change
// (raw setgroups/setfsuid, not the all-threads syscall.Setgroups), and they
// are restored before the thread is handed back. The thread is never left
// to end: an agent started from it earlier holds a parent-death signal
// (Pdeathsig, bwrap --die-with-parent) tied to it. Should the restore fail,
// the thread stays parked with its goroutine instead. A panic in fn is
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
		runtime.LockOSThread()
		ogroups, gerr := unix.Getgroups()
		ofsuid, _ := unix.SetfsuidRetUid(-1) // -1 changes nothing: the current one
		ofsgid, _ := unix.SetfsgidRetGid(-1)
		o := outcome{panicked: true}
		defer func() {
			if o.panicked {
				o.p = recover()
			}
			// Back to the relay's own identity, checked.
			_ = unix.Setfsuid(ofsuid)
			_ = unix.Setfsgid(ofsgid)
			rerr := unix.Setgroups(ogroups)
			u, _ := unix.SetfsuidRetUid(-1)
			g, _ := unix.SetfsgidRetGid(-1)
			done <- o
			if gerr != nil || rerr != nil || u != ofsuid || g != ofsgid {
				select {} // never reused, never ended (see above)
			}
			runtime.UnlockOSThread()
		}()
		if gerr != nil {
			o.err, o.panicked = fmt.Errorf("file access as user %q: getgroups: %w", r.Name, gerr), false
			return
		}
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
		// setfsuid/setfsgid report no failure: read them back.
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
