package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// The owner's peer tokens (R18.20): listed without the tokens, revoked one by one.

func (o *owner) peerTokens(c *gin.Context) {
	list, err := o.r.PeerTokens(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"peerTokens": list})
}

func (o *owner) revokePeerToken(c *gin.Context) {
	out, err := o.r.RevokePeerToken(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}
