package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oar/relay/store"
)

// (u) the owner's console in Chromium headless (R23.1): a conversation of
// 1,000 messages and the sessions list with 1,000 sessions, each page
// loaded several times; the time from navigation start to the load event
// (HTML, CSS and JS parsed and run, the page laid out), median of the
// loads, and the server's part of it (request → first byte).

type consoleResult struct {
	chromium      string
	loads         int
	sessions      int
	messages      int
	listRows      int  // rows the list shows
	convMsgs      int  // messages the conversation page shows
	list, conv    dist // navigation start → load event end
	listTTFB      dist // request start → response start
	convTTFB      dist
	listHTML      int // bytes of the page's HTML
	convHTML      int
	skippedReason string
}

// consoleChromium finds Debian's chromium ("" when not installed).
func consoleChromium() string {
	for _, p := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	return ""
}

// benchConsole runs a relay of its own with sessions sessions and one
// conversation of messages messages (written to the store as the turns
// write them), signs in with Chromium and loads each page loads times.
func benchConsole(ctx context.Context, b *bench, prefix string, sessions, messages, loads int) (consoleResult, error) {
	res := consoleResult{loads: loads, sessions: sessions, messages: messages, chromium: consoleChromium()}
	if res.chromium == "" {
		res.skippedReason = "Chromium is not installed (apt-get install -y chromium)"
		return res, nil
	}
	rp, err := startRelay(b.o.redisURL, prefix, b.o.concurrency, b.hc)
	if err != nil {
		return res, err
	}
	defer func() { _ = rp.stop() }()
	conv, err := rp.createSession(ctx, "a long conversation")
	if err != nil {
		return res, err
	}
	if err := fillConversation(ctx, rp.app.Store(), conv.ID, messages); err != nil {
		return res, err
	}
	if err := rp.createSessions(ctx, sessions-1, 16, "Session"); err != nil {
		return res, err
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(res.chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true))
	defer cancelA()
	cctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	tctx, cancelT := context.WithTimeout(cctx, 5*time.Minute)
	defer cancelT()
	if err := chromedp.Do(tctx, chromedp.Navigate(rp.url+"/"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", rp.owner), chromedp.Submit("#token"), chromedp.WaitVisible("#live-sessions")); err != nil {
		return res, fmt.Errorf("sign in: %w", err)
	}
	for i := 0; i < loads; i++ {
		if err := consoleLoad(tctx, rp.url+"/", &res.list, &res.listTTFB, &res.listHTML); err != nil {
			return res, err
		}
		if err := consoleLoad(tctx, rp.url+"/s/"+conv.ID, &res.conv, &res.convTTFB, &res.convHTML); err != nil {
			return res, err
		}
	}
	if res.convMsgs, err = chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#live-msgs > li.msg").length`)); err != nil {
		return res, err
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(rp.url+"/"), chromedp.WaitVisible("#live-sessions")); err != nil {
		return res, err
	}
	res.listRows, err = chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#live-sessions > li.srow").length`))
	res.list, res.conv, res.listTTFB, res.convTTFB = newDist(res.list), newDist(res.conv), newDist(res.listTTFB), newDist(res.convTTFB)
	return res, err
}

// fillConversation writes n messages into sid's conversation, owner
// prompts and replies taking turns, as the turn scripts keep them.
func fillConversation(ctx context.Context, st *store.Store, sid string, n int) error {
	at := time.Now().Add(-time.Duration(n) * time.Second)
	for i := 0; i < n; i++ {
		m := &store.Message{ID: store.NewID(16), Role: "user", CreatedAt: at.Add(time.Duration(i) * time.Second),
			Text: fmt.Sprintf("Message %d: please look at the build and tell me what failed.", i)}
		if i%2 == 1 {
			m.Role = "assistant"
			m.Text = fmt.Sprintf("Reply %d: the build failed in `pkg/%d`.\n\n%s", i, i, strings.Repeat("The test expects a sorted list; the code returns it unsorted. ", 6))
		}
		if err := st.AppendMessage(ctx, sid, m); err != nil {
			return err
		}
	}
	return nil
}

// consoleLoad navigates to url and adds the navigation's timings.
func consoleLoad(ctx context.Context, url string, load, ttfb *dist, html *int) error {
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("load %s: %w", url, err)
	}
	t, err := chromedp.Run(ctx, chromedp.Poll[[]float64](`(function(){var n=performance.getEntriesByType("navigation")[0];
		return n && n.loadEventEnd > 0 ? [n.loadEventEnd - n.startTime, n.responseStart - n.requestStart, n.decodedBodySize] : null;})()`,
		chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		return fmt.Errorf("load %s: %w", url, err)
	}
	if len(t) != 3 {
		return fmt.Errorf("load %s: timings %v", url, t)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	*load, *ttfb, *html = append(*load, ms(t[0])), append(*ttfb, ms(t[1])), int(t[2])
	return nil
}

func tableConsole(row rowFunc, r consoleResult) {
	if r.skippedReason != "" {
		row("u", "console pages in Chromium headless", "not measured: "+r.skippedReason, "< 1 s", "")
		return
	}
	what := func(page string, shows int, of string) string {
		return fmt.Sprintf("console: %s in Chromium headless at 1280 px (shows %d %s), navigation start → load event, median of %d loads", page, shows, of, r.loads)
	}
	cell := func(load, ttfb dist, html int) string {
		return fmt.Sprintf("**%s** (server, request → first byte: %s; HTML %d kB)", fms(load.p50()), fms(ttfb.p50()), html/1024)
	}
	row("u", what(fmt.Sprintf("a conversation of %d messages", r.messages), r.convMsgs, "messages, the list beside it"),
		cell(r.conv, r.convTTFB, r.convHTML), "< 1 s", verdict(r.conv.p50() < time.Second))
	row("u", what(fmt.Sprintf("the sessions list with %d sessions", r.sessions), r.listRows, "rows"),
		cell(r.list, r.listTTFB, r.listHTML), "< 1 s", verdict(r.list.p50() < time.Second))
}
