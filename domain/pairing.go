package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/peer"
	"github.com/oar/relay/store"
)

// Pairing in the owner API (§12, R13.1a: its requests here, the operations
// the link's, in peer.go), mentions (R4.4) and list_relays.

// PairRequest is POST /api/v1/relays.
type PairRequest struct {
	Name       string `json:"name"`
	URL        string `json:"url"`
	Token      string `json:"token"`
	Permission string `json:"permission"`
}

// RelayPatch is PATCH /api/v1/relays/{name}.
type RelayPatch struct {
	Permission *string `json:"permission"`
	URL        *string `json:"url"`
	Token      *string `json:"token"`
}

var relayNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// checkPeerURL applies R4.10: https, or http only to loopback and private ranges.
func checkPeerURL(raw string) (*url.URL, string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, "", Errorf(CodeInvalidInput, "url is required: the other relay's address, like https://build-box.example.com. Nothing was paired.")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, "", Errorf(CodeInvalidInput, "url %q is not an http(s) address like https://build-box.example.com. Nothing was paired.", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, "", Errorf(CodeInvalidInput, "url %q may not carry a user, a query or a fragment: give the relay's base address. Nothing was paired.", raw)
	}
	host := u.Hostname()
	if u.Scheme == "http" && !privateHost(host) {
		return nil, "", Errorf(CodeInvalidInput, "url %q uses plain http:// on a public address; a paired relay must use https:// (http:// is accepted only for loopback and private networks: 127.0.0.0/8, ::1, 10/8, 172.16/12, 192.168/16, fc00::/7). Nothing was paired.", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, strings.ToLower(host), nil
}

// privateHost: loopback and private ranges by address; a name only when it is
// localhost or resolves to such addresses alone.
func privateHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.IsLoopback() || a.IsPrivate()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		a = a.Unmap()
		if !a.IsLoopback() && !a.IsPrivate() {
			return false
		}
	}
	return true
}

// Mentions (R4.4, R13.1a): a pairing's name or host as a word, or with a
// leading @; a name or host that is an IP address or localhost only with @.

func mentioned(text, word string) bool {
	if word == "" {
		return false
	}
	atOnly := strings.EqualFold(word, "localhost") || net.ParseIP(word) != nil
	lt, lw := strings.ToLower(text), strings.ToLower(word)
	for i := 0; ; {
		j := strings.Index(lt[i:], lw)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(lw)
		i = start + 1
		if mentionAt(lt, start, end, atOnly) {
			return true
		}
	}
}

// mentionAt reports whether the word found at lt[start:end] is a mention:
// a whole word, or after @ (then only, when atOnly), and not an e-mail address.
func mentionAt(lt string, start, end int, atOnly bool) bool {
	at := start > 0 && lt[start-1] == '@'
	switch {
	case atOnly && !at:
		return false
	case start > 0 && !at && isWordByte(lt[start-1]):
		return false
	case end < len(lt) && (isWordByte(lt[end]) || (lt[end] == '.' && end+1 < len(lt) && isWordByte(lt[end+1]))):
		return false
	case at && start > 1 && isWordByte(lt[start-2]): // an e-mail address, not a mention
		return false
	}
	return true
}

func isWordByte(b byte) bool {
	return b == '_' || b == '-' || b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')
}

// unlockMentions unlocks, in a conversation, the paired relays the owner's text mentions.
func (r *Relay) unlockMentions(ctx context.Context, sid, text string) {
	ps, err := r.st.Pairings(ctx)
	if err != nil {
		r.log.Warn("pairings unreadable; mentions not checked", "session", sid, "err", err)
		return
	}
	var names []string
	for _, p := range ps {
		if mentioned(text, p.Name) || mentioned(text, p.Host) {
			names = append(names, p.Name)
		}
	}
	if err := r.st.Unlock(ctx, sid, true, names...); err != nil {
		r.log.Warn("unlock mentioned relays", "session", sid, "err", err)
	}
}

