package domain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// Kill session (R23.6): the session's agent process ends, wherever it runs.
// A running turn is stopped as the owner's Stop does (it ends as stopped,
// its exec or agent-CLI process group killed with it); a kept process (acp,
// provider.Killer) is ended by whichever process of the relay holds it: the
// request goes to every process as a "kill:SID:TURN:REQ" notification, each
// answers in killack:REQ, and the asking process waits for the answers of
// the live processes (at most killAckWait). The conversation is kept: the
// next turn starts a new process, which resumes it where the provider can.

// killPrefix starts the notification of a kill request.
const killPrefix = "kill:"

// killAckWait bounds how long a kill waits for the other processes' answers.
const killAckWait = 5 * time.Second

// OwnerKill ends a session's agent process and its running turn's
// (POST /api/v1/sessions/{id}/kill): Killed says whether one ran.
func (r *Relay) OwnerKill(ctx context.Context, ref string) (*relay.SessionKilled, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	out := &relay.SessionKilled{Session: s.ID}
	if isExternal(s) { // the relay runs no process for it (R17.7)
		return out, nil
	}
	ctx = context.WithoutCancel(ctx) // asked: the kill completes even if the client goes away
	killed, err := r.killSession(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("kill session %s: %w", id8(s.ID), err)
	}
	out.Killed = killed
	return out, nil
}

// killSession stops the session's running turn as the owner's Stop does and,
// when a process may outlive it (a running turn, a provider.Killer), asks
// every process to end the session's (R23.6); it reports whether one ran.
func (r *Relay) killSession(ctx context.Context, s *store.Session) (bool, error) {
	cur, err := r.st.CurrentTurn(ctx, s.ID)
	if err != nil {
		return false, err
	}
	stopped := false
	if cur != "" {
		if stopped, err = r.steer.stopTurn(ctx, s.ID); err != nil {
			return false, err
		}
	}
	if _, keeps := r.models.providers[s.Provider].(provider.Killer); !keeps && cur == "" {
		return stopped, nil // no process outlives a turn of this provider
	}
	return r.killEverywhere(ctx, s.ID, cur, stopped)
}

// killEverywhere ends the session's process here and sends the kill request
// to every process of the relay; unless one already ran, it waits for their
// answers (R23.6). It reports whether a process or turn was ended.
func (r *Relay) killEverywhere(ctx context.Context, sid, cur string, killed bool) (bool, error) {
	req := store.NewID(8)
	acks, unsub := r.hub.sub("killack:" + req)
	defer unsub()
	if r.killHere(sid, cur) {
		killed = true
	}
	if err := r.st.Notify(ctx, killPrefix+sid+":"+cur+":"+req+":"+r.opts.WorkerID); err != nil {
		return false, err
	}
	if !killed {
		var err error
		if killed, err = r.waitKillAcks(ctx, req, acks); err != nil {
			return false, err
		}
	}
	r.log.Info("session killed", "session", id8(sid), "turn", id8(cur), "killed", killed)
	return killed, nil
}

// killHere stops the session's turn if it runs in this process (cause
// errStopped, before its process ends: the turn ends as stopped) and ends
// the session's kept agent processes here.
func (r *Relay) killHere(sid, turn string) bool {
	killed := turn != "" && r.drainer.stopHere(turn)
	for _, p := range r.models.providers {
		if k, ok := p.(provider.Killer); ok && k.Kill(sid) {
			killed = true
		}
	}
	return killed
}

// onKill is a kill request from any process ("SID:TURN:REQ:ASKER"); the
// process that asked answered for itself already.
func (r *Relay) onKill(ctx context.Context, rest string) {
	parts := strings.SplitN(rest, ":", 4)
	if len(parts) != 4 || parts[3] == r.opts.WorkerID {
		return
	}
	killed := r.killHere(parts[0], parts[1])
	if err := r.st.AckKill(ctx, parts[2], r.opts.WorkerID, killed); err != nil {
		r.log.Warn("kill request not answered", "session", id8(parts[0]), "err", err)
	}
}

// waitKillAcks waits until every other live process answered the kill
// request req, or one said it ended a process, or killAckWait passed.
func (r *Relay) waitKillAcks(ctx context.Context, req string, acks <-chan struct{}) (bool, error) {
	want, err := r.otherLiveProcs(ctx)
	if err != nil {
		return false, err
	}
	deadline := time.NewTimer(killAckWait)
	defer deadline.Stop()
	for {
		got, err := r.st.KillAcks(ctx, req)
		if err != nil {
			return false, err
		}
		if takeKillAcks(want, got) {
			return true, nil
		}
		if len(want) == 0 || !r.nextKillAck(acks, deadline.C, len(want)) {
			return false, nil
		}
	}
}

// nextKillAck waits for the next answer to a kill request, or killAckPoll;
// at the deadline, with missing processes yet to answer, it logs them and
// reports false.
func (r *Relay) nextKillAck(acks <-chan struct{}, deadline <-chan time.Time, missing int) bool {
	select {
	case <-acks:
	case <-deadline:
		r.log.Warn("kill: some processes did not answer", "missing", missing)
		return false
	case <-time.After(killAckPoll):
	}
	return true
}

// otherLiveProcs are the ids of the relay's live processes but this one:
// those a kill request waits for (R23.6).
func (r *Relay) otherLiveProcs(ctx context.Context) (map[string]bool, error) {
	procs, err := r.st.LiveProcs(ctx, time.Now().Add(-liveProcAge))
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, p := range procs {
		if p.ID != r.opts.WorkerID {
			want[p.ID] = true
		}
	}
	return want, nil
}

// takeKillAcks crosses off want the processes that answered in got and
// reports whether one of them ended a process (R23.6).
func takeKillAcks(want, got map[string]bool) bool {
	for id, killed := range got {
		if killed {
			return true
		}
		delete(want, id)
	}
	return false
}

// liveProcAge is how recently a process must have announced itself to be
// waited for (app's heartbeat is 15 s; four missed beats: gone).
const liveProcAge = time.Minute

// killAckPoll re-reads the answers in case a notification was missed.
const killAckPoll = 500 * time.Millisecond
