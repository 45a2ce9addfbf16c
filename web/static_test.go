package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestStaticServesFilesOnly: /static/ serves the console's files and lists no
// directory (issue 20 item 7).
func TestStaticServesFilesOnly(t *testing.T) {
	g := gin.New()
	Register(g, Options{Auth: NewAuth("owner-token-0123456789", nil)})
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	for _, p := range []string{"/static/console.js", "/static/console.css", "/static/icon.svg"} {
		if st, body := get(p); st != http.StatusOK || body == "" {
			t.Errorf("GET %s: status %d", p, st)
		}
	}
	for _, p := range []string{"/static/", "/static/.", "/static/console.js/", "/static/nope.js", "/static//"} {
		st, body := get(p)
		if st != http.StatusNotFound || strings.Contains(body, "console.js") {
			t.Errorf("GET %s: status %d, want 404 and no listing: %.200s", p, st, body)
		}
	}
}
