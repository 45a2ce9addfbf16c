package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	acp "github.com/coder/acp-go-sdk"
)

// ---- files (R22.5, R18.25, R18.27) ----

// acpReadMax bounds one fs/read_text_file answer (R18.27): a larger part of
// a file is refused (the agent reads it in parts with line and limit), and
// no read holds more than this of a file in memory.
const acpReadMax = 1 << 20

// acpReadScan bounds how much of a file one read goes through to find its
// line (a sparse file of a petabyte would keep a relay goroutine reading).
const acpReadScan = 1 << 30

// acpFolder is a turn's session folder opened as an os.Root (R18.25): every
// file the agent reads or writes, and every terminal folder, is opened
// through it, so a link that leads out (dangling or not), a link made or a
// folder swapped during the turn, or a race between a check and the open can
// never reach outside the folder (openat2 with RESOLVE_BENEATH semantics).
type acpFolder struct {
	root *os.Root
	dir  string      // the session's folder as the session names it
	real string      // the same with its links resolved when the turn started
	info os.FileInfo // the opened folder itself
}

// openFolder opens the session's folder for one turn.
func openFolder(cwd string) (*acpFolder, error) {
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, err
	}
	info, err := root.Stat(".")
	if err != nil {
		_ = root.Close()
		return nil, err
	}
	return &acpFolder{root: root, dir: filepath.Clean(cwd), real: real, info: info}, nil
}

func (fo *acpFolder) close() { _ = fo.root.Close() }

// outside is the error of a path that leads out of the folder.
func (fo *acpFolder) outside(path string) error {
	return fmt.Errorf("the path %q is outside the session's folder %s", path, fo.dir)
}

// rel turns the agent's absolute path into a path relative to the folder;
// a path that is lexically outside it is refused here, a link that leads
// out is refused by the root.
func (fo *acpFolder) rel(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("the path %q is not absolute", path)
	}
	clean := filepath.Clean(path)
	for _, base := range []string{fo.dir, fo.real} {
		r, err := filepath.Rel(base, clean)
		if err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return r, nil
		}
	}
	return "", fo.outside(path)
}

// pathErr says what went wrong with a path opened through the root.
func (fo *acpFolder) pathErr(path string, err error) error {
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w (a link may not lead out of it, nor be absolute)", fo.outside(path))
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("the path %q cannot be opened: %w", path, err)
}

// openRead opens a regular file of the folder for reading. O_NONBLOCK: a
// FIFO the agent made must not hold the request forever.
func (fo *acpFolder) openRead(path string) (*os.File, error) {
	rel, err := fo.rel(path)
	if err != nil {
		return nil, err
	}
	f, err := fo.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fo.pathErr(path, err)
	}
	if err := regular(f, path); err != nil {
		_ = f.Close() // read only
		return nil, err
	}
	return f, nil
}

func regular(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("the path %q is not a regular file", path)
	}
	return nil
}

// write writes a file of the folder, its parents made.
func (fo *acpFolder) write(path, content string) error {
	rel, err := fo.rel(path)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("the path %q is the session's folder itself", path)
	}
	if d := filepath.Dir(rel); d != "." {
		if err := fo.root.MkdirAll(d, 0o755); err != nil {
			return fo.pathErr(path, err)
		}
	}
	f, err := fo.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return fo.pathErr(path, err)
	}
	if err := regular(f, path); err != nil {
		_ = f.Close() // nothing was written
		return err
	}
	if _, err := io.WriteString(f, content); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}

// subdir resolves a terminal's folder (R22.4) through the root: the folder
// opened beneath the root, its path read back from the open descriptor
// ("/proc/self/fd/N", which names the directory itself, not a path).
func (fo *acpFolder) subdir(path string) (string, error) {
	rel, err := fo.rel(path)
	if err != nil {
		return "", err
	}
	f, err := fo.root.Open(rel)
	if err != nil {
		return "", fo.pathErr(path, err)
	}
	defer func() { _ = f.Close() }() // read only
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("the path %q is not a folder", path)
	}
	// Where the folder opened beneath the root is now (after a rename of
	// the session's folder: its new place). The command's chdir goes by
	// this path a moment later: a terminal is a command the agent runs,
	// confined by the sandbox (R18.26, R18.31), not by its folder.
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !filepath.IsAbs(real) {
		return "", fmt.Errorf("the folder %q cannot be resolved: %w", path, err)
	}
	return real, nil
}

