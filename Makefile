# Every target works on a fresh machine: scripts/ensure-deps.sh installs what the tests start.
GO ?= go

.PHONY: test vet unit bench-locks demo deps chaos fuzz

# Every test, then a short fuzz run of every target (the seed corpora also run in `unit`).
test: deps vet unit
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3s

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

# The fault suite (issue 7): the daemon as real processes on a private redis-server, killed,
# stopped and starved. CHAOS_RACE=1 also builds the daemon with the race detector.
chaos: deps
	$(GO) test -race -count=1 -timeout 10m ./chaos/

# A short run of every fuzz target (FUZZTIME each, default 5s) on top of the committed seeds.
FUZZTIME ?= 5s
FUZZ_TARGETS = ./config:FuzzLoadPipeline ./api:FuzzWebhookDelivery ./api:FuzzGitLabWebhook ./api:FuzzTriggerBody \
	./coolify:FuzzDecodeCoolifyApplication ./coolify:FuzzDecodeCoolifyDeployment \
	./coolify:FuzzDecodeCoolifyEnvVars ./coolify:FuzzDecodeCoolifyError \
	./mobile:FuzzDecodeFlagsmithFeatureState ./mobile:FuzzDecodeFlagsmithVersion \
	./mobile:FuzzDecodeFlagsmithError ./mobile:FuzzDecodeFlagsmithChange

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	done
