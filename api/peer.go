package api

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/domain"
)

// The peer protocol (/peer/v1, §13) and pairing in the owner API (§12).

// maxPeerBody bounds a peer call's body (a prompt may have 1 MiB).
const maxPeerBody = 2 << 20

type peer struct{ r *domain.Relay }

// peerAuth admits a bearer token this relay issued for pairing (R13.4: a
// rejected token is 401, which the caller reports as REMOTE_RELAY_AUTH).
func (p *peer) auth(c *gin.Context) {
	ok, err := p.r.PeerTokenValid(c.Request.Context(), bearerToken(c.Request))
	if err != nil {
		_ = c.Error(err)
		c.AbortWithStatusJSON(http.StatusServiceUnavailable, gin.H{"error": "The relay cannot check the token right now.", "code": domain.CodeInternal})
		return
	}
	if !ok {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "This is not a peer token of this relay.", "code": domain.CodeAuth})
		return
	}
	c.Next()
}

func (p *peer) routes(g *gin.RouterGroup) {
	g.GET("/hello", p.hello)
	g.POST("/call", p.call)
	g.POST("/check", p.check)
	g.GET("/events", p.events)
	g.GET("/inbox", p.inbox)
	g.POST("/inbox/:id", p.answer)
}

func (p *peer) hello(c *gin.Context) {
	h, err := p.r.PeerHello(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, h)
}

func (p *peer) call(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxPeerBody))
	if err != nil {
		c.JSON(http.StatusRequestEntityTooLarge, gin.H{"error": "The peer call is too large. Nothing was done.", "code": domain.CodeInvalidInput})
		return
	}
	env, _ := p.r.PeerCall(c.Request.Context(), bearerToken(c.Request), body)
	c.Data(http.StatusOK, "application/json", env)
}

// check answers whether a call would pass this relay's checks, and what
// they resolved, before the calling relay shows its card (R5.3).
func (p *peer) check(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxPeerBody))
	if err != nil {
		c.JSON(http.StatusRequestEntityTooLarge, gin.H{"error": "The peer check is too large. Nothing was done.", "code": domain.CodeInvalidInput})
		return
	}
	c.Data(http.StatusOK, "application/json", p.r.PeerCheck(c.Request.Context(), bearerToken(c.Request), body))
}

func (p *peer) events(c *gin.Context) {
	sub := c.Query("subscription")
	if sub == "" {
		fail(c, domain.Errorf(domain.CodeInvalidInput, "subscription is required."))
		return
	}
	wait := 0
	if w := c.Query("wait"); w != "" {
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			fail(c, domain.Errorf(domain.CodeInvalidInput, "wait must be a number of seconds (got %q).", w))
			return
		}
		wait = n
	}
	out, err := p.r.PeerEventsFor(c.Request.Context(), bearerToken(c.Request), sub, c.Query("after"), time.Duration(wait)*time.Second)
	if err != nil && domain.AsError(err).Code == domain.CodeAuth {
		// The token was revoked while the poll was open (R18.20): 401, as at the door.
		c.JSON(http.StatusUnauthorized, gin.H{"error": "This is not a peer token of this relay.", "code": domain.CodeAuth})
		return
	}
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (p *peer) inbox(c *gin.Context) {
	// The asks the token's relay's conversations made here, for its inbox (R10.3, R18.21).
	list, err := p.r.PeerInbox(c.Request.Context(), bearerToken(c.Request))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"asks": list})
}

func (p *peer) answer(c *gin.Context) {
	var in struct {
		domain.InboxAnswer
		Via string `json:"via"`
	}
	if !bind(c, &in, false) {
		return
	}
	out, err := p.r.PeerAnswer(c.Request.Context(), bearerToken(c.Request), c.Param("id"), in.InboxAnswer, in.Via)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// Pairing, owner side.

func (o *owner) peerToken(c *gin.Context) {
	var in struct {
		Label string `json:"label"`
		Scope string `json:"scope"` // all (default) | started (R18.35)
	}
	if !bind(c, &in, true) {
		return
	}
	out, err := o.r.NewPeerToken(c.Request.Context(), in.Label, in.Scope)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, out)
}

func (o *owner) relays(c *gin.Context) {
	list, err := o.r.Relays(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"relays": list})
}

func (o *owner) pair(c *gin.Context) {
	var in domain.PairRequest
	if !bind(c, &in, false) {
		return
	}
	out, err := o.r.Pair(c.Request.Context(), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, out)
}

func (o *owner) patchRelay(c *gin.Context) {
	var in domain.RelayPatch
	if !bind(c, &in, false) {
		return
	}
	out, err := o.r.PatchRelay(c.Request.Context(), c.Param("name"), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) unpair(c *gin.Context) {
	out, err := o.r.Unpair(c.Request.Context(), c.Param("name"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}
