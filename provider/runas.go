package provider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// RunAs is the OS user a provider's processes run as (the provider's user:,
// R18.26): every agent process and every ACP terminal of the provider gets
// its uid, primary gid and supplementary groups, and HOME (USER, LOGNAME) of
// that user unless the provider's env sets them. The files the relay writes
// for the agent (MCP config files, a Gemini CLI home) are handed to it, and
// an ACP agent's file requests are served with its file-system identity
// (files, Linux). A nil *RunAs is none: the processes run as the relay's
// own user.
type RunAs struct {
	Name   string // the user's name (or its uid when it has none)
	UID    uint32
	GID    uint32   // primary group
	Groups []uint32 // supplementary groups (the primary one included)
	Home   string

	// switches: the relay runs as another user (root) and sets the
	// process's credentials; false when it already runs as this user.
	switches bool
	euid     int // the relay's own effective uid
}

// LookupRunAs resolves a provider's user: (a name, or a numeric uid found in
// the user database) for a relay whose effective uid is euid. It fails when
// the user does not exist, or when the relay cannot switch to it: only root
// can run processes as another user.
func LookupRunAs(name string, euid int) (*RunAs, error) {
	u, err := lookupUser(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has a uid that is not a number (%q)", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has a gid that is not a number (%q)", name, u.Gid)
	}
	r := &RunAs{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir, euid: euid}
	if r.Name == "" {
		r.Name = u.Uid
	}
	if euid == int(uid) {
		return r, nil // already this user: nothing to switch
	}
	if euid != 0 {
		return nil, fmt.Errorf("the relay runs as uid %d, not root, so it cannot run processes as user %q (uid %d): start the relay as root, or leave user out", euid, name, uid)
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("running processes as user %q is supported on Linux only", name)
	}
	if r.Groups, err = userGroups(u, r.GID); err != nil {
		return nil, fmt.Errorf("the groups of user %q cannot be looked up: %w", name, err)
	}
	r.switches = true
	return r, nil
}

// lookupUser finds a user by name, else by a numeric uid.
func lookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err == nil {
		return u, nil
	}
	var uu user.UnknownUserError
	var ui user.UnknownUserIdError
	if errors.As(err, &uu) || errors.As(err, &ui) {
		return nil, fmt.Errorf("user %q does not exist on this machine", name)
	}
	return nil, fmt.Errorf("user %q cannot be looked up: %w", name, err)
}

// userGroups are the user's groups (numeric ids only); its primary group
// when it has none.
func userGroups(u *user.User, gid uint32) ([]uint32, error) {
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	var groups []uint32
	for _, g := range ids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			continue
		}
		groups = append(groups, uint32(n))
	}
	if len(groups) == 0 {
		groups = []uint32{gid}
	}
	return groups, nil
}

// procAttr is agentProcAttr (own process group, killed with the relay)
// with the user's credentials when the relay switches to it. The kernel
// keeps Pdeathsig: os/exec sets it after the credentials.
func (r *RunAs) procAttr() *syscall.SysProcAttr {
	a := agentProcAttr()
	if r != nil && r.switches {
		a.Credential = &syscall.Credential{Uid: r.UID, Gid: r.GID, Groups: append([]uint32(nil), r.Groups...)}
	}
	return a
}

// withEnv adds HOME, USER and LOGNAME of the user to a provider's env (a
// fresh copy) unless it sets them; nil *RunAs leaves env as it is.
func (r *RunAs) withEnv(env map[string]string) map[string]string {
	if r == nil {
		return env
	}
	out := make(map[string]string, len(env)+3)
	for k, v := range env {
		out[k] = v
	}
	for k, v := range map[string]string{"HOME": r.Home, "USER": r.Name, "LOGNAME": r.Name} {
		if _, set := out[k]; !set && v != "" {
			out[k] = v
		}
	}
	return out
}

// stateDir is the default state folder of an agent CLI provider run as
// another user: in the temp folder (the relay's own cache folder is usually
// in a home the user cannot enter), named after the relay's and the user's
// uids; "" when the relay does not switch (the usual default applies).
func (r *RunAs) stateDir() string {
	if r == nil || !r.switches {
		return ""
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("relay-agents-%d-as-%d", r.euid, r.UID))
}

// reach lets the user pass through one of the relay's own folders (MCP
// config files, state): it must be a real folder (not a link) owned by the
// relay; it gets the search bit for group and others (0711 from 0700) and
// nothing else, so the user can open the files handed to it by name but
// cannot list the folder. A folder owned by someone else is refused: its
// owner could swap what the relay writes there.
func (r *RunAs) reach(dir string) error {
	if r == nil || !r.switches {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if int(st.Uid) != r.euid {
		return fmt.Errorf("%s belongs to uid %d, not to the relay (uid %d): the relay writes files for user %q only in a folder of its own", dir, st.Uid, r.euid, r.Name)
	}
	if m := fi.Mode().Perm(); m&0o011 != 0o011 {
		if err := os.Chmod(dir, m|0o011); err != nil {
			return err
		}
	}
	return r.files(func() error { // and every folder above it lets the user pass
		if _, err := os.Stat(dir + "/."); err != nil {
			return fmt.Errorf("user %q cannot reach %s (every folder above it must let it pass): %w", r.Name, dir, err)
		}
		return nil
	})
}

// own hands a file the relay created (still open) to the user, keeping its
// mode (0600): fchown, no path to race on.
func (r *RunAs) own(f *os.File) error {
	if r == nil || !r.switches {
		return nil
	}
	return f.Chown(int(r.UID), int(r.GID))
}

// ownIn hands name (a folder or file below root) to the user. Lchown: a link
// the user put there is not followed.
func (r *RunAs) ownIn(root *os.Root, name string) error {
	if r == nil || !r.switches {
		return nil
	}
	return root.Lchown(name, int(r.UID), int(r.GID))
}

// mkdirIn makes the folder name below root (0700) unless it exists.
func mkdirIn(root *os.Root, name string) error {
	if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
