//go:build !linux

package provider

import "errors"

// files runs fn; switching the file-system identity of one thread
// (setfsuid) is Linux only, so a relay elsewhere that would need it refuses.
func (r *RunAs) files(fn func() error) error {
	if r == nil || !r.switches {
		return fn()
	}
	return errors.New("file access as another user is supported on Linux only")
}
