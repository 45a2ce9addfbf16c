// Package web is the owner's console (SPEC §19): server-rendered pages
// (html/template) and two small static files (console.css, console.js),
// all embedded in the binary. Pages read through the domain's own owner
// operations; every change the browser makes goes to the owner API
// (/api/v1) with the sign-in cookie, and /api/v1/stream (Server-Sent Events)
// tells open pages when to refresh their live parts.
package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay"
	"github.com/oar/relay/api/httpstatus"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/provider"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configures the console.
type Options struct {
	Relay  *domain.Relay
	Auth   *Auth
	Logger *slog.Logger
	// Failures counts failed sign-ins with the owner API's failed tokens
	// (R18.23); nil: not counted.
	Failures *Failures
}

type console struct {
	r      *domain.Relay
	auth   *Auth
	fails  *Failures
	log    *slog.Logger
	tpl    *template.Template
	assets map[string]string // file name -> /static/NAME?v=HASH
}

// Register adds the console's routes to the router: the pages, sign-in and
// sign-out, and the static files.
func Register(g *gin.Engine, o Options) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &console{r: o.Relay, auth: o.Auth, fails: o.Failures, log: o.Logger, assets: map[string]string{}}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	_ = fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(static, p)
		h := sha256.Sum256(b)
		c.assets[p] = "/static/" + p + "?v=" + hex.EncodeToString(h[:4])
		return nil
	})
	c.tpl = template.Must(template.New("").Funcs(c.funcs()).Funcs(conversationFuncs(NewMarkdown())).ParseFS(templateFS, "templates/*.html"))
	files := http.StripPrefix("/static/", http.FileServer(http.FS(static)))
	g.GET("/static/*file", func(ctx *gin.Context) {
		// Files only: a directory (/static/ itself) is not listed.
		if st, err := fs.Stat(static, strings.TrimPrefix(ctx.Param("file"), "/")); err != nil || st.IsDir() {
			ctx.Header("X-Content-Type-Options", "nosniff")
			ctx.String(http.StatusNotFound, "404 page not found")
			return
		}
		ctx.Header("Cache-Control", "public, max-age=31536000, immutable")
		ctx.Header("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(ctx.Writer, ctx.Request)
	})
	g.GET("/", c.page("sessions"))
	g.GET("/s/:id", c.page("session"))
	g.GET("/waiting", c.page("waiting"))
	g.GET("/inbox", c.page("inbox"))
	g.GET("/settings", c.page("settings"))
	g.GET("/relays", c.page("relays"))
	g.POST("/signin", c.signIn)
	g.POST("/signout", c.signOut)
}

// headers every console response carries: nothing but this origin is
// contacted (CSP), no framing, no caching of owner data.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// view is what every template gets.
type view struct {
	Page    string
	Title   string
	Relay   string
	Version string
	Assets  map[string]string
	Error   string
	Next    string
	Nav     nav

	// Side: the sessions list stands beside the page (R23.1); Open is the
	// session open beside it; SideOnly renders the list alone (a live
	// refresh of the list on a session's page).
	Side     bool
	Open     string
	SideOnly bool

	List         []listItem // the active sessions as the list shows them: grouped
	ShowArchived bool
	Archived     []*relay.SessionItem
	Marks        map[string]string // session id -> marker text for pending cards/questions
	Clocks       map[string]int    // session id -> schedules firing into it
	Providers    []provider.Info
	Groups       []*relay.Group

	Cards       []cardView
	Questions   []questionView
	Asks        []*relay.InboxAsk
	Unreachable []*relay.Unreachable // paired relays whose asks the Inbox could not read

	S         *relay.SessionDetail
	Subs      []*relay.SubscriptionItem
	Watching  string
	Schedules []*relay.Schedule
	Efforts   []string
	Models    []string
	Mentions  []string // the paired relays' names, offered after @ in the message box

	Settings relay.Settings
	MCPURL   string // the relay's public /mcp URL, in an external session's MCP client settings (R23.5)

	Relays     []*relay.PairedRelay // the pairings (GET /api/v1/relays)
	PeerTokens []peerTokenView      // the peer tokens this relay issued (GET /api/v1/peer-tokens)

	rd reads // what this request read already
}

