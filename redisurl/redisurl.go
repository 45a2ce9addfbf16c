// Package redisurl reads the relay's Redis URL (--redis / REDIS_URL) in all
// its forms and builds the go-redis client and the matching asynq
// connection option for it:
//
//	redis://[[USER]:PASSWORD@]HOST:PORT[/DB]    one Redis (go-redis ParseURL)
//	rediss://…                                  the same over TLS
//	unix://[[USER]:PASSWORD@]/PATH[?db=DB]      one Redis on a Unix socket
//	redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER_NAME[/DB]
//	rediss+sentinel://…                         Sentinel, master and sentinels over TLS
//	redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…][/]
//	rediss+cluster://…                          Redis Cluster over TLS
//
// The password of a Sentinel URL is the data nodes' (the master's and
// replicas'); sentinels that want one of their own get it from
// ?sentinel_password=…, the only query parameter the Sentinel and Cluster
// forms accept.
package redisurl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Kind is the deployment a URL names.
type Kind string

// The kinds of Redis deployment.
const (
	Single   Kind = "single"   // one Redis: redis://, rediss://, unix://
	Sentinel Kind = "sentinel" // a master found through Redis Sentinel
	Cluster  Kind = "cluster"  // Redis Cluster
)

// TopologyRefresh bounds how long a cluster client keeps a slot map that
// has not been checked: besides the reload every MOVED and every failed
// node trigger at once, the map is reloaded at least this often.
const TopologyRefresh = 2 * time.Second

// URL is a parsed Redis URL: exactly one of Simple, Failover and Cluster is
// set, after Kind.
type URL struct {
	Kind     Kind
	Simple   *redis.Options
	Failover *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// Schemes lists the accepted URL schemes (for messages).
const Schemes = "redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://"

// Parse reads raw. Errors are one line and never show the password.
func Parse(raw string) (*URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("not a URL: the forms are %s", Schemes)
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", Redact(raw), strings.TrimPrefix(err.Error(), "redis: "))
		}
		return &URL{Kind: Single, Simple: o}, nil
	case "redis+sentinel", "rediss+sentinel":
		return parseMulti(raw, Sentinel, strings.HasPrefix(strings.ToLower(scheme), "rediss"), rest)
	case "redis+cluster", "rediss+cluster":
		return parseMulti(raw, Cluster, strings.HasPrefix(strings.ToLower(scheme), "rediss"), rest)
	}
	return nil, fmt.Errorf("%s: unknown scheme %q: the forms are %s", Redact(raw), scheme, Schemes)
}

func parseMulti(raw string, kind Kind, useTLS bool, rest string) (*URL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s", Redact(raw), fmt.Sprintf(format, a...))
	}
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, bad("a fragment (#) has no meaning here")
	}
	authority, path, _ := strings.Cut(rest, "/")
	var user, pass string
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		info := authority[:at]
		authority = authority[at+1:]
		u, p, hasPass := strings.Cut(info, ":")
		var err error
		if user, err = url.PathUnescape(u); err != nil {
			return nil, bad("bad user name: %v", err)
		}
		if hasPass {
			if pass, err = url.PathUnescape(p); err != nil {
				return nil, bad("bad password escape")
			}
		}
	}
	if authority == "" {
		return nil, bad("no HOST:PORT")
	}
	var addrs []string
	for _, hp := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			return nil, bad("%q is not HOST:PORT", hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad("%q: the port must be 1 to 65535", hp)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	var sentinelPass string
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, bad("bad query: %v", err)
		}
		for k, v := range q {
			if k != "sentinel_password" || kind != Sentinel {
				return nil, bad("unknown parameter %q", k)
			}
			sentinelPass = v[len(v)-1]
		}
	}
	var tlsConf *tls.Config
	if useTLS {
		// No fixed ServerName: each node is checked against the name it is
		// dialled by (several hosts, and the nodes a cluster announces).
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch kind {
	case Sentinel:
		segs := strings.Split(path, "/")
		if path == "" || segs[0] == "" {
			return nil, bad("no master name: redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER_NAME[/DB]")
		}
		name, err := url.PathUnescape(segs[0])
		if err != nil {
			return nil, bad("bad master name: %v", err)
		}
		db := 0
		switch {
		case len(segs) == 1, len(segs) == 2 && segs[1] == "":
		case len(segs) == 2 || len(segs) == 3 && segs[2] == "":
			if db, err = strconv.Atoi(segs[1]); err != nil || db < 0 {
				return nil, bad("database %q is not a number", segs[1])
			}
		default:
			return nil, bad("the path is /MASTER_NAME[/DB]")
		}
		return &URL{Kind: Sentinel, Failover: &redis.FailoverOptions{
			MasterName: name, SentinelAddrs: addrs, Username: user, Password: pass,
			SentinelPassword: sentinelPass, DB: db, TLSConfig: tlsConf,
		}}, nil
	default:
		if path != "" {
			return nil, bad("a cluster URL has no path (a cluster has database 0 only)")
		}
		return &URL{Kind: Cluster, Cluster: &redis.ClusterOptions{
			Addrs: addrs, Username: user, Password: pass, TLSConfig: tlsConf,
			ClusterStateReloadInterval: TopologyRefresh,
		}}, nil
	}
}

