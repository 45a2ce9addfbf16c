package api

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
)

// hostGuard is R18.24: a request that reached a loopback listener must name a
// loopback host (localhost, 127.0.0.0/8, ::1) or the host of the public URL
// in its Host header, else 403 and nothing runs. It is the rule go-sdk applies
// to /mcp (StreamableHTTPOptions.DisableLocalhostProtection), on every route:
// a page whose DNS name was rebound to 127.0.0.1 sends its own name as Host,
// so it reads nothing, not even the console's sign-in or /healthz. disabled is
// the same opt-out as go-sdk's (MCPOptions.DisableLocalhostProtection).
func hostGuard(publicURL string, disabled bool) gin.HandlerFunc {
	public := ""
	if u, err := url.Parse(publicURL); err == nil {
		public = strings.ToLower(u.Hostname())
	}
	return func(c *gin.Context) {
		if disabled || hostAllowed(c.Request, public) {
			c.Next()
			return
		}
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{
			"error": "This relay listens on a loopback address and answers only requests whose Host header names a loopback host or its public URL's host. Nothing was done.",
			"code":  domain.CodeForbidden})
	}
}

// hostAllowed: not a loopback listener, or a loopback Host, or the public
// URL's host (any port: a proxy may drop or change it).
func hostAllowed(r *http.Request, publicHost string) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !isLoopback(local.String()) {
		return true
	}
	if isLoopback(r.Host) {
		return true
	}
	if publicHost == "" {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.EqualFold(strings.Trim(host, "[]"), publicHost)
}

// isLoopback is go-sdk's rule (internal/util.IsLoopback): the host of addr
// (with or without a port) is "localhost" or a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