// peerTokenView is a peer token as the Relays page lists it (R18.20): never
// the token; times as the domain writes them ("" for never).
type peerTokenView struct {
	ID, Relay, Label      string
	Scope                 string // all | started (R18.35)
	CreatedAt, LastUsedAt string
}

type nav struct {
	Waiting, Inbox int
}

type cardView struct {
	*relay.Card
	SessionTitle string
}

type questionView struct {
	*relay.Question
	SessionTitle string
}

func (c *console) page(name string) gin.HandlerFunc {
	return func(ctx *gin.Context) {
		headers(ctx.Writer)
		if !c.auth.Cookie(ctx.Request) {
			c.render(ctx, http.StatusOK, &view{Page: "signin", Title: "Sign in", Next: ctx.Request.URL.RequestURI()})
			return
		}
		v, status, err := c.load(ctx.Request.Context(), name, ctx)
		if err != nil {
			e := domain.AsError(err)
			switch e.Code {
			case domain.CodeInternal:
				c.log.Error("console page", "page", name, "err", err)
			case domain.CodeUnavailable:
				_ = ctx.Error(err) // the 503's log line names the cause, so a store's silence is rate-limited (R25.3)
			}
			c.render(ctx, httpstatus.Of(e.Code), &view{Page: "error", Title: "Error", Error: e.Msg})
			return
		}
		c.render(ctx, status, v)
	}
}

func (c *console) render(ctx *gin.Context, status int, v *view) {
	v.Relay, v.Assets = c.r.Name(), c.assets
	v.MCPURL = strings.TrimRight(c.r.PublicURL(), "/") + "/mcp"
	if v.Page != "signin" && v.Page != "error" {
		c.navCounts(ctx.Request.Context(), v)
	}
	var buf bytes.Buffer
	if err := c.tpl.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.Error("console template", "page", v.Page, "err", err)
		ctx.String(http.StatusInternalServerError, "The page could not be rendered.")
		return
	}
	ctx.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

func (c *console) navCounts(ctx context.Context, v *view) {
	if cards, err := c.allCards(ctx, v); err == nil {
		v.Nav.Waiting = len(cards)
	}
	if qs, err := c.allQuestions(ctx, v); err == nil {
		v.Nav.Waiting += len(qs)
	}
	if asks, err := c.inbox(ctx, v); err == nil {
		v.Nav.Inbox = len(asks)
	}
	// The asks this relay's agents made on paired relays, as this relay
	// last polled them (R10.5): counted without asking those relays.
	if n, err := c.r.RemoteAskCount(ctx); err == nil {
		v.Nav.Inbox += n
	}
}

// loadInbox reads the Inbox: this relay's open asks and those this relay's
// agents made on paired relays (R10.3), each of those marked "on" with its
// relay and answered there (?relay=); "asker" becomes this relay's session
// that asked, with its title.
func (c *console) loadInbox(ctx context.Context, v *view) error {
	asks, unreachable, err := c.r.InboxWithPaired(ctx)
	if err != nil {
		return err
	}
	v.Asks, v.Unreachable = asks, unreachable
	stand := domain.PeerWatcherPrefix + c.r.Name() + ":"
	var ids []string
	for _, a := range v.Asks {
		if rl := a.Relay; rl != "" && rl != c.r.Name() {
			a.On = rl
			a.Asker = strings.TrimPrefix(a.Asker, stand)
		}
		ids = append(ids, a.Asker)
	}
	ss, err := c.r.Sessions(ctx, ids)
	if err != nil {
		return err
	}
	for i, s := range ss {
		if s != nil && s.Title != "" {
			v.Asks[i].AskerTitle = s.Title
		}
	}
	return nil
}

