package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP clients of (a) and (c) run in a driver: by default a child process
// (this program with -driver), so that the relay process, like a real one,
// schedules only its own goroutines; with -inproc a goroutine of this process.
// Protocol with a child: the spec as one JSON line on stdin → "ready" on stdout
// once connected and warmed up → "go" on stdin → the result as JSON on stdout.

// driveSpec is one batch of MCP calls.
type driveSpec struct {
	Endpoint string           `json:"endpoint"`
	Tokens   []string         `json:"tokens"` // one MCP client per token, all calling at once
	Tool     string           `json:"tool"`
	Args     []map[string]any `json:"args"` // per client
	Warm     int              `json:"warm"` // unmeasured calls per client first
	N        int              `json:"n"`    // measured calls per client
	For      int64            `json:"for"`  // with For > 0: each client calls for this long (ns) instead of N times
	Send     bool             `json:"send"` // a send: check for a done "echo: x" reply, keep the message id
}

type driveSample struct {
	T0  int64  `json:"t0"` // Unix ns, call start
	T1  int64  `json:"t1"` // Unix ns, result received
	Msg string `json:"msg,omitempty"`
}

type driveResult struct {
	Samples  []driveSample `json:"samples"`
	Errs     int           `json:"errs"`
	FirstErr string        `json:"firstErr,omitempty"`
	WallNs   int64         `json:"wallNs"`
	CPUNs    int64         `json:"cpuNs"` // the driver process's CPU during the measured calls (child only)
}

func (r driveResult) err() error {
	if r.Errs == 0 {
		return nil
	}
	return fmt.Errorf("%d calls failed, first: %s", r.Errs, r.FirstErr)
}

func (r driveResult) lats() []time.Duration {
	out := make([]time.Duration, len(r.Samples))
	for i, s := range r.Samples {
		out[i] = time.Duration(s.T1 - s.T0)
	}
	return out
}

func newTransport() *http.Transport {
	return &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// drive connects the clients, makes the warm-up calls, calls ready, waits for
// start and makes the measured calls.
func drive(ctx context.Context, spec driveSpec, tr http.RoundTripper, ready func(), start <-chan struct{}) (driveResult, error) {
	var out driveResult
	sessions := make([]*mcp.ClientSession, len(spec.Tokens))
	defer closeAll(sessions)
	for i, tok := range spec.Tokens {
		s, err := connect(ctx, spec.Endpoint, tok, tr)
		if err != nil {
			return out, fmt.Errorf("mcp connect %s: %w", spec.Endpoint, err)
		}
		sessions[i] = s
	}
	var ec errCount
	one := func(i int) (driveSample, bool) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		t0 := time.Now()
		res, err := sessions[i].CallTool(cctx, &mcp.CallToolParams{Name: spec.Tool, Arguments: spec.Args[i]})
		t1 := time.Now()
		if err != nil {
			ec.add(err)
			return driveSample{}, false
		}
		s := driveSample{T0: t0.UnixNano(), T1: t1.UnixNano()}
		if !spec.Send {
			if res.IsError || len(res.Content) != 1 {
				ec.add(fmt.Errorf("%s: isError=%v, %d content items", spec.Tool, res.IsError, len(res.Content)))
				return driveSample{}, false
			}
			return s, true
		}
		env, err := envelope(res)
		if err != nil {
			ec.add(err)
			return driveSample{}, false
		}
		reply, _ := env["reply"].(map[string]any)
		if res.IsError || env["status"] != "done" || reply == nil || reply["text"] != "echo: x" {
			ec.add(fmt.Errorf("send: not a done reply \"echo: x\": %v", env))
			return driveSample{}, false
		}
		s.Msg, _ = env["message_id"].(string)
		return s, true
	}
	samples := make([][]driveSample, len(sessions))
	var warmed, wg sync.WaitGroup
	for i := range sessions {
		warmed.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < spec.Warm && ctx.Err() == nil; r++ {
				one(i)
			}
			warmed.Done()
			select {
			case <-start:
			case <-ctx.Done():
				return
			}
			end := time.Now().Add(time.Duration(spec.For))
			for r := 0; ctx.Err() == nil; r++ {
				if spec.For > 0 && time.Now().After(end) || spec.For <= 0 && r >= spec.N {
					break
				}
				if s, ok := one(i); ok {
					samples[i] = append(samples[i], s)
				}
			}
		}()
	}
	warmed.Wait()
	ready()
	select {
	case <-start:
	case <-ctx.Done():
		wg.Wait()
		return out, ctx.Err()
	}
	c0, t := cpuNow(), time.Now()
	wg.Wait()
	out.WallNs, out.CPUNs = int64(time.Since(t)), int64(cpuNow()-c0)
	for _, ss := range samples {
		out.Samples = append(out.Samples, ss...)
	}
	out.Errs = ec.n // warm-up calls included: any failure fails the run
	if ec.first != nil {
		out.FirstErr = ec.first.Error()
	}
	return out, ctx.Err()
}

// runDriver is the main of a driver child: it exits with status 1 on failure.
func runDriver() {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver: read spec:", err)
		os.Exit(1)
	}
	var spec driveSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "driver: spec:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := make(chan struct{})
	go func() {
		// "go" starts the measured calls; stdin closing (the parent died) ends the driver.
		if l, err := in.ReadString('\n'); err == nil && l == "go\n" {
			close(start)
			_, _ = io.Copy(io.Discard, in)
		}
		cancel()
	}()
	res, err := drive(ctx, spec, newTransport(), func() { fmt.Println("ready") }, start)
	if err != nil && res.Errs == 0 {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}

// clients runs drivers for the main process.
type clients struct {
	inproc bool
	tr     http.RoundTripper // in-process drivers share the main transport
}

// run runs one driver; atStart is called just before the measured calls
// start, atEnd just after they ended.
func (c clients) run(ctx context.Context, spec driveSpec, atStart, atEnd func()) (driveResult, error) {
	if c.inproc {
		readyCh := make(chan struct{})
		start := make(chan struct{})
		type ret struct {
			r   driveResult
			err error
		}
		done := make(chan ret, 1)
		go func() {
			r, err := drive(ctx, spec, c.tr, func() { close(readyCh) }, start)
			done <- ret{r, err}
		}()
		select {
		case <-readyCh:
		case r := <-done:
			if r.err == nil {
				r.err = errors.New("driver ended before it was ready")
			}
			return r.r, r.err
		}
		atStart()
		close(start)
		r := <-done
		atEnd()
		return r.r, r.err
	}
	self, err := os.Executable()
	if err != nil {
		return driveResult{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-driver")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return driveResult{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return driveResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return driveResult{}, err
	}
	defer func() { _ = cmd.Wait() }()
	defer func() { _ = stdin.Close() }()
	b, _ := json.Marshal(spec)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		return driveResult{}, err
	}
	rd := bufio.NewReader(stdout)
	if l, err := rd.ReadString('\n'); err != nil || l != "ready\n" {
		return driveResult{}, fmt.Errorf("driver: not ready (%q): %w", l, err)
	}
	atStart()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return driveResult{}, err
	}
	var res driveResult
	err = json.NewDecoder(rd).Decode(&res)
	atEnd()
	if err != nil {
		return res, fmt.Errorf("driver result: %w", err)
	}
	return res, nil
}
