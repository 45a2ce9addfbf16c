package domain_test

import (
	"github.com/oar/relay/api/httpstatus"
	"github.com/oar/relay/domain"
)

func init() { domain.HTTPStatus = httpstatus.Of }
