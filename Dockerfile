# syntax=docker/dockerfile:1
# The daemon as a static, non-root image. The SQLite driver is pure Go, so CGO is off.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/orchestrator ./cmd/orchestrator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orchestrator /usr/local/bin/orchestrator
USER nonroot:nonroot
EXPOSE 8080
# distroless has no curl: the binary probes its own /readyz (exit 0 only on 200).
HEALTHCHECK --interval=15s --timeout=6s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/orchestrator", "health", "--quiet", "--url", "http://127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/orchestrator"]
CMD ["serve", "--config", "/etc/orchestrator/config/orchestrator.yaml"]