// fileTurn is the running turn a file or terminal request belongs to.
func (pr *acpProc) fileTurn() (*acpTurn, error) {
	at := pr.turn()
	if at == nil || at.folder == nil {
		return nil, acp.NewInvalidRequest(map[string]any{"error": "no turn of this session is running"})
	}
	return at, nil
}

// ReadTextFile reads a file inside the session's folder (R22.5): line and
// limit checked (R18.27), the file read line by line, never more than
// acpReadMax of it held.
func (pr *acpProc) ReadTextFile(ctx context.Context, req acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	pr.touch()
	at, err := pr.fileTurn()
	if err != nil {
		return acp.ReadTextFileResponse{}, err
	}
	line, limit := 0, 0
	if req.Line != nil {
		line = *req.Line
	}
	if req.Limit != nil {
		limit = *req.Limit
	}
	if line < 0 || limit < 0 {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": "line and limit may not be negative"})
	}
	var f *os.File
	err = pr.p.c.User.files(func() (err error) { f, err = at.folder.openRead(req.Path); return err }) // as the agent's user (R18.26)
	if err != nil {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	defer func() { _ = f.Close() }() // read only
	content, err := readLines(ctx, f, line, limit, acpReadMax, acpReadScan)
	if errors.Is(err, errReadTooLarge) {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf(
			"the part of %q asked for is larger than %d bytes, the most one read answers: read it in parts with line and limit", req.Path, acpReadMax)})
	}
	if errors.Is(err, errReadTooFar) {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf(
			"line %d of %q is not within its first %d bytes, the most one read goes through", line, req.Path, acpReadScan)})
	}
	if err != nil {
		return acp.ReadTextFileResponse{}, acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	return acp.ReadTextFileResponse{Content: content}, nil
}

var (
	errReadTooLarge = errors.New("the answer would be too large")
	errReadTooFar   = errors.New("the line is too far into the file")
)

// readLines reads from line (1-based; 0 is the start) at most limit lines
// (0: all), and fails with errReadTooLarge past maxBytes of answer and with
// errReadTooFar when the line starts past maxScan bytes. Lines are counted,
// never added to one another: no number from the agent can overflow.
func readLines(ctx context.Context, r io.Reader, line, limit, maxBytes, maxScan int) (string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	scanned := 0
	for at := 1; at < line; {
		b, err := br.ReadSlice('\n')
		if scanned += len(b); scanned > maxScan {
			return "", errReadTooFar
		}
		if cerr := ctx.Err(); cerr != nil {
			return "", cerr
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue // the same line goes on
		case errors.Is(err, io.EOF):
			return "", nil // the file ends before line
		case err != nil:
			return "", err
		}
		at++
	}
	var out []byte
	for n := 0; limit == 0 || n < limit; {
		b, err := br.ReadSlice('\n')
		if len(out)+len(b) > maxBytes {
			return "", errReadTooLarge
		}
		out = append(out, b...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return string(out), nil
		case err != nil:
			return "", err
		}
		n++
	}
	return string(out), nil
}

// WriteTextFile writes a file inside the session's folder (parents made);
// mode plan writes nothing (R22.3).
func (pr *acpProc) WriteTextFile(_ context.Context, req acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	pr.touch()
	at, err := pr.fileTurn()
	if err != nil {
		return acp.WriteTextFileResponse{}, err
	}
	if at.t.Mode == "plan" {
		return acp.WriteTextFileResponse{}, acp.NewInvalidRequest(map[string]any{"error": "the session is in plan mode: it writes no files"})
	}
	if err := pr.p.c.User.files(func() error { return at.folder.write(req.Path, req.Content) }); err != nil { // as the agent's user (R18.26)
		return acp.WriteTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return acp.WriteTextFileResponse{}, nil
}
