// Package httpstatus maps the domain's error codes (SPEC §15) to the HTTP
// statuses the owner API and the console answer with. It sits in api rather
// than in the domain, which knows nothing of HTTP; it is a package of its own
// because the console (web), which api imports, answers with the same
// statuses.
package httpstatus

import "github.com/oar/relay/domain"

// Of is the HTTP status of a domain error code: 404 not found, 403 refused,
// 409 a conflict or a limit, 500 the relay's own fault, 502 a paired relay
// offline, 503 the store not answering, else 400.
func Of(code string) int {
	switch code {
	case domain.CodeNotFound:
		return 404
	case domain.CodeForbidden, domain.CodePermission, domain.CodeDisabled, domain.CodeSelf:
		return 403
	case domain.CodeBusy, domain.CodeSessionLimit, domain.CodeLimit, domain.CodeScheduleLimit, domain.CodeQuestionLimit:
		return 409
	case domain.CodeInternal:
		return 500
	case domain.CodeOffline:
		return 502
	case domain.CodeUnavailable:
		return 503
	default:
		return 400
	}
}
