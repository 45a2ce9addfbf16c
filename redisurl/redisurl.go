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

// multiURL is a Sentinel or Cluster URL read into its parts (parseMulti).
type multiURL struct {
	raw          string // the URL as given, for errors (redacted there)
	user, pass   string
	addrs        []string // HOST:PORT of each node given
	path         string   // after the first "/", unescaped later
	sentinelPass string   // ?sentinel_password=
	tls          *tls.Config
}

// bad is a one-line error on the URL, its password hidden.
func (m *multiURL) bad(format string, a ...any) error {
	return fmt.Errorf("%s: %s", Redact(m.raw), fmt.Sprintf(format, a...))
}

// parseMulti reads a Sentinel or Cluster URL; rest is what follows "://".
func parseMulti(raw string, kind Kind, useTLS bool, rest string) (*URL, error) {
	m := &multiURL{raw: raw}
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, m.bad("a fragment (#) has no meaning here")
	}
	authority, path, _ := strings.Cut(rest, "/")
	m.path = path
	authority, err := m.readUserInfo(authority)
	if err != nil {
		return nil, err
	}
	if err := m.readHosts(authority); err != nil {
		return nil, err
	}
	if err := m.readQuery(query, kind); err != nil {
		return nil, err
	}
	if useTLS {
		// No fixed ServerName: each node is checked against the name it is
		// dialled by (several hosts, and the nodes a cluster announces).
		m.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if kind == Sentinel {
		return m.sentinel()
	}
	return m.cluster()
}

// readUserInfo takes USER:PASSWORD@ off authority; it returns the rest.
func (m *multiURL) readUserInfo(authority string) (string, error) {
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return authority, nil
	}
	info := authority[:at]
	u, p, hasPass := strings.Cut(info, ":")
	var err error
	if m.user, err = url.PathUnescape(u); err != nil {
		return "", m.bad("bad user name: %v", err)
	}
	if hasPass {
		if m.pass, err = url.PathUnescape(p); err != nil {
			return "", m.bad("bad password escape")
		}
	}
	return authority[at+1:], nil
}

// readHosts reads HOST:PORT[,HOST:PORT…].
func (m *multiURL) readHosts(authority string) error {
	if authority == "" {
		return m.bad("no HOST:PORT")
	}
	for _, hp := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			return m.bad("%q is not HOST:PORT", hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return m.bad("%q: the port must be 1 to 65535", hp)
		}
		m.addrs = append(m.addrs, net.JoinHostPort(host, port))
	}
	return nil
}

// readQuery reads the query: only sentinel_password, and only for Sentinel.
func (m *multiURL) readQuery(query string, kind Kind) error {
	if query == "" {
		return nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return m.bad("bad query: %v", err)
	}
	for k, v := range q {
		if k != "sentinel_password" || kind != Sentinel {
			return m.bad("unknown parameter %q", k)
		}
		m.sentinelPass = v[len(v)-1]
	}
	return nil
}

// sentinel reads the path /MASTER_NAME[/DB] and makes the Sentinel URL.
func (m *multiURL) sentinel() (*URL, error) {
	segs := strings.Split(m.path, "/")
	if m.path == "" || segs[0] == "" {
		return nil, m.bad("no master name: redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER_NAME[/DB]")
	}
	name, err := url.PathUnescape(segs[0])
	if err != nil {
		return nil, m.bad("bad master name: %v", err)
	}
	db, err := m.sentinelDB(segs)
	if err != nil {
		return nil, err
	}
	return &URL{Kind: Sentinel, Failover: &redis.FailoverOptions{
		MasterName: name, SentinelAddrs: m.addrs, Username: m.user, Password: m.pass,
		SentinelPassword: m.sentinelPass, DB: db, TLSConfig: m.tls,
	}}, nil
}

// sentinelDB reads the database of a Sentinel URL's path, split at "/":
// 0 after MASTER_NAME alone, else the number after it.
func (m *multiURL) sentinelDB(segs []string) (int, error) {
	switch {
	case len(segs) == 1, len(segs) == 2 && segs[1] == "":
		return 0, nil
	case len(segs) == 2 || len(segs) == 3 && segs[2] == "":
		db, err := strconv.Atoi(segs[1])
		if err != nil || db < 0 {
			return 0, m.bad("database %q is not a number", segs[1])
		}
		return db, nil
	default:
		return 0, m.bad("the path is /MASTER_NAME[/DB]")
	}
}

// cluster makes the Cluster URL, which has no path.
func (m *multiURL) cluster() (*URL, error) {
	if m.path != "" {
		return nil, m.bad("a cluster URL has no path (a cluster has database 0 only)")
	}
	return &URL{Kind: Cluster, Cluster: &redis.ClusterOptions{
		Addrs: m.addrs, Username: m.user, Password: m.pass, TLSConfig: m.tls,
		ClusterStateReloadInterval: TopologyRefresh,
	}}, nil
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
	return scheme + "://" + redactSentinelPassword(out)
}

// redactSentinelPassword hides the value of sentinel_password= in s.
func redactSentinelPassword(s string) string {
	q := strings.Index(s, "sentinel_password=")
	if q < 0 {
		return s
	}
	e := strings.IndexByte(s[q:], '&')
	if e < 0 {
		return s[:q] + "sentinel_password=xxxxx"
	}
	return s[:q] + "sentinel_password=xxxxx" + s[q+e:]
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
