# Every target works on a fresh machine: scripts/ensure-deps.sh installs what the tests start.
GO ?= go

.PHONY: test vet unit bench bench-locks demo deps chaos fuzz

# Every test, then a short fuzz run of every target (the seed corpora also run in `unit`).
test: deps vet unit
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

deps:
	@scripts/ensure-deps.sh --browser

# bench/ is a module of its own (the peers it measures are not the product's dependencies):
# vet, build and test it too.
vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./... && $(GO) build ./...

unit:
	$(GO) test -race -count=1 ./...
	cd bench && $(GO) test -race -count=1 ./...

bench-locks: deps
	cd bench && $(GO) run ./cmd/benchlocks

# Every bench program BENCH_RUNS times, the programs taking turns run by run, then
# bench/RESULTS.md (median and range of each figure) and the README's summary of it. A
# program joins by writing bench/internal/figures JSON to the path its -json flag names
# and being listed in BENCH_PROGRAMS; BENCH_ARGS_<program> are its flags here, sized so
# that the whole target stays under ten minutes. Each run's output is kept in bench/out/.
BENCH_RUNS ?= 5
BENCH_PROGRAMS ?= benchlocks benchengine benchapi
BENCH_ARGS_benchlocks ?= -n 2000 -rounds 10 -idle 2s
BENCH_ARGS_benchengine ?= -runs 1 -out ''
BENCH_ARGS_benchapi ?= -runs 1 -out ''
bench: deps
	rm -rf bench/out && mkdir -p bench/out
	cd bench && $(GO) build -o out/ $(BENCH_PROGRAMS:%=./cmd/%) ./cmd/benchreport
	@set -e; for i in $$(seq $(BENCH_RUNS)); do \
		$(foreach p,$(BENCH_PROGRAMS),echo "bench: $(p) run $$i of $(BENCH_RUNS)"; \
		(cd bench && out/$(p) $(BENCH_ARGS_$(p)) -json out/$(p)-$$i.json >out/$(p)-$$i.txt 2>out/$(p)-$$i.log) \
			|| { cat bench/out/$(p)-$$i.log; exit 1; };) \
	done
	cd bench && out/benchreport -o RESULTS.md -readme ../README.md out/*.json

demo:
	$(GO) run ./cmd/orchestrator demo

# The fault suite (issue 7): the daemon as real processes on a private redis-server, killed,
# stopped and starved. CHAOS_RACE=1 also builds the daemon with the race detector.
chaos: deps
	$(GO) test -race -count=1 -timeout 10m ./chaos/

# A short run of every fuzz target (FUZZTIME each, default 50000x) on top of the committed seeds.
# The budget is a count of executions, not a duration: a duration's deadline can surface as a
# spurious "context deadline exceeded" failure with no crasher (golang/go#75804, unfixed in
# go1.26), which failed a CI run here.
FUZZTIME ?= 50000x
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
