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
	folder, dir, err := sandboxFolders(cmd, folder)
	if err != nil {
		return nil, err
	}
	b := &bwrapLine{tmps: []string{"/tmp"}, a: []string{s.Bwrap,
		"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"}}
	b.tempDir()
	b.named = s.namedMounts(folder)
	b.mount(b.named)
	b.hide(s.Hide, closedTo(cmd, s.Hide))
	b.remountHidden()
	b.bind(binds)
	b.program(cmd.Path, dir)
	b.a = append(b.a, "--chdir", dir, "--", cmd.Path)
	if len(cmd.Args) > 1 {
		b.a = append(b.a, cmd.Args[1:]...)
	}
	return b.a, nil
}

// sandboxFolders are the session's folder (cmd's Dir when none is given;
// it must be absolute) and the folder cmd runs in (the session's when cmd
// names none), clean.
func sandboxFolders(cmd *exec.Cmd, folder string) (string, string, error) {
	if folder == "" {
		folder = cmd.Dir
	}
	if folder == "" || !filepath.IsAbs(folder) {
		return "", "", errors.New("sandbox: the session has no absolute folder to run in")
	}
	folder = filepath.Clean(folder)
	dir := cmd.Dir
	if dir == "" {
		dir = folder
	}
	return folder, dir, nil
}

// bwrapLine is a bwrap command line being built.
type bwrapLine struct {
	a      []string
	tmps   []string       // the fresh tmpfs folders: /tmp and the temp folder
	named  []sandboxMount // the folders named on purpose: the session's, sandbox_rw and sandbox_ro
	hidden []string       // the relay's paths hidden
}

// sandboxMount is one bind mount: --bind or --ro-bind of path on itself.
type sandboxMount struct {
	flag, path string
}

// namedMounts are the session's folder and the sandbox's RW and RO paths.
func (s *Sandbox) namedMounts(folder string) []sandboxMount {
	named := []sandboxMount{{"--bind", folder}}
	for _, p := range s.RW {
		named = append(named, sandboxMount{"--bind", filepath.Clean(p)})
	}
	for _, p := range s.RO {
		named = append(named, sandboxMount{"--ro-bind", filepath.Clean(p)})
	}
	return named
}

// tempDir gives the relay's temp folder, when it is not under /tmp, a fresh
// tmpfs too.
func (b *bwrapLine) tempDir() {
	td := filepath.Clean(os.TempDir())
	if td == "/tmp" || !filepath.IsAbs(td) || under(td, "/tmp") {
		return
	}
	if fi, err := os.Stat(td); err == nil && fi.IsDir() {
		b.a = append(b.a, "--tmpfs", td)
		b.tmps = append(b.tmps, td)
	}
}

func (b *bwrapLine) mount(ms []sandboxMount) {
	for _, m := range ms {
		b.a = append(b.a, m.flag, m.path, m.path)
	}
}

// hide covers each of the relay's paths that exists (its real path, once):
// a folder by an empty tmpfs, a file by /dev/null. A path the command's
// user cannot reach (closed) needs no hiding; / and the tmpfs folders are
// never hidden.
func (b *bwrapLine) hide(paths []string, closed map[string]bool) {
	for _, h := range paths {
		if h == "" || !filepath.IsAbs(h) || closed[h] {
			continue
		}
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue // nothing there to hide
		}
		fi, err := os.Stat(real)
		if err != nil || real == "/" || contains(b.tmps, real) || contains(b.hidden, real) {
			continue
		}
		b.hidden = append(b.hidden, real)
		if fi.IsDir() {
			b.a = append(b.a, "--tmpfs", real)
		} else {
			b.a = append(b.a, "--ro-bind", "/dev/null", real)
		}
	}
}

// remountHidden mounts a named folder inside a hidden path again: it was
// named on purpose.
func (b *bwrapLine) remountHidden() {
	for _, m := range b.named {
		if b.inHidden(m.path) {
			b.mount([]sandboxMount{m})
		}
	}
}

func (b *bwrapLine) inHidden(p string) bool {
	for _, h := range b.hidden {
		if under(p, h) {
			return true
		}
	}
	return false
}

// bind mounts the turn's own files (absolute paths only).
func (b *bwrapLine) bind(binds []sandboxBind) {
	for _, sb := range binds {
		if sb.path == "" || !filepath.IsAbs(sb.path) {
			continue
		}
		if sb.rw {
			b.a = append(b.a, "--bind", sb.path, sb.path)
		} else {
			b.a = append(b.a, "--ro-bind", sb.path, sb.path)
		}
	}
}

// program shows the program itself (read-only) when it lies under a tmpfs
// or a hidden path and in no named folder.
func (b *bwrapLine) program(path, dir string) {
	prog := path
	if !filepath.IsAbs(prog) && strings.Contains(prog, "/") {
		prog = filepath.Join(dir, prog)
	}
	if !filepath.IsAbs(prog) {
		return
	}
	prog = filepath.Clean(prog)
	for _, m := range b.named {
		if under(prog, m.path) {
			return
		}
	}
	for _, h := range append(b.tmps, b.hidden...) {
		if under(prog, h) {
			b.a = append(b.a, "--ro-bind", prog, prog)
			return
		}
	}
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
