package redisurl

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url      string
		kind     Kind
		addrs    []string // Single: [Addr]
		user     string
		pass     string
		sentPass string
		master   string
		db       int
		tls      bool
	}{
		{url: "redis://127.0.0.1:6379/3", kind: Single, addrs: []string{"127.0.0.1:6379"}, db: 3},
		{url: "redis://:s3cret@h:1/0", kind: Single, addrs: []string{"h:1"}, pass: "s3cret"},
		{url: "rediss://u:p@h:6380", kind: Single, addrs: []string{"h:6380"}, user: "u", pass: "p", tls: true},
		{url: "unix:///run/redis.sock?db=2", kind: Single, addrs: []string{"/run/redis.sock"}, db: 2},
		{url: "redis+sentinel://10.0.0.1:26379/mymaster", kind: Sentinel, addrs: []string{"10.0.0.1:26379"}, master: "mymaster"},
		{url: "redis+sentinel://:pw@a:26379,b:26380,[::1]:26381/mymaster/4", kind: Sentinel,
			addrs: []string{"a:26379", "b:26380", "[::1]:26381"}, pass: "pw", master: "mymaster", db: 4},
		{url: "redis+sentinel://a:1/m/", kind: Sentinel, addrs: []string{"a:1"}, master: "m"},
		{url: "redis+sentinel://a:1/m/5/", kind: Sentinel, addrs: []string{"a:1"}, master: "m", db: 5},
		{url: "redis+sentinel://:p%40ss@a:1/m?sentinel_password=sp", kind: Sentinel, addrs: []string{"a:1"}, pass: "p@ss", sentPass: "sp", master: "m"},
		{url: "rediss+sentinel://a:1/m", kind: Sentinel, addrs: []string{"a:1"}, master: "m", tls: true},
		{url: "redis+cluster://127.0.0.1:7000", kind: Cluster, addrs: []string{"127.0.0.1:7000"}},
		{url: "redis+cluster://:pw@127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002/", kind: Cluster,
			addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, pass: "pw"},
		{url: "rediss+cluster://u:p@n1:7000,n2:7000", kind: Cluster, addrs: []string{"n1:7000", "n2:7000"}, user: "u", pass: "p", tls: true},
		{url: "REDIS+CLUSTER://h:1", kind: Cluster, addrs: []string{"h:1"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if u.Kind != tc.kind {
				t.Fatalf("kind %s, want %s", u.Kind, tc.kind)
			}
			var addrs []string
			var user, pass, sentPass, master string
			var db int
			var hasTLS bool
			switch u.Kind {
			case Single:
				o := u.Simple
				addrs, user, pass, db, hasTLS = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil
			case Sentinel:
				o := u.Failover
				addrs, user, pass, sentPass, master, db, hasTLS = o.SentinelAddrs, o.Username, o.Password, o.SentinelPassword, o.MasterName, o.DB, o.TLSConfig != nil
			case Cluster:
				o := u.Cluster
				addrs, user, pass, hasTLS = o.Addrs, o.Username, o.Password, o.TLSConfig != nil
				if o.ClusterStateReloadInterval != TopologyRefresh {
					t.Errorf("reload interval %v, want %v", o.ClusterStateReloadInterval, TopologyRefresh)
				}
			}
			if strings.Join(addrs, " ") != strings.Join(tc.addrs, " ") {
				t.Errorf("addrs %q, want %q", addrs, tc.addrs)
			}
			if user != tc.user || pass != tc.pass || sentPass != tc.sentPass || master != tc.master || db != tc.db || hasTLS != tc.tls {
				t.Errorf("got user %q pass %q sentinel pass %q master %q db %d tls %v, want %q %q %q %q %d %v",
					user, pass, sentPass, master, db, hasTLS, tc.user, tc.pass, tc.sentPass, tc.master, tc.db, tc.tls)
			}
			c := u.NewClient()
			defer func() { _ = c.Close() }()
			_, isCluster := c.(*redis.ClusterClient)
			if isCluster != (tc.kind == Cluster) || IsCluster(c) != isCluster {
				t.Errorf("client %T for kind %s", c, tc.kind)
			}
			switch o := u.AsynqOpt().(type) {
			case asynq.RedisClientOpt:
				if tc.kind != Single {
					t.Errorf("asynq option %T for kind %s", o, tc.kind)
				}
			case asynq.RedisFailoverClientOpt:
				if tc.kind != Sentinel || o.MasterName != tc.master {
					t.Errorf("asynq option %+v for kind %s", o, tc.kind)
				}
			case asynq.RedisClusterClientOpt:
				if tc.kind != Cluster || len(o.Addrs) != len(tc.addrs) {
					t.Errorf("asynq option %+v for kind %s", o, tc.kind)
				}
			default:
				t.Errorf("asynq option %T", o)
			}
		})
	}
}

