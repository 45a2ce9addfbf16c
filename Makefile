# Small conveniences; CI runs `bash .ci/run`, which is the source of truth.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOLANGCI_LINT_VERSION := v2.15.0

.PHONY: build test lint ci tools

# Same command as the Dockerfile and .ci/run (keep in sync).
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/oar/relay/app.Version=$(VERSION)" -o bin/relay ./cmd/relay

# Against REDIS_URL when set, else the embedded in-process Redis.
test:
	go test -race -count=1 ./...

lint:
	golangci-lint run ./...

ci:
	bash .ci/run

tools:
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