// load reads what a page shows, through the domain's owner operations.
func (c *console) load(ctx context.Context, name string, g *gin.Context) (*view, int, error) {
	v := &view{Page: name}
	var err error
	switch name {
	case "sessions":
		v.Title = "Sessions"
		err = c.loadSessions(ctx, v, g.Query("archived") != "")
	case "waiting":
		v.Title = "Waiting for you"
		err = c.loadWaiting(ctx, v)
	case "session":
		err = c.loadSessionPage(ctx, v, g)
	case "inbox":
		v.Title = "Inbox"
		err = c.loadInbox(ctx, v)
	case "settings":
		v.Title = "Settings"
		v.Settings, err = c.r.Settings(ctx)
	case "relays":
		v.Title = "Relays"
		err = c.loadRelays(ctx, v)
	}
	if err != nil {
		return nil, 0, err
	}
	return v, http.StatusOK, nil
}

// loadSessionPage reads a session's page: the session (not for ?side=1, the
// list's live refresh beside it) and the list beside it.
func (c *console) loadSessionPage(ctx context.Context, v *view, g *gin.Context) error {
	v.Side, v.Open = true, g.Param("id")
	if g.Query("side") != "" {
		v.SideOnly = true
	} else if err := c.loadSession(ctx, v, v.Open); err != nil {
		return err
	}
	if v.S != nil {
		v.Open = v.S.ID // the page's address may name it by a prefix
	}
	return c.loadSide(ctx, v)
}

// loadRelays reads the relays page: the paired relays and the peer tokens.
func (c *console) loadRelays(ctx context.Context, v *view) error {
	list, err := c.r.Relays(ctx)
	if err != nil {
		return err
	}
	v.Relays = list
	toks, err := c.r.PeerTokens(ctx)
	if err != nil {
		return err
	}
	for _, t := range toks {
		v.PeerTokens = append(v.PeerTokens, peerTokenView{ID: t.ID, Relay: t.Relay, Label: t.Label, Scope: t.Scope,
			CreatedAt: timeText(t.CreatedAt), LastUsedAt: timeText(t.LastUsedAt)})
	}
	return nil
}

func (c *console) loadSessions(ctx context.Context, v *view, archived bool) error {
	v.Side = true
	if archived {
		v.ShowArchived = true
		arch, _, err := c.r.SessionList(ctx, "archived", listLimit)
		if err != nil {
			return err
		}
		v.Archived = arch
	}
	if err := c.loadWaiting(ctx, v); err != nil {
		return err
	}
	v.Providers = c.r.Providers()
	return c.loadSide(ctx, v)
}

// listLimit is how many sessions the list shows.
const listLimit = 200

// loadSide reads the sessions list that stands beside a page (R19.2,
// R23.1): the active sessions, grouped, each marked when a card, question
// or ask waits for the owner and with its schedules' ⏰.
func (c *console) loadSide(ctx context.Context, v *view) error {
	sessions, err := c.activeSessions(ctx, v)
	if err != nil {
		return err
	}
	if v.Marks, err = c.marks(ctx, v); err != nil {
		return err
	}
	scheds, err := c.schedules(ctx, v)
	if err != nil {
		return err
	}
	v.Clocks = map[string]int{}
	for _, s := range scheds {
		if id := s.Session.ID; id != "" {
			v.Clocks[id]++
		}
	}
	v.Groups, err = c.r.Groups(ctx)
	if err != nil {
		return err
	}
	v.List = groupedList(sessions, v.Groups)
	return nil
}

