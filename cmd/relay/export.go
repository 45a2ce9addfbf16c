package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/oar/relay/config"
	"github.com/oar/relay/embedded"
	"github.com/oar/relay/redisurl"
)

// newExportCmd is `relay export` (R20.4): the whole dataset as RESP
// commands on stdout, which `redis-cli --pipe` loads into an empty Redis.
func newExportCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the whole dataset to stdout as Redis commands (RESP) for redis-cli --pipe",
		Long: "Write the whole dataset to stdout as Redis commands in RESP, which `redis-cli --pipe` loads into an empty Redis.\n" +
			"From the embedded store's data directory (--data-dir; no relay may be running on it) or from a real Redis (--redis: a backup).\n" +
			"Moving from the embedded store to Redis: stop the relay, `relay export --data-dir DIR | redis-cli -u URL --pipe`, then `relay serve --redis URL`.",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the embedded store's data directory; default $XDG_DATA_HOME/relay, else ~/.local/share/relay ("+config.EnvDataDir+")")
	f.String("redis", "", "export a real Redis instead: redis://host:port/db ("+config.EnvRedis+" is not read: say which one)")
	f.String("redis-password-file", "", "file holding the password of the --redis URL, which keeps it off the command line")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dir, _ := cmd.Flags().GetString("data-dir")
		url, _ := cmd.Flags().GetString("redis")
		pwFile, _ := cmd.Flags().GetString("redis-password-file")
		hasPwFile := cmd.Flags().Changed("redis-password-file")
		if dir != "" && url != "" {
			return usageError{errors.New("relay export: give --data-dir or --redis, not both")}
		}
		if hasPwFile && url == "" {
			return usageError{errors.New("relay export: --redis-password-file needs --redis")}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		w := bufio.NewWriterSize(stdout, 1<<20)
		var n int
		var err error
		if url != "" {
			u, perr := redisurl.Parse(url)
			if perr != nil {
				return usageError{fmt.Errorf("relay export: --redis: %w", perr)}
			}
			if redisurl.HasSecret(url) && !hasPwFile { // R18.36
				fmt.Fprintln(cmd.ErrOrStderr(), "relay export: WARNING: the Redis password is on the command line (in the --redis URL): every user of this machine can read it (/proc/PID/cmdline, ps); give the URL without its password and the password in --redis-password-file")
			}
			if hasPwFile {
				pw, perr := config.RedisPasswordFile(u, "--redis URL", "--redis-password-file", pwFile)
				if perr != nil {
					return usageError{errors.New("relay export: " + strings.TrimPrefix(perr.Error(), "config: "))}
				}
				u.SetPassword(pw)
			}
			c := u.NewClient()
			defer func() { _ = c.Close() }()
			// Every master's keys on a cluster, one master at a time (one
			// writer); else the one Redis.
			var mu sync.Mutex
			err = redisurl.ForEachMaster(ctx, c, func(ctx context.Context, node redis.UniversalClient) error {
				mu.Lock()
				defer mu.Unlock()
				export := embedded.Export
				if redisurl.IsCluster(c) {
					export = embedded.ExportNode
				}
				k, err := export(ctx, node, w)
				n += k
				return err
			})
		} else {
			if dir == "" {
				dir = os.Getenv(config.EnvDataDir)
			}
			dir = config.DataDir(dir) // as serve resolves it: the default, "~" expanded
			if _, serr := os.Stat(dir); serr != nil {
				return usageError{fmt.Errorf("relay export: data directory %s: %w", dir, serr)}
			}
			s, oerr := embedded.Open(embedded.Options{Dir: dir, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if oerr != nil {
				var ce *embedded.CorruptError
				if errors.As(oerr, &ce) {
					return usageError{oerr}
				}
				return oerr
			}
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
			n, err = embedded.Export(ctx, c, w)
			_ = c.Close()
			s.Kill() // read only: nothing to write back
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return fmt.Errorf("relay export: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "relay export: %d keys\n", n)
		return nil
	}
	return cmd
}
