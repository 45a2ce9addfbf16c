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
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runExport(cmd, stdout) }
	return cmd
}

// exportFlags are the flags of `relay export`.
type exportFlags struct {
	dir, url, pwFile string
	hasPwFile        bool // --redis-password-file was given
}

// runExport writes the dataset of the Redis (--redis) or the data directory
// to stdout and the number of keys to stderr. The exporters' errors are
// returned as they are.
func runExport(cmd *cobra.Command, stdout io.Writer) error {
	var ef exportFlags
	ef.dir, _ = cmd.Flags().GetString("data-dir")
	ef.url, _ = cmd.Flags().GetString("redis")
	ef.pwFile, _ = cmd.Flags().GetString("redis-password-file")
	ef.hasPwFile = cmd.Flags().Changed("redis-password-file")
	if ef.dir != "" && ef.url != "" {
		return usageError{errors.New("relay export: give --data-dir or --redis, not both")}
	}
	if ef.hasPwFile && ef.url == "" {
		return usageError{errors.New("relay export: --redis-password-file needs --redis")}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := bufio.NewWriterSize(stdout, 1<<20)
	export := exportDataDir
	if ef.url != "" {
		export = exportRedis
	}
	n, err := export(ctx, cmd.ErrOrStderr(), ef, w)
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("relay export: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "relay export: %d keys\n", n)
	return nil
}

// exportRedis writes the dataset of the Redis at ef.url to w: every master's
// keys on a cluster, one master at a time (one writer); else the one Redis.
// A problem with the flags is a usageError.
func exportRedis(ctx context.Context, stderr io.Writer, ef exportFlags, w io.Writer) (int, error) {
	u, perr := redisurl.Parse(ef.url)
	if perr != nil {
		return 0, usageError{fmt.Errorf("relay export: --redis: %w", perr)}
	}
	if redisurl.HasSecret(ef.url) && !ef.hasPwFile { // R18.36
		fmt.Fprintln(stderr, "relay export: WARNING: the Redis password is on the command line (in the --redis URL): every user of this machine can read it (/proc/PID/cmdline, ps); give the URL without its password and the password in --redis-password-file")
	}
	if ef.hasPwFile {
		pw, perr := config.RedisPasswordFile(u, "--redis URL", "--redis-password-file", ef.pwFile)
		if perr != nil {
			return 0, usageError{errors.New("relay export: " + strings.TrimPrefix(perr.Error(), "config: "))}
		}
		u.SetPassword(pw)
	}
	c := u.NewClient()
	defer func() { _ = c.Close() }()
	var mu sync.Mutex
	n := 0
	err := redisurl.ForEachMaster(ctx, c, func(ctx context.Context, node redis.UniversalClient) error {
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
	if err != nil {
		return n, fmt.Errorf("relay export: %w", err)
	}
	return n, nil
}

// exportDataDir writes the dataset of the embedded store's data directory
// (ef.dir, else RELAY_DATA_DIR, else the default) to w, opened read only.
// A directory that is missing or corrupt is a usageError.
func exportDataDir(ctx context.Context, _ io.Writer, ef exportFlags, w io.Writer) (int, error) {
	dir := ef.dir
	if dir == "" {
		dir = os.Getenv(config.EnvDataDir)
	}
	dir = config.DataDir(dir) // as serve resolves it: the default, "~" expanded
	if _, serr := os.Stat(dir); serr != nil {
		return 0, usageError{fmt.Errorf("relay export: data directory %s: %w", dir, serr)}
	}
	s, oerr := embedded.Open(embedded.Options{Dir: dir, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if oerr != nil {
		var ce *embedded.CorruptError
		if errors.As(oerr, &ce) {
			return 0, usageError{oerr}
		}
		return 0, oerr
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
	n, err := embedded.Export(ctx, c, w)
	_ = c.Close()
	s.Kill() // read only: nothing to write back
	if err != nil {
		return n, fmt.Errorf("relay export: %w", err)
	}
	return n, nil
}
