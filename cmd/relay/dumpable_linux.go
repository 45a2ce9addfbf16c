//go:build linux

package main

import "golang.org/x/sys/unix"

// nonDumpable makes this process non-dumpable (R18.17): an agent running as
// the same user can then neither read /proc/<relay pid>/environ (the owner
// token, REDIS_URL with its password) nor attach to the relay with ptrace.
func nonDumpable() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