func TestParseBad(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", "not a URL"},
		{"http://h:1", `unknown scheme "http"`},
		{"redis+sentinel://h:1", "no master name"},
		{"redis+sentinel://h:1/", "no master name"},
		{"redis+sentinel://h:1/m/x", `database "x" is not a number`},
		{"redis+sentinel://h:1/m/1/2", "the path is /MASTER_NAME[/DB]"},
		{"redis+sentinel:///m", "no HOST:PORT"},
		{"redis+sentinel://h/m", `"h" is not HOST:PORT`},
		{"redis+sentinel://h:0/m", "the port must be 1 to 65535"},
		{"redis+sentinel://h:1,/m", `"" is not HOST:PORT`},
		{"redis+sentinel://h:1/m?db=2", `unknown parameter "db"`},
		{"redis+cluster://h:1/0", "a cluster URL has no path"},
		{"redis+cluster://h:1?sentinel_password=x", `unknown parameter "sentinel_password"`},
		{"redis+cluster://h:port", "the port must be 1 to 65535"},
		{"redis+cluster://h:1#x", "fragment"},
		{"redis://h:1/notadb", "invalid database"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := Parse(tc.url)
			if err == nil {
				t.Fatalf("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line with %q", err, tc.want)
			}
		})
	}
}

func TestErrorsHidePassword(t *testing.T) {
	for _, raw := range []string{
		"redis+cluster://:hunter2@h:1/0",
		"redis+sentinel://user:hunter2@h:1/m/x",
		"redis+sentinel://h:1/m/x?sentinel_password=hunter2",
		"redis://:hunter2@h:1/notadb",
	} {
		_, err := Parse(raw)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %v shows the password", raw, err)
		}
	}
	if got := Redact("redis+cluster://:pw@a:1,b:2/"); got != "redis+cluster://:xxxxx@a:1,b:2/" {
		t.Errorf("Redact: %s", got)
	}
}

func TestTune(t *testing.T) {
	tn := Tuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 4 * time.Second, MaxRetries: 1, PoolSize: 64}
	for _, raw := range []string{"redis://h:1/0", "redis+sentinel://h:1/m", "redis+cluster://h:1"} {
		u, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.Tune(tn)
		var dial, read, write time.Duration
		var pool int
		switch u.Kind {
		case Single:
			dial, read, write, pool = u.Simple.DialTimeout, u.Simple.ReadTimeout, u.Simple.WriteTimeout, u.Simple.PoolSize
		case Sentinel:
			dial, read, write, pool = u.Failover.DialTimeout, u.Failover.ReadTimeout, u.Failover.WriteTimeout, u.Failover.PoolSize
		case Cluster:
			dial, read, write, pool = u.Cluster.DialTimeout, u.Cluster.ReadTimeout, u.Cluster.WriteTimeout, u.Cluster.PoolSize
		}
		if dial != tn.DialTimeout || read != tn.ReadTimeout || write != tn.WriteTimeout || pool != tn.PoolSize {
			t.Errorf("%s: tuned to %v %v %v %d", raw, dial, read, write, pool)
		}
	}
}

// TestHasSecret (R18.36): a URL with a password (its user part or
// sentinel_password) is one whose flag draws the command-line WARNING.
func TestHasSecret(t *testing.T) {
	for raw, want := range map[string]bool{
		"":                                            false,
		"not a url":                                   false,
		"redis://127.0.0.1:6379/0":                    false,
		"redis://user@127.0.0.1:6379/0":               false,
		"redis://:pw@127.0.0.1:6379/0":                true,
		"rediss://u:pw@h:6380":                        true,
		"unix://:pw@/run/redis.sock":                  true,
		"redis+cluster://:pw@h:1,h:2":                 true,
		"redis+sentinel://a:1/m":                      false,
		"redis+sentinel://a:1/m?sentinel_password=sp": true,
	} {
		if got := HasSecret(raw); got != want {
			t.Errorf("HasSecret(%q) = %v, want %v", raw, got, want)
		}
	}
}

// TestSetPassword (R18.36): a password read from a file becomes the data
// nodes' password of every kind of URL; a sentinel's own stays.
func TestSetPassword(t *testing.T) {
	for _, raw := range []string{"redis://u@127.0.0.1:6379/0", "unix:///run/redis.sock",
		"redis+sentinel://a:1/m?sentinel_password=sp", "redis+cluster://h:1,h:2"} {
		u, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if u.Password() != "" {
			t.Fatalf("%s: password %q before SetPassword", raw, u.Password())
		}
		u.SetPassword("from-file")
		if u.Password() != "from-file" {
			t.Fatalf("%s: password %q after SetPassword", raw, u.Password())
		}
		var got string
		switch o := u.AsynqOpt().(type) {
		case asynq.RedisClientOpt:
			got = o.Password
		case asynq.RedisFailoverClientOpt:
			got = o.Password
			if o.SentinelPassword != "sp" {
				t.Errorf("%s: sentinel password %q, want sp", raw, o.SentinelPassword)
			}
		case asynq.RedisClusterClientOpt:
			got = o.Password
		}
		if got != "from-file" {
			t.Errorf("%s: the asynq option has password %q", raw, got)
		}
	}
	u, _ := Parse("redis://:inurl@h:1")
	if u.Password() != "inurl" {
		t.Errorf("Password() of a URL with one: %q", u.Password())
	}
}
