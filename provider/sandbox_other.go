//go:build !linux

package provider

import (
	"errors"
	"os/exec"
)

// wrap: bubblewrap runs on Linux only. The app refuses sandbox: bwrap
// elsewhere at start; should a sandboxed command still be built here, it
// fails to start rather than run unconfined.
func (s *Sandbox) wrap(cmd *exec.Cmd, _ string, _ ...sandboxBind) {
	if s == nil {
		return
	}
	cmd.Err = errors.New("sandbox: bwrap runs on Linux only")
}
