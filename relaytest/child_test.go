package relaytest

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is a subprocess a test starts, stops and starts again (a relay, a
// redis-server): the running command and the channel its exit is reaped into.
type child struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
}

// run starts cmd and reaps its exit in the background, into the returned channel.
func (c *child) run(cmd *exec.Cmd) (chan error, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	return exited, nil
}

// running is the running command, nil when none.
func (c *child) running() *exec.Cmd {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd
}

// take hands over the running command and its exit, and forgets them.
func (c *child) take() (*exec.Cmd, chan error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd, exited := c.cmd, c.exited
	c.cmd = nil
	return cmd, exited
}

// kill ends the process at once and reaps it (cleanup).
func (c *child) kill() {
	cmd, exited := c.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited //nolint:errcheck // reaped after a kill: its exit status says nothing
}

// stop sends SIGCONT (a stopped process must run to end) and SIGTERM and
// waits up to d: ran says a process was running, exit is how it exited, err
// that it could not be signalled or did not end in time (it was killed).
func (c *child) stop(d time.Duration) (ran bool, exit, err error) {
	cmd, exited := c.take()
	if cmd == nil {
		return false, nil, nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // reaped after a kill
		return true, nil, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case exit = <-exited:
		return true, exit, nil
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // reaped after a kill
		return true, nil, fmt.Errorf("did not stop within %s of SIGTERM", d)
	}
}
