//go:build linux

package provider

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// wrap turns cmd into its run inside the sandbox (R18.31): bwrap with the
// same environment, process attributes and pipes, and the command after
// "--". folder is the session's folder (writable); binds are the turn's own
// files. A nil Sandbox leaves cmd as it is. When the sandbox cannot be
// built, cmd.Err is set and Start fails: nothing runs unconfined.
func (s *Sandbox) wrap(cmd *exec.Cmd, folder string, binds ...sandboxBind) {
	if s == nil {
		return
	}
	args, err := s.args(cmd, folder, binds)
	if err != nil {
		cmd.Err = err
		return
	}
	cmd.Path = s.Bwrap
	cmd.Args = args
}

// args is the bwrap command line that runs cmd confined. Mounts apply in
// order, a later one over an earlier one:
//
//   - / read-only, a fresh /dev, the sandbox's own /proc (its PID namespace:
//     no other process, no other /proc/PID/environ), a fresh tmpfs on /tmp;
//   - the session's folder and sandbox_rw writable, sandbox_ro read-only;
//   - the relay's own paths (data directory, config file, MCP config and
//     state folders) hidden: an empty tmpfs over a folder, /dev/null over a
//     file; the folder or a sandbox path inside one of them is mounted
//     again after, as it was named on purpose;
//   - the turn's own files (its MCP config, a Gemini CLI home) and the
//     program itself when it lies under /tmp or a hidden path.
//
// --unshare-pid with --die-with-parent: the sandbox ends with bwrap, so
// killing the process group (bwrap) still ends everything in it.
// --new-session: no controlling terminal (TIOCSTI). --cap-drop ALL: a relay
// run as root does not hand root's capabilities (remount, umount) in. The
// network is shared: the agent reaches the relay's MCP route on loopback.
func (s *Sandbox) args(cmd *exec.Cmd, folder string, binds []sandboxBind) ([]string, error) {
	if s.Bwrap == "" {
		return nil, errors.New("sandbox: no bwrap binary")
	}
	if folder == "" {
		folder = cmd.Dir
	}
	if folder == "" || !filepath.IsAbs(folder) {
		return nil, errors.New("sandbox: the session has no absolute folder to run in")
	}
	folder = filepath.Clean(folder)
	dir := cmd.Dir
	if dir == "" {
		dir = folder
	}
	a := []string{s.Bwrap,
		"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"}
	tmps := []string{"/tmp"}
	if td := filepath.Clean(os.TempDir()); td != "/tmp" && filepath.IsAbs(td) && !under(td, "/tmp") {
		if fi, err := os.Stat(td); err == nil && fi.IsDir() {
			a = append(a, "--tmpfs", td)
			tmps = append(tmps, td)
		}
	}
	type mount struct {
		flag, path string
	}
	named := []mount{{"--bind", folder}}
	for _, p := range s.RW {
		named = append(named, mount{"--bind", filepath.Clean(p)})
	}
	for _, p := range s.RO {
		named = append(named, mount{"--ro-bind", filepath.Clean(p)})
	}
	for _, m := range named {
		a = append(a, m.flag, m.path, m.path)
	}
	var hidden []string
	closed := closedTo(cmd, s.Hide)
	for _, h := range s.Hide {
		if h == "" || !filepath.IsAbs(h) || closed[h] {
			continue
		}
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue // nothing there to hide
		}
		fi, err := os.Stat(real)
		if err != nil || real == "/" || contains(tmps, real) || contains(hidden, real) {
			continue
		}
		hidden = append(hidden, real)
		if fi.IsDir() {
			a = append(a, "--tmpfs", real)
		} else {
			a = append(a, "--ro-bind", "/dev/null", real)
		}
	}
	for _, m := range named {
		for _, h := range hidden {
			if under(m.path, h) {
				a = append(a, m.flag, m.path, m.path)
				break
			}
		}
	}
	for _, b := range binds {
		if b.path == "" || !filepath.IsAbs(b.path) {
			continue
		}
		if b.rw {
			a = append(a, "--bind", b.path, b.path)
		} else {
			a = append(a, "--ro-bind", b.path, b.path)
		}
	}
	prog := cmd.Path
	if !filepath.IsAbs(prog) && strings.Contains(prog, "/") {
		prog = filepath.Join(dir, prog)
	}
	if filepath.IsAbs(prog) {
		prog = filepath.Clean(prog)
		shown := false
		for _, m := range named {
			if under(prog, m.path) {
				shown = true
				break
			}
		}
		if !shown {
			for _, h := range append(tmps, hidden...) {
				if under(prog, h) {
					a = append(a, "--ro-bind", prog, prog)
					break
				}
			}
		}
	}
	a = append(a, "--chdir", dir, "--", cmd.Path)
	if len(cmd.Args) > 1 {
		a = append(a, cmd.Args[1:]...)
	}
	return a, nil
}

// under reports whether p is dir or lies below it (both clean and absolute).
func under(p, dir string) bool {
	if p == dir || dir == "/" {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// closedTo are the paths of hide that the user cmd runs as (the provider's
// user, R18.26) cannot even reach, e.g. a data directory under root's 0700
// home: bwrap, run as that user, could not mount over them, and there is
// nothing to hide from a user the file system already keeps out. Nil when
// cmd runs as the relay's own user.
func closedTo(cmd *exec.Cmd, hide []string) map[string]bool {
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.Credential == nil {
		return nil
	}
	c := cmd.SysProcAttr.Credential
	as := &RunAs{Name: strconv.FormatUint(uint64(c.Uid), 10), UID: c.Uid, GID: c.Gid, Groups: c.Groups, switches: true}
	closed := map[string]bool{}
	_ = as.files(func() error {
		for _, h := range hide {
			if _, err := os.Lstat(h); errors.Is(err, fs.ErrPermission) {
				closed[h] = true
			}
		}
		return nil
	})
	return closed
}
