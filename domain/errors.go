package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/oar/relay/store"
)

// Error codes (SPEC §15). The set is closed.
const (
	CodeInvalidInput        = "REMOTE_RELAY_INVALID_INPUT"
	CodeNotFound            = "REMOTE_RELAY_NOT_FOUND"
	CodeUnknownRelay        = "REMOTE_RELAY_UNKNOWN_RELAY"
	CodeLocked              = "REMOTE_RELAY_LOCKED"
	CodeDisabled            = "REMOTE_RELAY_DISABLED"
	CodePermission          = "REMOTE_RELAY_PERMISSION"
	CodeNotAccepting        = "REMOTE_RELAY_NOT_ACCEPTING"
	CodeNoActiveTurn        = "REMOTE_RELAY_NO_ACTIVE_TURN"
	CodeForbidden           = "REMOTE_RELAY_FORBIDDEN"
	CodeSelf                = "REMOTE_RELAY_SELF"
	CodeSessionLimit        = "REMOTE_RELAY_SESSION_LIMIT"
	CodeLimit               = "REMOTE_RELAY_LIMIT"
	CodeScheduleLimit       = "REMOTE_RELAY_SCHEDULE_LIMIT"
	CodeQuestionLimit       = "REMOTE_RELAY_QUESTION_LIMIT"
	CodeHopLimit            = "REMOTE_RELAY_HOP_LIMIT"
	CodeBusy                = "REMOTE_RELAY_BUSY"
	CodeUnknownModel        = "REMOTE_RELAY_UNKNOWN_MODEL"
	CodeUnknownGroup        = "REMOTE_RELAY_UNKNOWN_GROUP"
	CodeProviderUnavailable = "REMOTE_RELAY_PROVIDER_UNAVAILABLE"
	CodeUnsupported         = "REMOTE_RELAY_UNSUPPORTED"
	CodeOffline             = "REMOTE_RELAY_OFFLINE"
	CodeAuth                = "REMOTE_RELAY_AUTH"
	CodeUnavailable         = "REMOTE_RELAY_UNAVAILABLE"
	CodeInternal            = "REMOTE_RELAY_INTERNAL"
)

// Error is a domain failure with a code from §15, a sentence for the agent
// and optional extra result fields (suggestions, models, groups…), each
// as JSON.
type Error struct {
	Code   string
	Msg    string
	Fields map[string]json.RawMessage
	cause  error
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

// ServerFault reports whether the failure is the relay's own (INTERNAL, or
// UNAVAILABLE: the store does not answer), logged with its cause (R18.9;
// the process's log handler rate-limits the store's, R25.3).
func (e *Error) ServerFault() bool { return e.Code == CodeInternal || e.Code == CodeUnavailable }

func (e *Error) Unwrap() error { return e.cause }

// Errorf builds an Error.
func Errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// With adds a result field to an Error, encoded.
func (e *Error) With(k string, v any) *Error {
	if e.Fields == nil {
		e.Fields = map[string]json.RawMessage{}
	}
	e.Fields[k] = mustJSON(v)
	return e
}

// internal wraps an unexpected error: the agent sees a plain sentence, the
// log the detail, which starts with op, the step that failed ("ask: AddAsk").
// A store that does not answer is REMOTE_RELAY_UNAVAILABLE instead (R25.3),
// its short cause in the sentence.
func internal(op string, err error) *Error {
	if op != "" {
		err = fmt.Errorf("%s: %w", op, err)
	}
	if cause, ok := store.Unreachable(err); ok {
		return unavailable(cause, err)
	}
	return &Error{Code: CodeInternal, Msg: "Something went wrong inside the relay; the log has the detail. Nothing was done.", cause: err}
}

// unavailable is a failure because the store does not answer (R25.3): the
// caller may try again, nothing was changed.
func unavailable(cause string, err error) *Error {
	return &Error{Code: CodeUnavailable, Msg: "The relay's store does not answer (" + cause + "); nothing was changed.", cause: err}
}

// internalAfter is an unexpected failure after the effect happened: the
// sentence says what was done, so the agent does not repeat it.
func internalAfter(err error, done string) *Error {
	return &Error{Code: CodeInternal, Msg: "Something went wrong inside the relay after " + done + "; the log has the detail.", cause: err}
}

// AsError converts any error into an *Error (unknown ones become INTERNAL).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return internal("", err)
}

// maxChars refuses a text argument longer than max characters (R18.5).
func maxChars(name, v string, max int, nothing string) *Error {
	if n := utf8.RuneCountInString(v); n > max {
		return Errorf(CodeInvalidInput, "%s may have at most %s characters (got %s). %s", name, thousands(max), thousands(n), nothing)
	}
	return nil
}

// thousands writes n with commas: 32000 → "32,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// closedCodes is R15's closed set of error codes.
var closedCodes = map[string]bool{
	CodeInvalidInput: true, CodeNotFound: true, CodeUnknownRelay: true, CodeLocked: true, CodeDisabled: true,
	CodePermission: true, CodeNotAccepting: true, CodeNoActiveTurn: true, CodeForbidden: true, CodeSelf: true,
	CodeSessionLimit: true, CodeLimit: true, CodeScheduleLimit: true, CodeQuestionLimit: true, CodeHopLimit: true,
	CodeBusy: true, CodeUnknownModel: true, CodeUnknownGroup: true, CodeProviderUnavailable: true,
	CodeUnsupported: true, CodeOffline: true, CodeAuth: true, CodeUnavailable: true, CodeInternal: true,
}

// KnownCode reports whether code is one of R15's codes.
func KnownCode(code string) bool { return closedCodes[code] }

// maxRemoteCode is the longest remoteCode a paired relay's code may give (R18.32).
const maxRemoteCode = 64

// remoteCodeOf is a paired relay's own code as the field remoteCode keeps
// it: at most 64 characters of [A-Z0-9_], else nothing (R18.32).
func remoteCodeOf(code string) string {
	if code == "" || len(code) > maxRemoteCode {
		return ""
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return ""
		}
	}
	return code
}

// closedPeerError makes e, an error a paired relay answered, one of R15's
// codes (R18.32): a code outside the set becomes REMOTE_RELAY_INTERNAL with
// the peer's code in remoteCode (when it is a code at all), and a remoteCode
// the peer sent itself is kept only when it is one.
func closedPeerError(e *Error) *Error {
	if rc, ok := e.Fields["remoteCode"]; ok {
		var s string
		_ = json.Unmarshal(rc, &s) // not a string: no code
		if s = remoteCodeOf(s); s == "" {
			delete(e.Fields, "remoteCode")
		} else {
			e.Fields["remoteCode"] = mustJSON(s)
		}
	}
	if closedCodes[e.Code] {
		return e
	}
	peerCode := remoteCodeOf(e.Code)
	e.Code = CodeInternal
	if peerCode != "" {
		e = e.With("remoteCode", peerCode)
	} else if e.Fields != nil {
		delete(e.Fields, "remoteCode")
	}
	return e
}
