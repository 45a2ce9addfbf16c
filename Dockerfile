# syntax=docker/dockerfile:1
# relay: multi-stage build -> static binary on distroless (no shell, no libc).
#   docker build --build-arg VERSION=$(git describe --tags --always) -t relay .
# No Docker engine runs in CI: .ci/run runs the same `go build` command instead.

# The Go release of go.mod's `toolchain` line, the one govulncheck in CI checks
# (R18.36: no known called vulnerability); cmd/relay/toolchain_test.go keeps
# them the same.
ARG GO_VERSION=1.26.11

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Module downloads in their own layer: rebuilt only when go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# KEEP IN SYNC with the build command in .ci/run (same env, flags, package).
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/oar/relay/app.Version=${VERSION}" -o /out/relay ./cmd/relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/relay /relay
# Inside a container the API must listen on all interfaces (the default is 127.0.0.1).
ENV RELAY_ADDR=0.0.0.0:7420
EXPOSE 7420
USER nonroot:nonroot
ENTRYPOINT ["/relay"]
CMD ["serve"]
