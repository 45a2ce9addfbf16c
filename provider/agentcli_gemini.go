package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// geminiDialect drives Gemini CLI (gemini -p … -o stream-json).
//
// Each session has its own GEMINI_CLI_HOME under StateDir (its chats stay
// there for --resume) with a settings file written at every turn: API-key
// auth, no usage statistics, telemetry or auto-update, and the relay's MCP
// server as mcpServers.relay {httpUrl, headers Authorization: Bearer
// ${RELAY_TOKEN}, trust: true} (untrusted MCP tools are left out in -p
// mode; the token itself stays in the environment). First turn:
// --session-id UUID; later turns: --resume UUID. Mode plan: --approval-mode plan.
type geminiDialect struct{}

func (geminiDialect) defaultCommand() []string { return []string{"gemini"} }

// GeminiHome is the GEMINI_CLI_HOME of a session's turns under stateDir.
func GeminiHome(stateDir, sessionID string) string {
	return filepath.Join(stateDir, "gemini", safeName(sessionID))
}

func (geminiDialect) prepare(p *CLI, t Turn, model string, _ *turnFiles) ([]string, []string, error) {
	home := GeminiHome(p.c.StateDir, t.SessionID)
	settings := map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"general":   map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
	}
	if mcpOn(t) {
		settings["mcpServers"] = map[string]any{"relay": map[string]any{
			"httpUrl": t.MCPURL,
			"headers": map[string]string{"Authorization": "Bearer ${RELAY_TOKEN}"},
			"trust":   true,
			"timeout": execMCPTimeoutMs,
		}}
	}
	b, _ := json.MarshalIndent(settings, "", "  ")
	if err := p.writeGeminiHome(home, b); err != nil {
		return nil, nil, err
	}
	args := []string{"--output-format=stream-json", "--skip-trust"}
	if model != "" {
		args = append(args, "--model="+model)
	}
	if t.AgentSession != "" {
		args = append(args, "--resume="+t.AgentSession)
	} else {
		args = append(args, "--session-id="+newUUID())
	}
	if t.Mode == "plan" {
		args = append(args, "--approval-mode=plan")
	}
	args = append(args, p.c.Args...)
	args = append(args, "--prompt="+t.Prompt)
	return args, []string{"GEMINI_CLI_HOME=" + home}, nil
}

// writeGeminiHome makes the session's Gemini CLI home (0700) with its
// .gemini folder and writes settings into .gemini/settings.json (0600,
// replaced whole). With the provider's user (R18.26) the home, .gemini and
// the settings belong to that user (the CLI writes its chats there) while
// StateDir and StateDir/gemini stay the relay's; every step below the home
// goes through os.Root and a fresh O_EXCL file, so a link the user put in
// its home never makes the relay write elsewhere.
func (p *CLI) writeGeminiHome(home string, settings []byte) error {
	h, err := p.openGeminiHome(home)
	if err != nil {
		return fmt.Errorf("gemini home: %w", err)
	}
	defer func() { _ = h.Close() }() // a directory handle: nothing to flush
	if err := p.writeGeminiSettings(h, settings); err != nil {
		return fmt.Errorf("gemini settings: %w", err)
	}
	return nil
}

// openGeminiHome makes the home and its .gemini folder, the provider's
// user's, and opens the home.
func (p *CLI) openGeminiHome(home string) (*os.Root, error) {
	parent := filepath.Dir(home)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{p.c.StateDir, parent} {
		if err := p.c.User.reach(d); err != nil {
			return nil, err
		}
	}
	root, err := os.OpenRoot(parent)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Close() }() // a directory handle: nothing to flush
	name := filepath.Base(home)
	if err := p.userDir(root, name); err != nil {
		return nil, err
	}
	h, err := root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	if err := p.userDir(h, ".gemini"); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// userDir makes the folder name in root (unless it is there) and hands it
// to the provider's user.
func (p *CLI) userDir(root *os.Root, name string) error {
	if err := mkdirIn(root, name); err != nil {
		return err
	}
	return p.c.User.ownIn(root, name)
}

// writeGeminiSettings replaces .gemini/settings.json in the home whole: a
// fresh O_EXCL file, the user's, renamed over it.
func (p *CLI) writeGeminiSettings(h *os.Root, settings []byte) error {
	path := filepath.Join(".gemini", "settings.json")
	tmp := path + ".tmp"
	_ = h.Remove(tmp)
	f, err := h.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = p.c.User.own(f)
	if err == nil {
		_, err = f.Write(settings)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = h.Rename(tmp, path)
	}
	if err != nil {
		_ = h.Remove(tmp)
		return err
	}
	return nil
}

func (geminiDialect) event(ev map[string]any, s *stream) {
	if handle := geminiEvents[jstr(ev, "type")]; handle != nil {
		handle(ev, s)
	}
}

// geminiEvents read Gemini CLI's stream-json events, by type.
var geminiEvents = map[string]func(ev map[string]any, s *stream){
	"init": func(ev map[string]any, s *stream) {
		s.agentSession(jstr(ev, "session_id"))
		s.ranModel(jstr(ev, "model"))
	},
	"message": geminiMessage,
	"tool_use": func(ev map[string]any, s *stream) {
		s.toolCall(jstr(ev, "tool_id"), jstr(ev, "tool_name"), ev["parameters"])
		s.newSegment()
	},
	"tool_result": func(ev map[string]any, s *stream) { s.toolDone(jstr(ev, "tool_id")) },
	"error":       func(ev map[string]any, s *stream) { s.softError(jstr(ev, "message")) }, // counts only when no result follows
	"result":      geminiResult,
}

// geminiMessage: the assistant's text, whole or as a delta.
func geminiMessage(ev map[string]any, s *stream) {
	if jstr(ev, "role") != "assistant" {
		return
	}
	if d, _ := ev["delta"].(bool); !d {
		s.newSegment()
	}
	s.appendText(jstr(ev, "content"))
}

// geminiResult: the turn's end, its tokens and its error.
func geminiResult(ev map[string]any, s *stream) {
	st := jmap(ev, "stats")
	s.setUsage(int64(jnum(st, "input_tokens")), int64(jnum(st, "output_tokens")), 0)
	if jstr(ev, "status") == "error" || jstr(ev, "status") == "failure" {
		msg := jstr(ev, "error", "message")
		if msg == "" {
			msg = "the turn failed"
		}
		s.failOrLimit(msg)
	}
	s.result(s.segmentText())
}

// resumeFailed: "Error resuming session: …", exit 42 (measured, 0.61.0).
func (geminiDialect) resumeFailed(msg string) bool {
	return strings.Contains(msg, "Error resuming session")
}
