package web

import (
	"bytes"
	"crypto/sha256"
	"html/template"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	ghtml "github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Markdown renders replies and prompts as the agent wrote them (R23.2):
// CommonMark with GitHub's tables, strikethrough, task lists and autolinks,
// then sanitised. Two layers: raw HTML in the text is never passed through
// (goldmark shows it as text, rawAsText), and bluemonday keeps only the
// elements and attributes Markdown itself makes — no <script>, no event
// handlers, no javascript: or data: URLs but the images it allows; every
// link gets rel="noopener noreferrer" (linkAttrs).
type Markdown struct {
	md     goldmark.Markdown
	policy *bluemonday.Policy
	cache  htmlCache
}

// cacheBytes bounds the rendered HTML kept: a live page renders its last 200
// messages again on every refresh (several a second while a turn writes),
// and messages do not change, so each is rendered once.
const cacheBytes = 32 << 20

// NewMarkdown returns the console's renderer.
func NewMarkdown() *Markdown {
	md := goldmark.New(
		// GitHub Flavored Markdown (extension.GFM's parts), table alignment
		// as an attribute: the page's CSP allows no inline style.
		goldmark.WithExtensions(extension.Linkify, extension.Strikethrough, extension.TaskList,
			extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute))),
		goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(linkAttrs{}, 100))),
		goldmark.WithRendererOptions(
			renderer.WithNodeRenderers(util.Prioritized(rawAsText{}, 100)),
			ghtml.WithXHTML(),
			// A line break in a message is one on the page, as people and
			// agents write chat (and as the console showed them before).
			ghtml.WithHardWraps(),
		),
	)
	return &Markdown{md: md, policy: policy(), cache: htmlCache{max: cacheBytes}}
}

// policy is what may reach the page: the elements Markdown makes.
func policy() *bluemonday.Policy {
	p := bluemonday.UGCPolicy()
	p.RequireNoFollowOnLinks(false)
	p.AllowAttrs("rel").Matching(regexp.MustCompile(`^noopener noreferrer$`)).OnElements("a")
	p.AllowAttrs("target").Matching(regexp.MustCompile(`^_blank$`)).OnElements("a")
	p.AllowDataURIImages()
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^(language-[\w+#.-]{1,40}|raw)$`)).OnElements("code", "p")
	p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|right|center)$`)).OnElements("th", "td")
	// GitHub's task lists: a disabled checkbox.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").OnElements("input")
	return p
}

// HTML renders text as sanitised HTML.
func (m *Markdown) HTML(src string) template.HTML {
	key := sha256.Sum256([]byte(src))
	if h, ok := m.cache.get(key); ok {
		return h
	}
	h := m.render(src)
	m.cache.put(key, h)
	return h
}

func (m *Markdown) render(src string) template.HTML {
	var buf bytes.Buffer
	if err := m.md.Convert([]byte(src), &buf); err != nil {
		return template.HTML("<p>" + template.HTMLEscapeString(src) + "</p>") // escaped: the text as it is
	}
	return template.HTML(m.policy.SanitizeBytes(buf.Bytes())) // sanitised by the policy
}

// rawAsText renders HTML written in the Markdown as the text it is, so an
// agent's <img onerror=…> shows as words and never becomes an element.
type rawAsText struct{}

func (rawAsText) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindRawHTML, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			segs := n.(*ast.RawHTML).Segments
			for i := range segs.Len() {
				seg := segs.At(i)
				ghtml.DefaultWriter.RawWrite(w, seg.Value(src))
			}
		}
		return ast.WalkSkipChildren, nil
	})
	reg.Register(ast.KindHTMLBlock, func(w util.BufWriter, src []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
		n := node.(*ast.HTMLBlock)
		if entering {
			_, _ = w.WriteString(`<p class="raw">`)
			lines := n.Lines()
			for i := range lines.Len() {
				line := lines.At(i)
				ghtml.DefaultWriter.RawWrite(w, line.Value(src))
			}
			return ast.WalkContinue, nil
		}
		if n.HasClosure() {
			ghtml.DefaultWriter.RawWrite(w, n.ClosureLine.Value(src))
		}
		_, _ = w.WriteString("</p>\n")
		return ast.WalkContinue, nil
	})
}

// linkAttrs gives every link rel="noopener noreferrer", and a link to
// another site target="_blank" (the console stays open). An image on
// another site becomes a link to it: the console loads nothing from
// another origin (R19.7).
type linkAttrs struct{}

func (linkAttrs) Transform(doc *ast.Document, reader text.Reader, _ parser.Context) {
	src := reader.Source()
	var remote []*ast.Image
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch l := n.(type) {
		case *ast.Image:
			if isRemote(string(l.Destination)) {
				remote = append(remote, l)
			}
		case *ast.Link:
			markLink(n, string(l.Destination))
		case *ast.AutoLink:
			dest := string(l.URL(src))
			if l.AutoLinkType == ast.AutoLinkEmail {
				dest = "mailto:" + dest
			}
			markLink(n, dest)
		}
		return ast.WalkContinue, nil
	})
	for _, img := range remote {
		imageToLink(img)
	}
}

// isRemote: an image's address on another site (not a data: URL).
func isRemote(dest string) bool {
	u, err := url.Parse(dest)
	return err == nil && u.Scheme != "data" && (u.Scheme != "" || u.Host != "")
}

// markLink gives link n to dest rel="noopener noreferrer", and
// target="_blank" when dest is on another site.
func markLink(n ast.Node, dest string) {
	n.SetAttributeString("rel", []byte("noopener noreferrer"))
	if u, err := url.Parse(dest); err == nil && (u.Host != "" || strings.HasPrefix(dest, "www.")) {
		n.SetAttributeString("target", []byte("_blank"))
	}
}

// imageToLink replaces img by a link to its address, with its alt text (or
// the address) as the link's text, opened in a new tab.
func imageToLink(img *ast.Image) {
	link := ast.NewLink()
	link.Destination, link.Title = img.Destination, img.Title
	for c := img.FirstChild(); c != nil; c = img.FirstChild() {
		link.AppendChild(link, c)
	}
	if !link.HasChildren() {
		link.AppendChild(link, ast.NewString(img.Destination))
	}
	link.SetAttributeString("rel", []byte("noopener noreferrer"))
	link.SetAttributeString("target", []byte("_blank"))
	img.Parent().ReplaceChild(img.Parent(), img, link)
}

// htmlCache keeps rendered HTML by the SHA-256 of its Markdown, the oldest
// dropped once the total passes max bytes.
type htmlCache struct {
	max int

	mu    sync.Mutex
	m     map[[32]byte]template.HTML
	order [][32]byte
	size  int
}

func (c *htmlCache) get(k [32]byte) (template.HTML, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[k]
	return h, ok
}

func (c *htmlCache) put(k [32]byte, h template.HTML) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte]template.HTML{}
	}
	if _, ok := c.m[k]; ok || len(h) > c.max {
		return
	}
	c.m[k] = h
	c.order = append(c.order, k)
	c.size += len(h)
	for c.size > c.max {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= len(c.m[old])
		delete(c.m, old)
	}
}
