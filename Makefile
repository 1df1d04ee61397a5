# Every target works on a fresh machine: scripts/ensure-deps.sh installs what the tests start.
GO ?= go

.PHONY: help test lint vet unit bench bench-locks bench-analysis demo deps chaos campaign fuzz

# A target's line in `make help` is the `## ` comment on its rule's line.

# Every test, then a short fuzz run of every target (the seed corpora also run in `unit`).
test: deps lint unit ## lint, every test with -race, then a short fuzz run (what CI runs)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

help: ## this list
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z-]*:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

deps: ## install what the tests start (redis-server, prometheus, chromium, axe-core from npm) when missing
	@scripts/ensure-deps.sh --browser

# staticcheck runs from the Go module proxy at a pinned version (go run caches the build), so
# nothing is installed by hand and every machine checks with the same rules: its default
# checks, all passing (a check turned off would go in staticcheck.conf, with the reason).
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK = $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: vet ## gofmt, go vet and staticcheck over the module and bench/
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
		echo "gofmt: not formatted (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

# bench/ is a module of its own (the peers it measures are not the product's dependencies):
# vet, build and test it too.
vet: ## go vet over the module and bench/, and build bench/
	$(GO) vet ./...
	cd bench && $(GO) vet ./... && $(GO) build ./...

unit: ## every test with -race, the module's and bench/'s
	$(GO) test -race -count=1 -timeout 40m ./...
	cd bench && $(GO) test -race -count=1 ./...

bench-locks: deps ## one run of the lock benchmark
	cd bench && $(GO) run ./cmd/benchlocks

bench-analysis: deps ## 50 clean runs through the post-release analysis into bench/RESULTS-analysis.md (~2 min)
	cd bench && $(GO) run ./cmd/benchanalysis

# Every bench program BENCH_RUNS times, the programs taking turns run by run, then
# bench/RESULTS.md (median and range of each figure) and its summary in docs/benchmarks.md. A
# program joins by writing bench/internal/figures JSON to the path its -json flag names
# and being listed in BENCH_PROGRAMS; BENCH_ARGS_<program> are its flags here, sized so
# that the whole target stays near fifteen minutes (benchbudget's three deployment times take
# about two of them per run; benchha runs only the many-daemons benchmark's redis topology,
# about 15 s a run, its Cluster topology taking 50 s more). Each run's output is kept in
# bench/out/.
BENCH_RUNS ?= 5
BENCH_PROGRAMS ?= benchlocks benchengine benchapi benchbudget benchha
BENCH_ARGS_benchlocks ?= -n 2000 -rounds 10 -idle 2s
BENCH_ARGS_benchengine ?= -runs 1 -out ''
BENCH_ARGS_benchapi ?= -runs 1 -out ''
BENCH_ARGS_benchbudget ?= -scale 120
BENCH_ARGS_benchha ?= -runs 1 -out '' -bench '^BenchmarkManyDaemons$$/^redis$$/'
bench: deps ## every benchmark BENCH_RUNS times into bench/RESULTS.md and docs/benchmarks.md
	rm -rf bench/out && mkdir -p bench/out
	cd bench && $(GO) build -o out/ $(BENCH_PROGRAMS:%=./cmd/%) ./cmd/benchreport
	@set -e; for i in $$(seq $(BENCH_RUNS)); do \
		$(foreach p,$(BENCH_PROGRAMS),echo "bench: $(p) run $$i of $(BENCH_RUNS)"; \
		(cd bench && out/$(p) $(BENCH_ARGS_$(p)) -json out/$(p)-$$i.json >out/$(p)-$$i.txt 2>out/$(p)-$$i.log) \
			|| { cat bench/out/$(p)-$$i.log; exit 1; };) \
	done
	cd bench && out/benchreport -o RESULTS.md -doc ../docs/benchmarks.md -readme ../README.md out/*.json

demo: ## the product on its embedded backend with simulated Coolify, Flagsmith, Infisical
	$(GO) run ./cmd/orchestrator demo

# The fault suite (issue 7): the daemon as real processes on a private redis-server, killed,
# stopped and starved. CHAOS_RACE=1 also builds the daemon with the race detector.
chaos: deps ## the fault suite: the daemon as real processes, killed, stopped and starved
	$(GO) test -race -count=1 -timeout 10m ./chaos/

# The fault campaign (issue 41): CAMPAIGN_COUNT seeded, randomized schedules from
# CAMPAIGN_SEED on, each three daemons on Redis under faults injected at random moments,
# judged from the fakes' own records; the results go to chaos/RESULTS-campaign.md, which the
# README quotes. `make campaign SEED=n` replays the one schedule of seed n (a failing
# schedule prints its seed) without touching the results file. `go test ./chaos` runs a
# short fixed set of schedules.
CAMPAIGN_SEED ?= 1000
CAMPAIGN_COUNT ?= 200
campaign: deps ## the fault campaign: CAMPAIGN_COUNT random schedules into chaos/RESULTS-campaign.md; SEED=n replays one
ifdef SEED
	$(GO) test -count=1 -timeout 0 -run '^TestCampaign$$' ./chaos/ -v -campaign.seed=$(SEED) -campaign.count=1
else
	$(GO) test -count=1 -timeout 0 -run '^TestCampaign$$' ./chaos/ -v -campaign.seed=$(CAMPAIGN_SEED) \
		-campaign.count=$(CAMPAIGN_COUNT) -campaign.results=RESULTS-campaign.md
endif

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

fuzz: ## every fuzz target for FUZZTIME executions (default 50000x)
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	done
