package embedded

import (
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// tracker is the server's pre-hook: it marks the keys each command may
// change. The hook runs before a command, outside the server's lock, so a
// checkpoint could read a key after the hook marked it but before the
// command changed it. A connection's commands run one after the other, so a
// command is done when its connection sends the next one (or goes away):
// until then its keys stay pending and every checkpoint reads them again.
// Inside MULTI the queued commands run at EXEC, so a transaction's keys stay
// pending until the command after EXEC. Commands a Lua script runs (nested)
// run under the server's lock right after their hook, which a checkpoint's
// read also needs: they are marked and done at once.
type tracker struct {
	srv *server.Server
	log *slog.Logger

	// onCommand runs before each command a client sends (not the ones a
	// script runs, which hold the server's lock): the TTL clock.
	onCommand func()
	changed   chan struct{} // a token when a write command marked keys (the checkpoint loop waits for it)
	lastW     atomic.Int64  // unix ns of the last write command's mark

	mu      sync.Mutex
	dirty   map[string]*change
	all     bool // every key may have changed (FLUSHALL, an unknown command)
	peers   map[*server.Peer]*peerState
	unknown map[string]bool // unknown commands already logged
}

type peerState struct {
	pending []keyOp
	all     bool
	inTx    bool
}

// opKind is what a command did to a key, as far as a checkpoint must read it
// again: the whole key, or only the fields or members it named (a hash, set
// or sorted set), or what was appended at a list's tail or a stream's end.
// A checkpoint then writes only that (a patch record), so the bytes written
// follow the change, not the key's size (a conversation's message list, the
// event stream).
type opKind uint8

const (
	opWhole opKind = iota
	opHash
	opSet
	opZSet
	opListAppend
	opStreamAppend
)

// keyOp is one command's effect on one key.
type keyOp struct {
	key   string
	kind  opKind
	elems []string // opHash: fields; opSet, opZSet: members
}

// change is what happened to a key since the last checkpoint took it.
type change struct {
	kind  opKind
	elems map[string]struct{}
}

func newTracker(srv *server.Server, log *slog.Logger) *tracker {
	return &tracker{srv: srv, log: log, changed: make(chan struct{}, 1), dirty: map[string]*change{}, peers: map[*server.Peer]*peerState{}, unknown: map[string]bool{}}
}

// isNested says whether a command comes from a Lua script: miniredis sets
// connCtx.nested on the connection a script's redis.call runs on, and gives
// no other way to tell (TestScriptWritesKept fails if an upgrade changes it).
func isNested(c *server.Peer) bool {
	if c.Ctx == nil {
		return false
	}
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	e := v.Elem()
	if e.Kind() != reflect.Struct {
		return false
	}
	f := e.FieldByName("nested")
	return f.IsValid() && f.Kind() == reflect.Bool && f.Bool()
}

const oneDB = "ERR the embedded store has one database (0): give each relay its own key prefix, or use a real Redis"

func (t *tracker) hook(c *server.Peer, cmd string, args ...string) bool {
	switch cmd {
	case "SELECT":
		if len(args) == 1 && args[0] != "0" {
			c.WriteError(oneDB)
			return true
		}
	case "SWAPDB", "MOVE":
		c.WriteError(oneDB)
		return true
	}
	ops, all, write := t.writeOps(cmd, args)
	if write && !all {
		ops = dropLive(ops)
		write = len(ops) > 0
	}
	if isNested(c) {
		if write {
			t.mu.Lock()
			t.mark(ops, all)
			t.mu.Unlock()
			t.wrote()
		}
		return false
	}
	if t.onCommand != nil {
		t.onCommand()
	}
	t.mu.Lock()
	t.peerCommand(c, cmd, ops, all, write)
	t.mu.Unlock()
	if write {
		t.wrote()
	}
	return false
}

// peerCommand marks what a client's command may change (write: ops, or
// every key) and keeps it pending on its connection until the next command;
// the previous command's keys, done now, are marked again. t.mu is held.
func (t *tracker) peerCommand(c *server.Peer, cmd string, ops []keyOp, all, write bool) {
	ps := t.peers[c]
	if ps == nil {
		ps = &peerState{}
		t.peers[c] = ps
		c.OnDisconnect(func() { t.gone(c) })
	}
	if !ps.inTx {
		// The connection's previous command is done: its keys were marked
		// when it came; mark them again, in case a checkpoint read them
		// before it ran.
		t.mark(ps.pending, ps.all)
		ps.pending, ps.all = ps.pending[:0], false
	}
	if write {
		t.mark(ops, all)
		ps.pending = append(ps.pending, ops...)
		ps.all = ps.all || all
	}
	switch cmd {
	case "MULTI":
		ps.inTx = true
	case "EXEC", "DISCARD":
		ps.inTx = false
	}
}

// wrote notes a write command's mark and wakes the checkpoint loop.
func (t *tracker) wrote() {
	t.lastW.Store(time.Now().UnixNano())
	t.signal()
}

// signal wakes the checkpoint loop (a token is enough: it reads every mark).
func (t *tracker) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// lastWrite is when the last write command was marked (zero: none yet).
func (t *tracker) lastWrite() time.Time {
	if ns := t.lastW.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (t *tracker) gone(c *server.Peer) {
	t.mu.Lock()
	if ps := t.peers[c]; ps != nil {
		t.mark(ps.pending, ps.all)
		delete(t.peers, c)
	}
	t.mu.Unlock()
}

func (t *tracker) mark(ops []keyOp, all bool) {
	for _, op := range ops {
		markIn(t.dirty, op)
	}
	t.all = t.all || all
}

// markIn adds op to the changes in m: ops of one kind add up (the fields,
// the members, or appends), two kinds make the key's change whole.
func markIn(m map[string]*change, op keyOp) {
	c := m[op.key]
	switch {
	case c == nil:
		c = &change{kind: op.kind}
		m[op.key] = c
	case c.kind != op.kind:
		c.kind, c.elems = opWhole, nil
	}
	if c.kind == opHash || c.kind == opSet || c.kind == opZSet {
		if c.elems == nil {
			c.elems = make(map[string]struct{}, len(op.elems))
		}
		for _, e := range op.elems {
			c.elems[e] = struct{}{}
		}
	}
}

// take returns the changes to read now: those marked since the last take
// and those of commands that may not have run yet; all = every key.
func (t *tracker) take() (changes map[string]*change, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	all = t.all
	changes = t.dirty
	for _, ps := range t.peers {
		all = all || ps.all
		for _, op := range ps.pending {
			markIn(changes, op)
		}
	}
	t.dirty, t.all = make(map[string]*change, len(changes)), false
	return changes, all
}

// again marks keys whole for the next checkpoint (a read to retry).
func (t *tracker) again(keys []string, all bool) {
	t.mu.Lock()
	for _, k := range keys {
		markIn(t.dirty, keyOp{key: k, kind: opWhole})
	}
	t.all = t.all || all
	t.mu.Unlock()
	if len(keys) > 0 || all {
		t.signal()
	}
}

// againChanges marks changes for the next checkpoint as they were, and
// wakes the checkpoint loop (a retry).
func (t *tracker) againChanges(changes map[string]*change) {
	t.keepChanges(changes)
	if len(changes) > 0 {
		t.signal()
	}
}

// keepChanges marks changes for the next checkpoint as they were, without
// waking the checkpoint loop: they wait for the next write (deferred keys,
// R25.4).
func (t *tracker) keepChanges(changes map[string]*change) {
	t.mu.Lock()
	for k, c := range changes {
		op := keyOp{key: k, kind: c.kind}
		for e := range c.elems {
			op.elems = append(op.elems, e)
		}
		markIn(t.dirty, op)
	}
	t.mu.Unlock()
}

// Commands by what they may change. Each write command's keys are found by
// its argument layout; a command in neither list marks every key (and is
// logged once), so an unforeseen command costs time, never data.
var (
	noData = set("AUTH CLIENT CLUSTER COMMAND DBSIZE DISCARD ECHO EVAL EVALSHA EVAL_RO EVALSHA_RO EXEC HELLO INFO MEMORY MULTI PING PSUBSCRIBE PUBLISH PUBSUB PUNSUBSCRIBE QUIT SCRIPT SELECT SUBSCRIBE TIME UNSUBSCRIBE UNWATCH WAIT WATCH " +
		// reads
		"BITCOUNT BITPOS DUMP EXISTS EXPIRETIME GEODIST GEOPOS GEORADIUSBYMEMBER_RO GEORADIUS_RO GEOSEARCH GET GETBIT GETRANGE HEXISTS HGET HGETALL HKEYS HLEN HMGET HPTTL HRANDFIELD HSCAN HSTRLEN HTTL HVALS KEYS LINDEX LLEN LPOS LRANGE MGET OBJECT PEXPIRETIME PFCOUNT PTTL RANDOMKEY SCAN SCARD SDIFF SINTER SINTERCARD SISMEMBER SMEMBERS SMISMEMBER SRANDMEMBER SSCAN STRLEN SUNION TOUCH TTL TYPE XINFO XLEN XPENDING XRANGE XREAD XREVRANGE ZCARD ZCOUNT ZINTER ZLEXCOUNT ZMSCORE ZRANDMEMBER ZRANGE ZRANGEBYLEX ZRANGEBYSCORE ZRANK ZREVRANGE ZREVRANGEBYLEX ZREVRANGEBYSCORE ZREVRANK ZSCAN ZSCORE ZUNION")
	firstKey    = set("APPEND DECR DECRBY DELEX EXPIRE EXPIREAT GEOADD GETDEL GETEX GETSET HDEL HEXPIRE HINCRBY HINCRBYFLOAT HMSET HPERSIST HPEXPIRE HSET HSETEX HSETNX INCR INCRBY INCRBYFLOAT LINSERT LPOP LPUSH LPUSHX LREM LSET LTRIM PERSIST PEXPIRE PEXPIREAT PFADD PFMERGE PSETEX RESTORE RPOP RPUSH RPUSHX SADD SDIFFSTORE SET SETBIT SETEX SETNX SETRANGE SINTERSTORE SPOP SREM SUNIONSTORE XACK XADD XAUTOCLAIM XCLAIM XDEL XSETID XTRIM ZADD ZDIFFSTORE ZINCRBY ZINTERSTORE ZPOPMAX ZPOPMIN ZRANGESTORE ZREM ZREMRANGEBYLEX ZREMRANGEBYRANK ZREMRANGEBYSCORE ZUNIONSTORE GEOSEARCHSTORE")
	twoKeys     = set("BLMOVE BRPOPLPUSH COPY LMOVE RENAME RENAMENX RPOPLPUSH SMOVE")
	allArgs     = set("DEL UNLINK")
	allButLast  = set("BLPOP BRPOP BZPOPMAX BZPOPMIN")
	everyKey    = set("FLUSHALL FLUSHDB")
	numKeysAt0  = set("LMPOP ZMPOP")
	numKeysAt1  = set("BLMPOP BZMPOP")
	withStoreOp = set("GEORADIUS GEORADIUSBYMEMBER")
)

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// dropLive leaves out the ops on keys no checkpoint keeps (liveOnly).
func dropLive(ops []keyOp) []keyOp {
	out := ops[:0]
	for _, op := range ops {
		if !liveOnly(op.key) {
			out = append(out, op)
		}
	}
	return out
}

// writeOps says what cmd may change: for the commands the relay and asynq
// write collections with, the fields, members or appends (collectionOp); for
// every other write, whole keys (writeKeys); all = possibly every key.
func (t *tracker) writeOps(cmd string, args []string) (ops []keyOp, all, write bool) {
	if op, ok := collectionOp(cmd, args); ok {
		return []keyOp{op}, false, true
	}
	keys, all, write := t.writeKeys(cmd, args)
	for _, k := range keys {
		ops = append(ops, keyOp{key: k, kind: opWhole})
	}
	return ops, all, write
}

// collectionOp is the op of a command that writes named fields or members
// of a collection, or appends to a list or a stream; ok = cmd is one.
func collectionOp(cmd string, args []string) (op keyOp, ok bool) {
	if len(args) < 2 {
		return keyOp{}, false
	}
	k := args[0]
	switch cmd {
	case "HSET", "HMSET":
		return keyOp{key: k, kind: opHash, elems: everyOther(args[1:])}, true
	case "HSETNX", "HINCRBY", "HINCRBYFLOAT":
		return keyOp{key: k, kind: opHash, elems: args[1:2]}, true
	case "HDEL":
		return keyOp{key: k, kind: opHash, elems: args[1:]}, true
	case "SADD", "SREM":
		return keyOp{key: k, kind: opSet, elems: args[1:]}, true
	case "ZREM":
		return keyOp{key: k, kind: opZSet, elems: args[1:]}, true
	case "ZINCRBY":
		if len(args) == 3 {
			return keyOp{key: k, kind: opZSet, elems: args[2:3]}, true
		}
	case "ZADD":
		return keyOp{key: k, kind: opZSet, elems: zaddMembers(args)}, true
	case "RPUSH", "RPUSHX":
		return keyOp{key: k, kind: opListAppend}, true
	case "XADD":
		return keyOp{key: k, kind: opStreamAppend}, true
	}
	return keyOp{}, false
}

// everyOther is ss[0], ss[2], ss[4]…: the names of name-value pairs.
func everyOther(ss []string) []string {
	out := make([]string, 0, (len(ss)+1)/2)
	for i := 0; i < len(ss); i += 2 {
		out = append(out, ss[i])
	}
	return out
}

// zaddMembers is the members of ZADD key [NX|XX] [GT|LT] [CH] [INCR] score
// member [score member…].
func zaddMembers(args []string) []string {
	i := 1
	for i < len(args) && zaddOptions[strings.ToUpper(args[i])] {
		i++
	}
	if i+1 >= len(args) {
		return nil
	}
	return everyOther(args[i+1:])
}

var zaddOptions = set("NX XX GT LT CH INCR")

// writeKeys says which keys cmd may change; all = possibly every key.
func (t *tracker) writeKeys(cmd string, args []string) (keys []string, all, write bool) {
	if noData[cmd] {
		return nil, false, false
	}
	if layout := keyLayout(cmd); layout != nil {
		return layout(args)
	}
	if !t.srv.IsRegisteredCommand(cmd) {
		return nil, false, false // answered "unknown command"
	}
	t.mu.Lock()
	if !t.unknown[cmd] {
		t.unknown[cmd] = true
		t.log.Warn("embedded store: a command the persistence does not know; every key is written at the next checkpoint", "command", cmd)
	}
	t.mu.Unlock()
	return nil, true, true
}

// keysOf reads the keys a write command may change from its arguments (as
// writeKeys); write = false for arguments the command itself refuses.
type keysOf func(args []string) (keys []string, all, write bool)

// keyLayout is how cmd's arguments name its keys; nil: a command none of
// the lists names.
func keyLayout(cmd string) keysOf {
	switch {
	case firstKey[cmd]:
		return firstArg
	case twoKeys[cmd]:
		return func(args []string) ([]string, bool, bool) { return args[:min(2, len(args))], false, true }
	case allArgs[cmd]:
		return func(args []string) ([]string, bool, bool) { return args, false, true }
	case allButLast[cmd]:
		return allButLastArg
	case everyKey[cmd]:
		return func([]string) ([]string, bool, bool) { return nil, true, true }
	case numKeysAt0[cmd]:
		return numKeysAt(0)
	case numKeysAt1[cmd]:
		return numKeysAt(1)
	case withStoreOp[cmd]:
		return storeOption
	}
	return keysByName[cmd]
}

// keysByName: the commands whose arguments name their keys in a way of
// their own.
var keysByName = map[string]keysOf{
	"MSET":       pairNames,
	"MSETNX":     pairNames,
	"BITOP":      secondArg,
	"XGROUP":     secondArg,
	"XREADGROUP": streamsKeys,
}

func firstArg(args []string) ([]string, bool, bool) {
	if len(args) == 0 {
		return nil, false, false
	}
	return args[:1], false, true
}

func secondArg(args []string) ([]string, bool, bool) {
	if len(args) < 2 {
		return nil, false, false
	}
	return args[1:2], false, true
}

func allButLastArg(args []string) ([]string, bool, bool) {
	if len(args) == 0 {
		return nil, false, false
	}
	return args[:len(args)-1], false, true
}

// pairNames: MSET key value [key value…].
func pairNames(args []string) ([]string, bool, bool) { return everyOther(args), false, true }

// numKeysAt: the argument at names how many keys follow it (LMPOP, BLMPOP…).
func numKeysAt(at int) keysOf {
	return func(args []string) ([]string, bool, bool) {
		if len(args) <= at {
			return nil, false, false
		}
		n, err := strconv.Atoi(args[at])
		if err != nil || n < 0 || at+1+n > len(args) {
			return nil, false, false // refused by the command itself
		}
		return args[at+1 : at+1+n], false, true
	}
}

// streamsKeys: XREADGROUP … STREAMS key [key…] id [id…].
func streamsKeys(args []string) ([]string, bool, bool) {
	for i, a := range args {
		if strings.EqualFold(a, "STREAMS") {
			rest := args[i+1:]
			return rest[:len(rest)/2], false, true
		}
	}
	return nil, false, false
}

// storeOption: GEORADIUS writes only with STORE or STOREDIST, to a key
// named there (every key, to be safe).
func storeOption(args []string) ([]string, bool, bool) {
	for _, a := range args {
		if u := strings.ToUpper(a); u == "STORE" || u == "STOREDIST" {
			return nil, true, true
		}
	}
	return nil, false, false
}
