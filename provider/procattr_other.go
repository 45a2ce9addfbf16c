//go:build unix && !linux

package provider

import "syscall"

// agentProcAttr starts an agent in its own process group (a stop kills the
// whole group). Outside Linux there is no parent-death signal.
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
