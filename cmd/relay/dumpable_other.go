//go:build !linux

package main

// nonDumpable has no portable counterpart outside Linux (R18.17 names Linux).
func nonDumpable() error { return nil }