// marks names the sessions something waits in: "waiting for you" for a
// card or question card, else "question" for an open ask.
func (c *console) marks(ctx context.Context, v *view) (map[string]string, error) {
	out := map[string]string{}
	cards, err := c.allCards(ctx, v)
	if err != nil {
		return nil, err
	}
	for _, cd := range cards {
		out[cd.Session] = "waiting for you"
	}
	qs, err := c.allQuestions(ctx, v)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		out[q.Session] = "waiting for you"
	}
	asks, err := c.inbox(ctx, v)
	if err != nil {
		return nil, err
	}
	for _, a := range asks {
		if sid := a.Session; sid != "" && out[sid] == "" {
			out[sid] = "question"
		}
	}
	return out, nil
}

// questions lists the pending question cards of running sessions (a
// question card exists only inside a running turn).
func (c *console) questions(ctx context.Context, sessions []*relay.SessionItem) ([]questionView, error) {
	var out []questionView
	for _, s := range sessions {
		if s.State != domain.StateRunning {
			continue
		}
		qs, err := c.r.QuestionCards(ctx, s.ID)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			out = append(out, questionView{Question: q, SessionTitle: s.Title})
		}
	}
	return out, nil
}

// loadWaiting reads what waits for the owner: every pending card and
// question card, each with its session's title.
func (c *console) loadWaiting(ctx context.Context, v *view) error {
	sessions, err := c.activeSessions(ctx, v)
	if err != nil {
		return err
	}
	titles := map[string]string{}
	for _, s := range sessions {
		titles[s.ID] = s.Title
	}
	cards, err := c.allCards(ctx, v)
	if err != nil {
		return err
	}
	for _, cd := range cards {
		v.Cards = append(v.Cards, cardView{Card: cd, SessionTitle: titles[cd.Session]})
	}
	v.Questions, err = c.allQuestions(ctx, v)
	return err
}

// loadSession fills v with the session page's parts: the session, its
// cards, questions and asks, what it watches, its schedules, its tasks'
// tails, its provider's models and the relays it may mention.
func (c *console) loadSession(ctx context.Context, v *view, id string) error {
	s, err := c.r.OwnerSession(ctx, id, 200)
	if err != nil {
		return err
	}
	v.S = s
	v.Title = s.Title
	for _, cd := range s.Cards {
		v.Cards = append(v.Cards, cardView{Card: cd, SessionTitle: v.Title})
	}
	if err := c.sessionAsks(ctx, v, s.ID); err != nil {
		return err
	}
	v.watching(s.Watching)
	if err := c.sessionSchedules(ctx, v, s.ID); err != nil {
		return err
	}
	c.taskTails(ctx, s)
	for _, p := range c.r.Providers() {
		if p.ID == s.Provider {
			v.Models, v.Efforts = p.Models, p.Efforts
		}
	}
	return c.mentions(ctx, v)
}

// sessionAsks adds the session's question cards and the inbox's asks it
// answers or asked.
func (c *console) sessionAsks(ctx context.Context, v *view, sid string) error {
	qs, err := c.r.QuestionCards(ctx, sid)
	if err != nil {
		return err
	}
	for _, q := range qs {
		v.Questions = append(v.Questions, questionView{Question: q, SessionTitle: v.Title})
	}
	asks, err := c.inbox(ctx, v)
	if err != nil {
		return err
	}
	for _, a := range asks {
		if a.Session == sid || a.Asker == sid {
			v.Asks = append(v.Asks, a)
		}
	}
	return nil
}

// watching adds the session's live subscriptions and a line of how many
// sessions they watch (nil: none to show).
func (v *view) watching(subs []*relay.SubscriptionItem) {
	if subs == nil {
		return
	}
	watched := map[string]bool{}
	all := false
	for _, sub := range subs {
		if sub.EndReason != "" {
			continue
		}
		v.Subs = append(v.Subs, sub)
		all = all || sub.Sessions.All
		for _, w := range sub.Sessions.List {
			if w.ID == "all" {
				all = true
			} else {
				watched[w.ID] = true
			}
		}
	}
	switch {
	case all:
		v.Watching = "watching all sessions"
	case len(v.Subs) > 0:
		v.Watching = fmt.Sprintf("watching %d %s", len(watched), plural(len(watched), "session", "sessions"))
	}
}

