# syntax=docker/dockerfile:1
# The daemon as a static, non-root image. The SQLite driver is pure Go, so CGO is off.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o /out/orchestrator ./cmd/orchestrator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orchestrator /usr/local/bin/orchestrator
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/orchestrator"]
CMD ["serve", "--config", "/etc/orchestrator/config/orchestrator.yaml"]
