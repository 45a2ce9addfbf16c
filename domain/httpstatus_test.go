package domain

// HTTPStatus is the owner API's status of an error code, which the rule
// suites check. It lives in api (api/httpstatus), which imports this package,
// so an internal test cannot import it: the external test package sets it
// (httpstatus_ext_test.go) before any test runs.
var HTTPStatus func(code string) int