// sessionSchedules adds the schedules of the session or set by it, the next
// to fire first.
func (c *console) sessionSchedules(ctx context.Context, v *view, sid string) error {
	scheds, err := c.schedules(ctx, v)
	if err != nil {
		return err
	}
	for _, sc := range scheds {
		if sc.Session.ID == sid || sc.SetBy == sid {
			v.Schedules = append(v.Schedules, sc)
		}
	}
	sort.SliceStable(v.Schedules, func(i, j int) bool { return str(v.Schedules[i].NextFireAt) < str(v.Schedules[j].NextFireAt) })
	return nil
}

// taskTails gives the session's tasks with output their last lines.
func (c *console) taskTails(ctx context.Context, s *relay.SessionDetail) {
	for _, t := range s.Tasks {
		if !t.Output {
			continue
		}
		if tail, err := c.r.TaskTail(ctx, t.TaskID, 8); err == nil && len(tail) > 0 {
			t.Tail = tail
		}
	}
}

// mentions lists the paired relays' names, sorted, for the composer's @.
func (c *console) mentions(ctx context.Context, v *view) error {
	relays, err := c.r.Relays(ctx)
	if err != nil {
		return err
	}
	for _, p := range relays {
		v.Mentions = append(v.Mentions, p.Name)
	}
	sort.Strings(v.Mentions)
	return nil
}

// maxSignInBody bounds the sign-in's form (a token and a path).
const maxSignInBody = 16 << 10

func (c *console) signIn(ctx *gin.Context) {
	headers(ctx.Writer)
	// R18.29: the origin and the sign-in's failure count are checked before
	// the form is read; a refusal closes the connection (its body unread).
	if !SameOrigin(ctx.Request) {
		ctx.Header("Connection", "close")
		c.render(ctx, http.StatusForbidden, &view{Page: "signin", Title: "Sign in", Next: "/",
			Error: "This sign-in did not come from this relay's own page; nothing was done."})
		return
	}
	if d := c.fails.SignInRefused(ctx.Request); d > 0 {
		ctx.Header("Connection", "close")
		RetryAfter(ctx.Writer, d)
		c.render(ctx, http.StatusTooManyRequests, &view{Page: "signin", Title: "Sign in", Next: "/", Error: SignInRefusedMessage(d)})
		return
	}
	if status, msg := readForm(ctx); status != 0 {
		c.render(ctx, status, &view{Page: "signin", Title: "Sign in", Next: "/", Error: msg})
		return
	}
	next := safeNext(ctx.PostForm("next"))
	tok := strings.TrimSpace(ctx.PostForm("token"))
	if !c.auth.CheckToken(tok) {
		time.Sleep(300 * time.Millisecond) // slows guessing a little
		if d := c.fails.FailSignIn(ctx.Request, tok); d > 0 {
			c.tooMany(ctx, next, d)
			return
		}
		// 200: the page itself is fine (a 401 document is a console error in browsers); no cookie is set.
		c.render(ctx, http.StatusOK, &view{Page: "signin", Title: "Sign in", Next: next,
			Error: "That is not this relay's owner token."})
		return
	}
	if err := c.auth.SetCookie(ctx.Writer, ctx.Request); err != nil {
		c.log.Error("console sign-in: record the session", "err", err)
		c.render(ctx, http.StatusServiceUnavailable, &view{Page: "signin", Title: "Sign in", Next: next,
			Error: "The relay could not record the sign-in (its store does not answer); try again."})
		return
	}
	ctx.Redirect(http.StatusSeeOther, next)
}

