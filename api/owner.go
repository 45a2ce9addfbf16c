package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/oar/relay/api/httpstatus"
	"github.com/oar/relay/domain"
)

// maxBody bounds an owner request's body (a prompt may have 1 MiB).
const maxBody = 2 << 20

type owner struct{ r *domain.Relay }

func (o *owner) routes(g *gin.RouterGroup) {
	g.POST("/sessions", o.createSession)
	g.GET("/sessions", o.listSessions)
	g.GET("/sessions/:id", o.getSession)
	g.PATCH("/sessions/:id", o.patchSession)
	g.DELETE("/sessions/:id", o.deleteSession)
	g.POST("/sessions/:id/messages", o.message)
	g.POST("/sessions/:id/stop", o.stop)
	g.POST("/sessions/:id/archive", o.archive)
	g.POST("/sessions/:id/token", o.newToken)
	g.POST("/sessions/:id/kill", o.kill)
	g.POST("/sessions/:id/questions/:qid", o.answer)
	g.GET("/cards", o.cards)
	g.POST("/cards/:id", o.decide)
	g.GET("/settings", o.settings)
	g.PATCH("/settings", o.patchSettings)
	g.GET("/groups", o.groups)
	g.POST("/groups", o.createGroup)
	g.PUT("/groups/order", o.orderGroups)
	g.PATCH("/groups/:id", o.renameGroup)
	g.DELETE("/groups/:id", o.dissolveGroup)
	g.GET("/schedules", o.schedules)
	g.DELETE("/schedules/:id", o.cancelSchedule)
	g.GET("/inbox", o.inbox)
	g.POST("/inbox/:id", o.answerAsk)
	g.POST("/peer-tokens", o.peerToken)
	g.GET("/peer-tokens", o.peerTokens)
	g.DELETE("/peer-tokens/:id", o.revokePeerToken)
	g.GET("/relays", o.relays)
	g.POST("/relays", o.pair)
	g.PATCH("/relays/:name", o.patchRelay)
	g.DELETE("/relays/:name", o.unpair)
	g.DELETE("/subscriptions/:id", o.unsubscribe)
}

// fail answers a domain error once, here, for the whole owner API.
func fail(c *gin.Context, err error) {
	e := domain.AsError(err)
	if e.ServerFault() { // logged with the 5xx
		_ = c.Error(err)
	}
	body := gin.H{"error": e.Msg, "code": e.Code}
	for k, v := range e.Fields {
		body[k] = v
	}
	c.JSON(httpstatus.Of(e.Code), body)
}

// bind decodes a JSON body strictly: unknown fields and wrong types are named.
func bind(c *gin.Context, dst any, optional bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) { // R18.14 (body.go's read answers it first on the router's routes)
			tooLarge(maxBody)(c)
			return false
		}
		fail(c, domain.Errorf(domain.CodeInvalidInput, "The request body could not be read (%v). Nothing was done.", err))
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return true
		}
		fail(c, domain.Errorf(domain.CodeInvalidInput, "The request needs a JSON body. Nothing was done."))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		msg := "The body is not valid JSON for this request: " + err.Error() + ". Nothing was done."
		if errors.As(err, &te) {
			if te.Field == "" {
				msg = "The body must be a JSON object. Nothing was done."
			} else {
				msg = fmt.Sprintf("%s must be %s. Nothing was done.", te.Field, jsonKind(te.Type.Kind()))
			}
		}
		fail(c, domain.Errorf(domain.CodeInvalidInput, "%s", msg))
		return false
	}
	if dec.More() {
		fail(c, domain.Errorf(domain.CodeInvalidInput, "The body holds more than one JSON value. Nothing was done."))
		return false
	}
	return true
}

func (o *owner) createSession(c *gin.Context) {
	var in domain.NewSession
	if !bind(c, &in, true) {
		return
	}
	out, err := o.r.OwnerCreateSession(c.Request.Context(), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, out)
}

func (o *owner) listSessions(c *gin.Context) {
	scope := c.DefaultQuery("scope", "active")
	if scope != "active" && scope != "archived" && scope != "all" {
		fail(c, domain.Errorf(domain.CodeInvalidInput, `scope must be "active", "archived" or "all".`))
		return
	}
	limit, err := strconv.Atoi(c.DefaultQuery("limit", "200"))
	if err != nil || limit < 1 || limit > 1000 {
		fail(c, domain.Errorf(domain.CodeInvalidInput, "limit must be a whole number from 1 to 1000."))
		return
	}
	items, total, err := o.r.SessionList(c.Request.Context(), scope, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"sessions": items, "total": total})
}