// PromptLine is the first line of a prompt an agent sent: from another
// relay's agent (R4.8), or, local, from an agent on this relay (R18.15), so
// no agent takes another agent's words for its owner's. The sender's relay,
// title and model go through LineValue (R18.16).
func PromptLine(from *store.Ref, local bool) string {
	model := LineValue(from.Model, fieldModel)
	if model == "" {
		model = "unknown model"
	}
	title := LineValue(from.Title, fieldTitle)
	if local {
		return fmt.Sprintf(`[Prompt from an agent on this relay · session "%s" · %s · acting for the user]`, title, model)
	}
	return fmt.Sprintf(`[Remote prompt from an agent on relay "%s" · session "%s" · %s · acting for the user]`, LineValue(from.Relay, fieldRelay), title, model)
}

// pairedRelays is list_relays' view of the pairings for a conversation.
func (r *Relay) pairedRelays(ctx context.Context, sid string) ([]relayEntry, int, error) {
	ps, err := r.st.Pairings(ctx)
	if err != nil {
		return nil, 0, err
	}
	links, err := r.st.Links(ctx)
	if err != nil {
		return nil, 0, err
	}
	unlocked, err := r.st.Unlocked(ctx, sid)
	if err != nil {
		return nil, 0, err
	}
	out := []relayEntry{}
	n := 0
	for _, p := range ps {
		v := pairingView(p, links)
		_, open := unlocked[strings.ToLower(p.Name)]
		if open {
			n++
		}
		out = append(out, relayEntry{Name: p.Name, URL: some(p.URL), Host: some(p.Host), Online: v.Online, Version: v.Version,
			Permission: p.Permission, Unlocked: open})
	}
	return out, n, nil
}

func quoteJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// InboxWithPaired lists this relay's open asks and, for the owner's inbox on
// request, those of every paired relay that answers (R10.3, R10.5); each
// paired one carries "relay". Relays that do not answer are named in the
// second result.
func (r *Relay) InboxWithPaired(ctx context.Context) ([]*relay.InboxAsk, []*relay.Unreachable, error) {
	list, err := r.Inbox(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range list {
		a.Relay = r.opts.Name
	}
	ps, err := r.st.Pairings(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Every paired relay at once: one that does not answer costs its timeout, not the sum.
	type answer struct {
		asks []map[string]json.RawMessage
		e    *Error
	}
	answers := make([]answer, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asks, err := r.link.peers.Inbox(ctx, peerTarget(p), r.opts.Timing.PeerTimeout)
			e := r.link.peerDone("inbox", err)
			r.link.link(ctx, p, e)
			answers[i] = answer{asks, e}
		}()
	}
	wg.Wait()
	unreachable := []*relay.Unreachable{}
	for i, p := range ps {
		if e := answers[i].e; e != nil {
			unreachable = append(unreachable, &relay.Unreachable{Relay: p.Name, Code: e.Code, Error: e.Msg})
			continue
		}
		for _, a := range peerInboxAsks(answers[i].asks) {
			a.Relay = p.Name
			list = append(list, a)
		}
	}
	return list, unreachable, nil
}

// AnswerPairedAsk answers an ask kept on a paired relay from this relay's inbox (R10.3).
// Its answer stays a map: it is that relay's JSON (of its version), passed on with "relay" added.
func (r *Relay) AnswerPairedAsk(ctx context.Context, relayName, id string, in InboxAnswer) (map[string]any, error) {
	p, err := r.remote.pairing(ctx, relayName)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, Errorf(CodeUnknownRelay, "No paired relay is named %q. Nothing was changed.", relayName)
	}
	body := peer.InboxAnswer{Answer: in.Answer, Choice: in.Choice, Dismiss: in.Dismiss, Via: r.opts.Name}
	out, err := r.link.peers.AnswerInbox(ctx, peerTarget(p), id, body, r.opts.Timing.PeerTimeout)
	e := r.link.peerDone("inbox", err)
	r.link.link(ctx, p, e)
	if e != nil {
		return nil, e
	}
	r.notify(ctx, "inbox") // every open console page drops it (R19.6)
	return pairedAnswer(out, p.Name), nil
}

// anyPairing reports whether at least one relay is paired (an unreadable
// list counts as none: the agent is then offered no tool this turn).
func (r *Relay) anyPairing(ctx context.Context) bool {
	n, err := r.st.PairingCount(ctx)
	return err == nil && n > 0
}
