package domain

import "encoding/json"

// A paired relay's answers (R13.1), read into typed values. Its result
// envelope is kept as it wrote each field (peerAnswer); what this relay
// acts on is decoded leniently, as a relay of another version may write
// more, less or another type: a field that does not decode is left zero.

// peerAnswer is a paired relay's result envelope: its fields as it wrote them.
type peerAnswer = map[string]json.RawMessage

// answerOK reads an envelope's ok: found (a true or false), and its value.
func answerOK(env peerAnswer) (found, ok bool) {
	var v *bool
	if json.Unmarshal(env["ok"], &v) != nil || v == nil {
		return false, false
	}
	return true, *v
}

// decodeLoose decodes raw into v as far as it goes (a field of another
// type is left zero); it reports whether raw decoded whole.
func decodeLoose(raw json.RawMessage, v any) bool {
	return len(raw) > 0 && json.Unmarshal(raw, v) == nil
}

// looseList is a JSON list's items, nil for anything but a list.
func looseList(raw json.RawMessage) []json.RawMessage {
	var items []json.RawMessage
	if !decodeLoose(raw, &items) {
		return nil
	}
	return items
}

// looseStrings are the texts of a JSON list (its other items left out).
func looseStrings(raw json.RawMessage) []string {
	var out []string
	for _, x := range looseList(raw) {
		var s string
		if json.Unmarshal(x, &s) == nil && string(x) != "null" {
			out = append(out, s)
		}
	}
	return out
}

// answeredSessionRef is a session a paired relay's subscription names.
type answeredSessionRef struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// answeredSubscription is a subscription as a paired relay answers it
// (subscribe, list_subscriptions, transfer_subscriptions).
type answeredSubscription struct {
	ID        string          `json:"id"`
	Sessions  json.RawMessage `json:"sessions"` // a list of answeredSessionRef, or "all"
	Exclude   json.RawMessage `json:"exclude"`
	Once      bool            `json:"once"`
	MovedFrom string          `json:"movedFrom"`
	// StalledMinutes and HeartbeatMinutes are nil when absent (or not numbers).
	StalledMinutes   *float64 `json:"stalledMinutes"`
	HeartbeatMinutes *float64 `json:"heartbeatMinutes"`
}

// sessionRefs are the sessions it names (none for "all").
func (s *answeredSubscription) sessionRefs() []answeredSessionRef {
	var out []answeredSessionRef
	for _, x := range looseList(s.Sessions) {
		var ref answeredSessionRef
		decodeLoose(x, &ref)
		out = append(out, ref)
	}
	return out
}

// answeredQuestion is an ask as a paired relay's list_questions answers it.
type answeredQuestion struct {
	QuestionID string `json:"question_id"`
	Status     string `json:"status"`
	Answer     string `json:"answer"`
	Choice     string `json:"choice"`
	Via        string `json:"via"`
}

// pairedAnswer is a paired relay's answer to the owner's answer of an ask
// there, as the owner API passes it on: that relay's JSON (of its version),
// with relay added; its JSON null is no field.
func pairedAnswer(raw map[string]json.RawMessage, relayName string) map[string]any {
	out := make(map[string]any, len(raw)+1)
	for k, v := range raw {
		var x any
		if json.Unmarshal(v, &x) == nil {
			out[k] = x
		}
	}
	out["relay"] = relayName
	return out
}

// encodedAnswer is an envelope as the paired relay wrote it, each field
// decoded and encoded again (as this relay writes it on: objects' keys in
// order, numbers as Go writes them).
func encodedAnswer(env map[string]json.RawMessage) peerAnswer {
	out := make(peerAnswer, len(env))
	for k, raw := range env {
		var v any
		_ = json.Unmarshal(raw, &v) // the envelope decoded: each field is JSON
		out[k] = mustJSON(v)
	}
	return out
}
