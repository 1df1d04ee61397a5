# Every target works on a fresh machine: scripts/ensure-deps.sh installs what the tests start.
GO ?= go

.PHONY: test vet unit bench-locks demo deps

test: deps vet unit

deps:
	@scripts/ensure-deps.sh --browser

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

bench-locks: deps
	cd bench && $(GO) run ./cmd/benchlocks

demo:
	$(GO) run ./cmd/orchestrator demo