func (o *owner) getSession(c *gin.Context) {
	last, err := strconv.Atoi(c.DefaultQuery("last", "50"))
	if err != nil || last < 1 || last > 1000 {
		fail(c, domain.Errorf(domain.CodeInvalidInput, "last must be a whole number from 1 to 1000."))
		return
	}
	out, err := o.r.OwnerSession(c.Request.Context(), c.Param("id"), last)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) patchSession(c *gin.Context) {
	var p domain.SessionPatch
	if !bind(c, &p, false) {
		return
	}
	out, err := o.r.OwnerPatchSession(c.Request.Context(), c.Param("id"), p)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) message(c *gin.Context) {
	var in struct {
		Text string `json:"text"`
	}
	if !bind(c, &in, false) {
		return
	}
	out, err := o.r.OwnerMessage(c.Request.Context(), c.Param("id"), in.Text)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusAccepted, out)
}

func (o *owner) stop(c *gin.Context) {
	out, err := o.r.OwnerStop(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// newToken: an external session's new token (R23.5).
func (o *owner) newToken(c *gin.Context) {
	out, err := o.r.OwnerNewToken(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// kill ends the session's agent process and its running turn's (R23.6).
func (o *owner) kill(c *gin.Context) {
	out, err := o.r.OwnerKill(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) archive(c *gin.Context) {
	out, err := o.r.OwnerArchive(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) answer(c *gin.Context) {
	var in struct {
		Choices []string `json:"choices"`
		Answer  string   `json:"answer"`
	}
	if !bind(c, &in, false) {
		return
	}
	q, err := o.r.AnswerQuestion(c.Request.Context(), c.Param("id"), c.Param("qid"), in.Choices, in.Answer)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, q)
}

func (o *owner) schedules(c *gin.Context) {
	list, err := o.r.Schedules(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"schedules": list})
}

func (o *owner) cancelSchedule(c *gin.Context) {
	out, err := o.r.CancelSchedule(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// inbox: this relay's open asks; with ?relays=all also the paired relays' (R10.3).
func (o *owner) inbox(c *gin.Context) {
	if v := c.Query("relays"); v != "" && v != "0" && v != "false" {
		list, unreachable, err := o.r.InboxWithPaired(c.Request.Context())
		if err != nil {
			fail(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"asks": list, "unreachable": unreachable})
		return
	}
	list, err := o.r.Inbox(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"asks": list})
}

func (o *owner) answerAsk(c *gin.Context) {
	var in domain.InboxAnswer
	if !bind(c, &in, false) {
		return
	}
	var out any
	var err error
	if rl := c.Query("relay"); rl != "" && rl != "this" && rl != o.r.Name() {
		out, err = o.r.AnswerPairedAsk(c.Request.Context(), rl, c.Param("id"), in) // an ask kept on a paired relay
	} else {
		out, err = o.r.AnswerAsk(c.Request.Context(), c.Param("id"), in)
	}
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) unsubscribe(c *gin.Context) {
	out, err := o.r.Unsubscribe(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) cards(c *gin.Context) {
	cards, err := o.r.Cards(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	list := make([]any, 0, len(cards))
	for _, card := range cards {
		list = append(list, card)
	}
	c.JSON(http.StatusOK, gin.H{"cards": list})
}

func (o *owner) decide(c *gin.Context) {
	var in struct {
		Decision string `json:"decision"`
	}
	if !bind(c, &in, false) {
		return
	}
	card, err := o.r.DecideCard(c.Request.Context(), c.Param("id"), in.Decision)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, card)
}

func (o *owner) settings(c *gin.Context) {
	st, err := o.r.Settings(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (o *owner) patchSettings(c *gin.Context) {
	var p domain.SettingsPatch
	if !bind(c, &p, false) {
		return
	}
	st, err := o.r.PatchSettings(c.Request.Context(), p)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (o *owner) groups(c *gin.Context) {
	gs, err := o.r.Groups(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"groups": gs})
}

// orderGroups sets the owner's order of the groups (R23.7).
func (o *owner) orderGroups(c *gin.Context) {
	var in struct {
		IDs []string `json:"ids"`
	}
	if !bind(c, &in, false) {
		return
	}
	gs, err := o.r.SetGroupOrder(c.Request.Context(), in.IDs)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"groups": gs})
}

func (o *owner) createGroup(c *gin.Context) {
	var in struct {
		Name string `json:"name"`
	}
	if !bind(c, &in, false) {
		return
	}
	g, err := o.r.CreateGroup(c.Request.Context(), in.Name)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, g)
}

func (o *owner) deleteSession(c *gin.Context) {
	out, err := o.r.OwnerDeleteSession(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) renameGroup(c *gin.Context) {
	var in struct {
		Name string `json:"name"`
	}
	if !bind(c, &in, false) {
		return
	}
	out, err := o.r.RenameGroup(c.Request.Context(), c.Param("id"), in.Name)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (o *owner) dissolveGroup(c *gin.Context) {
	out, err := o.r.DissolveGroup(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return "of another type"
	}
}
