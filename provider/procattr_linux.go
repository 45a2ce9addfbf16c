package provider

import "syscall"

// agentProcAttr starts an agent in its own process group (a stop kills the
// whole group) that is killed with the relay process (R18.11: Linux Pdeathsig,
// so an agent never outlives a relay that died without stopping it).
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