// Tuning are the client settings the relay sets whatever the URL.
type Tuning struct {
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	MaxRetries                             int
	PoolSize                               int // per node on a cluster
}

// Tune applies t (zero fields are left alone).
func (u *URL) Tune(t Tuning) {
	switch u.Kind {
	case Single:
		o := u.Simple
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize)
	case Sentinel:
		o := u.Failover
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize)
	case Cluster:
		o := u.Cluster
		// MaxRetries stays the cluster client's own: it retries moves
		// and failed nodes through MaxRedirects.
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, nil, &o.PoolSize)
	}
}

// apply sets each client option whose Tuning field is not zero; a nil
// option is one this client keeps its own.
func (t Tuning) apply(dial, read, write *time.Duration, retries, pool *int) {
	for _, d := range []struct {
		opt *time.Duration
		v   time.Duration
	}{{dial, t.DialTimeout}, {read, t.ReadTimeout}, {write, t.WriteTimeout}} {
		if d.v != 0 {
			*d.opt = d.v
		}
	}
	if retries != nil && t.MaxRetries != 0 {
		*retries = t.MaxRetries
	}
	if pool != nil && t.PoolSize != 0 {
		*pool = t.PoolSize
	}
}

// NewClient builds the client: a *redis.Client for Single and Sentinel
// (go-redis's failover client follows the master Sentinel names), a
// *redis.ClusterClient for Cluster.
func (u *URL) NewClient() redis.UniversalClient {
	switch u.Kind {
	case Sentinel:
		return redis.NewFailoverClient(u.Failover)
	case Cluster:
		return redis.NewClusterClient(u.Cluster)
	}
	return redis.NewClient(u.Simple)
}

// AsynqOpt is the asynq connection option for the same deployment (for
// asynq's own constructors; the relay hands asynq the client itself).
func (u *URL) AsynqOpt() asynq.RedisConnOpt {
	switch u.Kind {
	case Sentinel:
		o := u.Failover
		return asynq.RedisFailoverClientOpt{MasterName: o.MasterName, SentinelAddrs: o.SentinelAddrs,
			SentinelPassword: o.SentinelPassword, Username: o.Username, Password: o.Password, DB: o.DB,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, TLSConfig: o.TLSConfig}
	case Cluster:
		o := u.Cluster
		return asynq.RedisClusterClientOpt{Addrs: o.Addrs, MaxRedirects: o.MaxRedirects,
			Username: o.Username, Password: o.Password, DialTimeout: o.DialTimeout,
			ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, TLSConfig: o.TLSConfig}
	}
	o := u.Simple
	return asynq.RedisClientOpt{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password,
		DB: o.DB, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolSize: o.PoolSize, TLSConfig: o.TLSConfig}
}

// Connect parses raw, applies t and builds the client.
func Connect(raw string, t Tuning) (redis.UniversalClient, *URL, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	u.Tune(t)
	return u.NewClient(), u, nil
}

// Redact returns raw with any password replaced by "xxxxx".
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "(not a URL)"
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@')
	out := rest
	if at >= 0 {
		info := rest[:at]
		if u, _, hasPass := strings.Cut(info, ":"); hasPass {
			out = u + ":xxxxx" + rest[at:]
		}
	}
	if q := strings.Index(out, "sentinel_password="); q >= 0 {
		e := strings.IndexByte(out[q:], '&')
		if e < 0 {
			out = out[:q] + "sentinel_password=xxxxx"
		} else {
			out = out[:q] + "sentinel_password=xxxxx" + out[q+e:]
		}
	}
	return scheme + "://" + out
}

// IsCluster reports whether c is a cluster client.
func IsCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// ForEachMaster calls fn with a client for every master: the masters of a
// cluster (concurrently: fn must be safe for that), else c itself (SCAN
// and the like see one node's keys only).
func ForEachMaster(ctx context.Context, c redis.UniversalClient, fn func(ctx context.Context, node redis.UniversalClient) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	}
	if c == nil {
		return errors.New("redisurl: no client")
	}
	return fn(ctx, c)
}

// HasSecret reports whether raw carries a password (in its user part or as
// sentinel_password): a URL that holds a secret on the command line is one
// every user of the machine can read (R18.36).
func HasSecret(raw string) bool {
	return strings.Contains(raw, "://") && Redact(raw) != raw
}

// Password is the data nodes' password the URL names ("" when none).
func (u *URL) Password() string {
	switch u.Kind {
	case Sentinel:
		return u.Failover.Password
	case Cluster:
		return u.Cluster.Password
	}
	return u.Simple.Password
}

// SetPassword sets the data nodes' password (a password read from a file,
// R18.36); a Sentinel URL's sentinel_password stays as it is.
func (u *URL) SetPassword(p string) {
	switch u.Kind {
	case Sentinel:
		u.Failover.Password = p
	case Cluster:
		u.Cluster.Password = p
	default:
		u.Simple.Password = p
	}
}