// readForm reads the sign-in's form whole, within maxSignInBody and the
// server's body deadline (R18.29), before anything else reads it. It returns
// the status and sentence of a refusal (0: read).
func readForm(ctx *gin.Context) (int, string) {
	switch ReadBody(ctx, maxSignInBody) {
	case 0:
		return 0, ""
	case http.StatusRequestEntityTooLarge:
		return http.StatusRequestEntityTooLarge, "The sign-in form is too large; nothing was done."
	case http.StatusRequestTimeout:
		return http.StatusRequestTimeout, "The sign-in form did not arrive in time; nothing was done. Try again."
	default:
		return http.StatusBadRequest, "The sign-in form could not be read; nothing was done. Try again."
	}
}

// ReadBody reads the request's body whole within limit (and the
// connection's read deadline) and puts it back as a buffer, the connection
// then kept (0); else the status of the refusal — 413 over limit, 408 past
// the deadline, 400 otherwise — with the connection to be closed (R18.29).
func ReadBody(ctx *gin.Context, limit int64) int {
	b, err := io.ReadAll(http.MaxBytesReader(ctx.Writer, ctx.Request.Body, limit))
	if err != nil {
		ctx.Header("Connection", "close")
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return http.StatusRequestEntityTooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			return http.StatusRequestTimeout
		default:
			return http.StatusBadRequest
		}
	}
	ctx.Request.Body = io.NopCloser(bytes.NewReader(b))
	ctx.Request.ContentLength = int64(len(b))
	ctx.Writer.Header().Del("Connection") // read whole: the connection may be kept (api's closeUntilRead set it)
	return 0
}

// tooMany answers a sign-in from an address slowed for failed tokens (R18.23).
func (c *console) tooMany(ctx *gin.Context, next string, d time.Duration) {
	RetryAfter(ctx.Writer, d)
	c.render(ctx, http.StatusTooManyRequests, &view{Page: "signin", Title: "Sign in", Next: next, Error: TooManyMessage(d)})
}

func (c *console) signOut(ctx *gin.Context) {
	headers(ctx.Writer)
	if !SameOrigin(ctx.Request) {
		ctx.String(http.StatusForbidden, "This request did not come from this relay's own page; nothing was done.")
		return
	}
	if err := c.auth.SignOut(ctx.Writer, ctx.Request); err != nil {
		// The cookie is cleared in this browser; the record expires with its TTL.
		c.log.Error("console sign-out: end the session", "err", err)
	}
	ctx.Redirect(http.StatusSeeOther, "/")
}

// safeNext keeps a redirect after sign-in on this relay's own pages (R18.22):
// only a path of this relay is taken, else "/". Browsers read a backslash as a
// slash and drop tabs and newlines in a URL, so "/\\host" or "/\t/host" would
// be "//host", another site: a value with a backslash (also escaped, %5C),
// a control character, a scheme, a host, or a path that starts with two
// slashes once unescaped is refused, as are the API's and the static files'
// paths.
func safeNext(s string) string {
	if s == "" || len(s) > 2048 || s[0] != '/' || hasUnsafeRune(s) {
		return "/"
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || u.User != nil || offSite(u) {
		return "/"
	}
	return s
}

// hasUnsafeRune: a control character or a backslash, which browsers drop or
// read as a slash.
func hasUnsafeRune(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || (r >= 0x80 && r <= 0x9f) {
			return true
		}
	}
	return false
}

// offSite: a path that is not one of this relay's pages (another host once
// unescaped, an escaped backslash, the API's or the static files').
func offSite(u *url.URL) bool {
	p := u.Path
	return strings.ContainsAny(p, "\\") || strings.HasPrefix(p, "//") || strings.HasPrefix(u.EscapedPath(), "//") ||
		strings.Contains(strings.ToLower(u.RawPath), "%5c") || strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/static/")
}

func str(x any) string {
	switch s := x.(type) {
	case string:
		return s
	case *string: // a typed result's time (nil: never)
		if s != nil {
			return *s
		}
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
