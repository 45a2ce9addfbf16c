// Command relay runs a relay: `relay serve` (API, worker and scheduler) or
// `relay worker` (a worker joining the same Redis).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	_ "time/tzdata" // quiet hours name IANA zones; the image has no zoneinfo

	"github.com/oar/relay/app"
	"github.com/oar/relay/config"
	"github.com/oar/relay/embedded"
	"github.com/oar/relay/store"
)

// usageError is a bad flag or config: exit code 2 with one line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) {
		fmt.Fprintln(stderr, "relay:", err)
		return 2
	}
	fmt.Fprintln(stderr, "relay:", err)
	return 1
}

func isFlagError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe)
}

type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "relay",
		Short:         "relay hosts AI agent sessions and serves the MCP tool relay_tool",
		Long:          "relay hosts agent sessions and serves one MCP tool, relay_tool, through which the agent in one session works with other sessions on this relay and on paired relays.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       app.Version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &flagError{err} })
	root.AddCommand(newCmd(app.ModeServe, "Run the API, a worker and the scheduler in one process", stderr),
		newCmd(app.ModeWorker, "Run a worker only, joining the same Redis (for horizontal scale)", stderr),
		newExportCmd(stdout),
		&cobra.Command{Use: "version", Short: "Print the relay's version", Args: cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "relay", app.Version) }})
	return root
}

func newCmd(mode, short string, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   mode,
		Short: short,
		Args:  cobra.NoArgs,
	}
	addModeFlags(cmd.Flags(), mode)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runMode(cmd, mode, stderr) }
	return cmd
}

// addModeFlags adds the flags of `relay serve` or `relay worker`: each
// command lists only the flags it uses (R18.7).
func addModeFlags(f *pflag.FlagSet, mode string) {
	if mode == app.ModeServe {
		f.String("addr", config.DefaultAddr, "listen address of the API ("+config.EnvAddr+")")
		f.String("public-url", "", "base URL handed to agents and printed at start; default the listen address ("+config.EnvPublicURL+")")
		f.String("redis", "", "Redis URL redis://host:port/db; empty = the embedded store, one process only ("+config.EnvRedis+")")
		f.String("data-dir", "", "where the embedded store (no --redis) keeps its data; default $XDG_DATA_HOME/relay, else ~/.local/share/relay ("+config.EnvDataDir+")")
		f.String("owner-token", "", "owner token for /api/v1, at least 16 characters; default: generated on first start, logged once, its SHA-256 kept in Redis ("+config.EnvOwnerToken+"); on the command line every user of the machine can read it: prefer --owner-token-file")
		f.String("owner-token-file", "", "file holding the owner token (a trailing newline is ignored), which keeps it off the command line ("+config.EnvOwnerTokenFile+")")
	} else {
		f.String("redis", "", "Redis URL redis://host:port/db of the relay to join; required ("+config.EnvRedis+")")
		f.String("metrics-addr", "", "serve /metrics, /healthz and /readyz here; default off ("+config.EnvMetricsAddr+")")
	}
	f.String("redis-password-file", "", "file holding the Redis password, for a Redis URL without one (a trailing newline is ignored) ("+config.EnvRedisPasswordFile+")")
	f.String("name", "", "this relay's name; default the host name ("+config.EnvName+")")
	f.String("config", "", "YAML file: providers, folders, settings, timing, limits ("+config.EnvConfig+")")
	f.String("log-format", "text", "log format: text or json")
	f.String("log-level", "info", "log level: debug, info, warn or error")
}

// runMode runs `relay serve` or `relay worker` until a signal: the
// configuration, the logger, then the process.
func runMode(cmd *cobra.Command, mode string, stderr io.Writer) error {
	cfg, err := loadModeConfig(cmd, mode)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd, stderr)
	if err != nil {
		return err
	}
	if err := nonDumpable(); err != nil {
		log.Warn("cannot make the relay process non-dumpable: agents running as this user may read its environment", "err", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prefix, err := keyPrefix()
	if err != nil {
		return err
	}
	a, err := app.New(cfg, app.Options{Mode: mode, Logger: log, KeyPrefix: prefix})
	if err != nil {
		var le *embedded.LockedError
		if errors.As(err, &le) {
			return err // R20.2: exit 1, the line names the directory and its process
		}
		return usageError{err} // a bad config, or a data file that cannot be read (R20.3)
	}
	err = a.Run(ctx)
	var le *app.ListenError
	if errors.As(err, &le) {
		return usageError{err}
	}
	return err
}

// loadModeConfig loads the configuration from the flags set and the
// environment the mode reads (modeEnv).
func loadModeConfig(cmd *cobra.Command, mode string) (config.Config, error) {
	set := map[string]string{}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if fl.Name != "log-format" && fl.Name != "log-level" {
			set[fl.Name] = fl.Value.String()
		}
	})
	cfg, err := config.Load(set, modeEnv(mode))
	if err != nil {
		return config.Config{}, usageError{err}
	}
	if mode == app.ModeWorker && cfg.RedisURL == "" {
		// R18.7: a worker on a private in-memory server could never receive work.
		return config.Config{}, usageError{errors.New("relay worker needs --redis or " + config.EnvRedis + ": a worker joins the Redis of a running relay (an in-memory server of its own would never receive work)")}
	}
	return cfg, nil
}

// modeEnv is the environment a mode reads: a worker takes no API flags, and
// their variables (a compose file sharing one environment) do not apply to it.
func modeEnv(mode string) func(string) (string, bool) {
	if mode != app.ModeWorker {
		return os.LookupEnv
	}
	return func(k string) (string, bool) {
		if k == config.EnvAddr || k == config.EnvPublicURL || k == config.EnvOwnerToken || k == config.EnvOwnerTokenFile {
			return "", false
		}
		return os.LookupEnv(k)
	}
}

// newLogger is the process's logger on stderr, by --log-level and --log-format.
func newLogger(cmd *cobra.Command, stderr io.Writer) (*slog.Logger, error) {
	levelName, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level must be debug, info, warn or error (got %q)", levelName)}
	}
	hopts := &slog.HandlerOptions{Level: level}
	format, _ := cmd.Flags().GetString("log-format")
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(stderr, hopts)), nil
	default:
		return nil, usageError{fmt.Errorf("--log-format must be text or json (got %q)", format)}
	}
}

// keyPrefix is RELAY_KEY_PREFIX, which lets several relays (or tests) share
// one Redis database or cluster; it is the hash tag of the relay's keys.
func keyPrefix() (string, error) {
	prefix := os.Getenv("RELAY_KEY_PREFIX")
	if prefix != "" && !store.ValidPrefix(prefix) {
		return "", usageError{fmt.Errorf("RELAY_KEY_PREFIX %q: no braces, spaces or control characters (it is the Redis Cluster hash tag of the relay's keys)", prefix)}
	}
	return prefix, nil
}
