package provider

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// cmdCheck answers whether a provider's command can be started, looked up
// at most every 10 s (Info is called on every list of providers). The agent
// CLI and ACP providers share it; what names the command in the reason
// ("the claude-code command", "the ACP agent command") is theirs.
type cmdCheck struct {
	mu      sync.Mutex
	checked time.Time
	status  string
	reason  string
}

// get returns StatusUnavailable and why when name (the command's first
// word) is empty, not on env's PATH, or a path that is no executable file;
// else "", "".
func (c *cmdCheck) get(what, name string, env func() []string) (string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked.IsZero() && time.Since(c.checked) < 10*time.Second {
		return c.status, c.reason
	}
	c.checked = time.Now()
	c.status, c.reason = "", ""
	if name == "" {
		c.status, c.reason = StatusUnavailable, "no command is configured"
		return c.status, c.reason
	}
	path, err := lookPath(name, env())
	if err == nil && strings.Contains(name, "/") {
		fi, serr := os.Stat(path)
		if serr != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			err = errors.New("missing")
		}
	}
	if err != nil {
		c.status = StatusUnavailable
		if strings.Contains(name, "/") {
			c.reason = fmt.Sprintf("%s %q does not exist or is not executable", what, name)
		} else {
			c.reason = fmt.Sprintf("%s %q was not found on PATH", what, name)
		}
	}
	return c.status, c.reason
}
