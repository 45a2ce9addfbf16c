package embedded

import "strings"

// Keys a checkpoint leaves out (R25.4). An idle relay still writes: asynq's
// heartbeat every 5 s, the relay's process table every 15 s, asynq's
// counters when the stall scan runs. Were those kept, the data directory
// would get a new file every few seconds with nothing of the owner's in it.
//
// Live-only keys matter only to the process that writes them: each is
// written again by that process within seconds of its start, and a key
// missing after a restart reads as one that expired. They are never written
// to the data directory, and a start or a merge drops them from files older
// versions wrote:
//
//	asynq:servers, asynq:servers:{ID}      asynq's server heartbeat (5 s, TTL 10 s)
//	asynq:workers, asynq:workers:{ID}      the tasks each asynq server runs (5 s, TTL 10 s)
//	asynq:schedulers, asynq:schedulers:{ID} asynq's scheduler heartbeat (the relay runs none)
//	{P}:procs                              the relay's process table (15 s; 4 beats missed = gone)
//	{P}:lease:SID                          a drain's session lease (TTL 15 s, renewed while it runs)
//	{P}:lock:NAME                          a short named lock (TTL), e.g. one poller per mirror
//
// Deferred keys are kept, but a change to them alone writes no file: they
// go with the next checkpoint that writes something else, or the last one
// of a clean stop (a crash loses what changed since):
//
//	asynq:{Q}:processed, asynq:{Q}:processed:DATE  tasks done (the stall scan is one a minute)
//	asynq:{Q}:failed, asynq:{Q}:failed:DATE        tasks failed
//	asynq:queues                                   the queues' names: each process adds its
//	                                               queues again at its first task (a SADD
//	                                               that changes nothing after a restart)
func liveOnly(key string) bool {
	if rest, ok := strings.CutPrefix(key, "asynq:"); ok {
		for _, n := range []string{"servers", "workers", "schedulers"} {
			if rest == n || strings.HasPrefix(rest, n+":") {
				return true
			}
		}
		return false
	}
	if !strings.HasPrefix(key, "{") {
		return false
	}
	i := strings.Index(key, "}:")
	if i < 0 {
		return false
	}
	name, sub, _ := strings.Cut(key[i+2:], ":")
	switch name {
	case "procs":
		return sub == ""
	case "lease", "lock":
		return sub != ""
	}
	return false
}

// deferredKey says whether key is kept but not a reason for a file of its
// own: asynq's counters and its set of queue names.
func deferredKey(key string) bool {
	if key == "asynq:queues" {
		return true
	}
	if !strings.HasPrefix(key, "asynq:{") {
		return false
	}
	// The queue's name may hold "}:" itself (relay}:turns): the counter's
	// name is what follows the last one.
	i := strings.LastIndex(key, "}:")
	if i < 0 {
		return false
	}
	rest := key[i+2:]
	for _, n := range []string{"processed", "failed"} {
		if rest == n || strings.HasPrefix(rest, n+":") {
			return true
		}
	}
	return false
}
