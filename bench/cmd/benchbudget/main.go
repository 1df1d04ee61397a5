// Command benchbudget measures what Coolify's request budget is spent on when several
// pipelines deploy at once through several daemons (issue 39):
//
//	cd bench && go run ./cmd/benchbudget -json figures.json     # ~2 min; needs redis-server in PATH
//
// -pipelines pipelines of -services services each run at once on -daemons daemons (their own
// Redis clients, lock and run stores on one Redis, the Coolify budget and the look at active
// deployments shared there), against one fake Coolify (coolify/coolifytest) with Coolify's
// default throttle (200 requests a minute per token) and its default concurrent_builds (2),
// once per deployment time in -durations. Time is scaled down by -scale: a 180 s deployment
// takes 180/scale s on the fake, the throttle's window and the clients' poll interval shrink by
// the same factor, so the requests a run makes, per service, are those of the real durations.
//
// Figures, per deployment time: Coolify requests per service (every request the fake
// received, divided by the services), of them the polls (waits for deployments to end), 429
// answers, and makespan against its lower bound: the larger of the builders' (deployments ÷
// concurrent builds × deployment time, after the first deployment's prefix) and the budget's
// (requests ÷ rate). And the requests per minute by purpose (in real time: scaled back).
// Goals: requests per service at the longest deployment within 1.2× those at the shortest;
// 0 × 429; makespan within 1.05× the bound.
//
// The prefix is the fewest requests any two-phase deploy must send before its first
// deployment can start, ÷ rate: for each service of one pipeline, a read of its env vars, a
// write of them and a write of its image tag (3 × services; no preflight, no read-back), then
// the deploy. Nothing deploys before every service of the run is synced, and no client can
// send them faster than the rate, not knowing where Coolify's window falls. It is a floor
// fixed by the pipeline, not what this daemon sends (its own prefix, preflight and read-backs
// included, is about 7 requests a service): a daemon that sends more does not get a looser
// bound. Before issue 39's second round the builders' bound left it out.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
)

type settings struct {
	pipelines, services, daemons, parallel, rate, builds int
	scale                                                float64
	routes                                               bool // print the fake's requests by route
	durations                                            []time.Duration
}

func main() {
	var c settings
	flag.IntVar(&c.pipelines, "pipelines", 4, "pipelines run at once")
	flag.IntVar(&c.services, "services", 24, "services per pipeline")
	flag.IntVar(&c.daemons, "daemons", 3, "daemons on one Redis (pipeline i runs on daemon i mod daemons)")
	flag.IntVar(&c.parallel, "parallel", 4, "phase2.parallel of each pipeline")
	flag.IntVar(&c.rate, "rate", pacing.DefaultCoolifyBudget.Limit, "Coolify's throttle, requests per (unscaled) minute per token")
	flag.IntVar(&c.builds, "builds", 2, "Coolify's concurrent_builds")
	flag.Float64Var(&c.scale, "scale", 120, "time runs this many times faster than real time")
	durations := flag.String("durations", "10s,60s,180s", "deployment times (unscaled), comma-separated")
	jsonOut := flag.String("json", "", "write the figures (bench/internal/figures) to this file")
	flag.BoolVar(&c.routes, "routes", false, "print the fake's requests by route and by purpose, and a timeline of each run and of the builders, for each deployment time (to stderr)")
	flag.Parse()
	for _, s := range strings.Split(*durations, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			log.Fatalf("-durations: %v", err)
		}
		c.durations = append(c.durations, d)
	}
	ctx := context.Background()
	rep := figures.Start("budget", "Coolify's request budget under many pipelines",
		fmt.Sprintf("cd bench && go run ./cmd/benchbudget -pipelines %d -services %d -daemons %d -parallel %d -scale %g -durations %s",
			c.pipelines, c.services, c.daemons, c.parallel, c.scale, *durations))
	addr, stopRedis, err := startRedis(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer stopRedis()
	var results []result
	for i, d := range c.durations {
		r, err := measure(ctx, c, addr, i, d)
		if err != nil {
			log.Fatalf("deployments of %s: %v", d, err)
		}
		results = append(results, r)
		fmt.Printf("%s: %.1f requests/service (%.1f polls), %d × 429, makespan %.2f s, bound %.2f s (%.3f)\n",
			d, r.perService(), r.pollsPerService(), r.throttled, r.makespan.Seconds(), r.bound.Seconds(), r.ratio())
	}
	addFigures(rep, c, results)
	rep.About = about(c)
	if *jsonOut != "" {
		if err := rep.Finish(*jsonOut); err != nil {
			log.Fatal(err)
		}
	}
}

// result is one deployment time's measurement.
type result struct {
	duration        time.Duration // unscaled
	services        int
	calls           int
	byPurpose       map[coolify.Purpose]int
	throttled       int
	makespan, bound time.Duration // scaled
	scale           float64
}

func (r result) perService() float64 { return float64(r.calls) / float64(r.services) }
func (r result) pollsPerService() float64 {
	return float64(r.byPurpose[coolify.PurposePoll]) / float64(r.services)
}
func (r result) ratio() float64 { return r.makespan.Seconds() / r.bound.Seconds() }

// perMinute is the requests of purpose p per real-time minute.
func (r result) perMinute(p coolify.Purpose) float64 {
	return float64(r.byPurpose[p]) / (r.makespan.Minutes() * r.scale)
}

func addFigures(rep *figures.Report, c settings, rs []result) {
	const table = "requests, 429 and makespan by deployment time"
	for _, r := range rs {
		row := fmt.Sprintf("%s deployments", r.duration)
		rep.Add(figures.Figure{Table: table, Row: row, Column: "requests/service", Value: r.perService(), Headline: true})
		rep.Add(figures.Figure{Table: table, Row: row, Column: "polls/service", Value: r.pollsPerService()})
		rep.Add(figures.Figure{Table: table, Row: row, Column: "429 answers", Value: float64(r.throttled), Max: 0.5, Headline: true})
		rep.Add(figures.Figure{Table: table, Row: row, Column: "makespan ÷ bound", Unit: "×", Value: r.ratio(), Max: 1.05, Headline: true})
	}
	first, last := rs[0], rs[len(rs)-1]
	rep.Add(figures.Figure{Table: "flat in deployment time", Row: fmt.Sprintf("%s ÷ %s", last.duration, first.duration),
		Column: "requests/service", Unit: "×", Value: last.perService() / first.perService(), Max: 1.2, Headline: true})
	const perMin = "requests per minute by purpose (real time)"
	for _, r := range rs {
		for _, p := range coolify.Purposes {
			rep.Add(figures.Figure{Table: perMin, Row: fmt.Sprintf("%s deployments", r.duration), Column: string(p), Unit: "/min", Value: r.perMinute(p)})
		}
	}
}

func about(c settings) string {
	return fmt.Sprintf("%d pipelines of %d services (phase2.parallel %d) run at once on %d daemons sharing one Redis (locks, runs, "+
		"the Coolify budget and the look at active deployments), against one fake Coolify with its default throttle of %d requests a "+
		"minute per token and %d concurrent builds. Every deployment takes the time of its row; time runs %g× faster than real "+
		"(the throttle's window and the poll interval shrink with it), so the request counts are those of real durations. "+
		"**requests/service** is every request the fake received ÷ services; **polls/service** those made waiting for deployments "+
		"to end. **bound** is the larger of deployments ÷ concurrent builds × deployment time, after the fewest requests a "+
		"two-phase deploy sends before its first deployment ÷ rate (3 a service of one pipeline, then the deploy), and all requests ÷ rate. "+
		"Goals: requests/service at the longest deployments ≤ 1.2× those at the shortest; 0 × 429; makespan ≤ 1.05× bound.",
		c.pipelines, c.services, c.parallel, c.daemons, c.rate, c.builds, c.scale)
}

// measure runs every pipeline once, at once, with deployments of d (unscaled).
func measure(ctx context.Context, c settings, redisAddr string, db int, d time.Duration) (result, error) {
	scaled := func(x time.Duration) time.Duration { return time.Duration(float64(x) / c.scale) }
	window := scaled(time.Minute)
	total := c.pipelines * c.services
	f := coolifytest.New(coolifytest.WithTiming(coolifytest.Timing{RunMin: scaled(d), RunMax: scaled(d)}),
		coolifytest.WithConcurrentBuilds(c.builds), coolifytest.WithRateLimit(c.rate, window))
	stamps := &stampLog{}
	srv := httptest.NewServer(stamps.wrap(f))
	defer srv.Close()

	var mu sync.Mutex
	by := map[coolify.Purpose]int{}
	count := func(p coolify.Purpose) { mu.Lock(); by[p]++; mu.Unlock() }

	pipes := make([][]*config.Pipeline, c.daemons)
	for i := range c.pipelines {
		p, err := pipeline(f, srv.URL, fmt.Sprintf("p%d", i), i*c.services, c.services, c.parallel)
		if err != nil {
			return result{}, err
		}
		pipes[i%c.daemons] = append(pipes[i%c.daemons], p)
	}
	var engines []*engine
	for i := range c.daemons {
		en, err := newEngine(ctx, redisAddr, db, fmt.Sprintf("bench-budget-%d", i), pacing.Budget{Limit: c.rate, Window: window},
			scaled(coolify.DefaultPollInterval), count, pipes[i])
		if err != nil {
			return result{}, err
		}
		defer en.close()
		engines = append(engines, en)
	}
	start := time.Now()
	stamps.start(start)
	var wg sync.WaitGroup
	errs := make(chan error, c.pipelines)
	for i, en := range engines {
		for _, p := range pipes[i] {
			wg.Go(func() {
				if err := en.run(ctx, p.Name); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	makespan := time.Since(start)
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return result{}, err
	}
	calls := len(f.Requests())
	if c.routes {
		routes := map[string]int{}
		for _, q := range f.Requests() {
			routes[q.Route]++
		}
		fmt.Fprintln(os.Stderr, d, routes)
		mu.Lock()
		fmt.Fprintln(os.Stderr, d, "by purpose", by)
		mu.Unlock()
		printTimeline(f, stamps, start, makespan, c.builds)
	}
	perRequest := float64(window) / float64(c.rate)
	prefix := time.Duration(float64(minDeployPrefix(c.services)) * perRequest)
	builders := time.Duration((total+c.builds-1)/c.builds)*scaled(d) + prefix
	budget := time.Duration(float64(calls) * perRequest)
	mu.Lock()
	defer mu.Unlock()
	return result{duration: d, services: total, calls: calls, byPurpose: by, throttled: f.Throttled(),
		makespan: makespan, bound: max(builders, budget), scale: c.scale}, nil
}

// minDeployPrefix is the fewest requests a two-phase deploy of services services sends
// before its first deployment: per service a read of its env vars, their write and the image
// tag's write, then the deploy.
func minDeployPrefix(services int) int { return 3*services + 1 }

// pipeline adds the apps from..from+n to the fake and returns a pipeline over them: a new
// image tag and an env var from the trigger, so Phase 1 writes and Phase 2 deploys each one.
func pipeline(f *coolifytest.Fake, url, name string, from, n, parallel int) (*config.Pipeline, error) {
	var y strings.Builder
	fmt.Fprintf(&y, "name: %s\ncoolify:\n  url: %s\n  token: %q\nservices:\n", name, url, coolifytest.DefaultToken)
	for i := from; i < from+n; i++ {
		uuid := fmt.Sprintf("budget-app-%04d", i)
		f.AddApplication(coolifytest.Application{UUID: uuid, Name: uuid, ImageName: "ghcr.io/acme/" + uuid, ImageTag: "v0"})
		fmt.Fprintf(&y, "  - name: svc-%04d\n    uuid: %s\n    image_tag: \"${trigger.image_tag}\"\n    env:\n      - key: BUILD\n        value: \"${trigger.build}\"\n    deploy_timeout: 3600s\n", i, uuid)
	}
	fmt.Fprintf(&y, "phase2: { parallel: %d }\n", parallel)
	y.WriteString("locks:\n  ttl: 60s\n  phase: { timeout: 3600s, max_retries: 0 }\n  service: { timeout: 3600s, max_retries: 0 }\n")
	return config.LoadPipelineBytes(name+".yaml", []byte(y.String()), func(string) string { return "" })
}

// engine is one daemon: its engine over its own Redis client.
type engine struct {
	e     *phases.Engine
	store runs.Store
	close func()
}

func newEngine(ctx context.Context, addr string, db int, instance string, budget pacing.Budget, poll time.Duration,
	count func(coolify.Purpose), ps []*config.Pipeline) (*engine, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db, ContextTimeoutEnabled: true})
	locker := locks.New(redislock.New(rdb, redislock.Options{}), locks.Options{})
	st := redisstore.New(rdb, redisstore.Options{})
	pool, err := pacing.NewRedisPool(rdb, budget, pacing.Options{})
	if err != nil {
		return nil, err
	}
	pipes := map[string]*config.Pipeline{}
	for _, p := range ps {
		pipes[p.Name] = p
	}
	e, err := phases.New(phases.Deps{
		Store: st, Marks: st, Locker: locker, Pipelines: pipes,
		Coolify: func(url, token string) phases.Coolify {
			return coolify.New(url, token, coolify.WithPollInterval(poll), coolify.WithLimiter(pool.For(url, token)),
				coolify.WithBoard(pool.Board(url, token)), coolify.WithPurposeMetrics(count))
		},
		Instance: instance, Logger: slog.New(slog.DiscardHandler), PollInterval: poll,
	})
	if err != nil {
		return nil, err
	}
	if _, err := e.Start(ctx); err != nil {
		return nil, err
	}
	return &engine{e: e, store: st, close: func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = e.Shutdown(sctx)
		locker.Close()
		st.Close()
		rdb.Close()
	}}, nil
}

// run submits one run of pipeline and waits for it; it fails unless the run succeeded.
func (en *engine) run(ctx context.Context, pipeline string) error {
	r, _, err := en.e.Submit(ctx, pipeline, orchestrator.Trigger{Build: "2", ImageTag: "v2", By: "benchbudget"})
	if err != nil {
		return err
	}
	if err := en.e.Wait(ctx, r.ID); err != nil {
		return err
	}
	got, err := en.store.Get(ctx, r.ID)
	if err != nil {
		return err
	}
	if got.Status != runs.StatusSucceeded {
		return fmt.Errorf("run %s of %s: %s (%s)", r.ID, pipeline, got.Status, got.Reason)
	}
	return nil
}

// startRedis starts a private redis-server on a free loopback port.
func startRedis(ctx context.Context) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not found in PATH (apt-get install -y redis-server)")
	}
	dir, err := os.MkdirTemp("", "benchbudget-redis-")
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(ctx).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer within 10s", addr)
		}
	}
	return addr, stop, nil
}

// stampLog notes when each request reached the fake, and for which run, for -routes.
type stampLog struct {
	mu     sync.Mutex
	t0     time.Time
	stamps []stamp
}

// stamp is one request: when (since the start), the run that sent it, and what it was.
type stamp struct {
	at          time.Duration
	run, method string
	path        string
}

func (l *stampLog) start(t time.Time) { l.mu.Lock(); l.t0 = t; l.mu.Unlock() }

func (l *stampLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		if !l.t0.IsZero() {
			l.stamps = append(l.stamps, stamp{time.Since(l.t0), r.Header.Get("X-Orchestrator-Run"), r.Method, r.URL.Path})
		}
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// printTimeline prints to stderr where the time went (scaled): for each run, in the order
// its first request came, its first and last write (Phase 1), its first deploy and its last
// request; then the first deployment's start, the builders' idle time between the first
// start and the last end, and the tail from the last end to the makespan.
func printTimeline(f *coolifytest.Fake, l *stampLog, start time.Time, makespan time.Duration, builds int) {
	type span struct{ first, write0, write1, deploy, last time.Duration }
	l.mu.Lock()
	byRun, order := map[string]*span{}, []string{}
	for _, s := range l.stamps {
		sp := byRun[s.run]
		if sp == nil {
			sp = &span{first: s.at, write0: -1, deploy: -1}
			byRun[s.run], order = sp, append(order, s.run)
		}
		sp.last = s.at
		if s.method == http.MethodPatch {
			if sp.write0 < 0 {
				sp.write0 = s.at
			}
			sp.write1 = s.at
		}
		if s.method == http.MethodPost && strings.HasSuffix(s.path, "/deploy") && sp.deploy < 0 {
			sp.deploy = s.at
		}
	}
	l.mu.Unlock()
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	for _, r := range order {
		sp := byRun[r]
		fmt.Fprintf(os.Stderr, "run %s: first request %v, writes %v..%v, first deploy %v, last request %v\n",
			cmp.Or(r, "(none)"), ms(sp.first), ms(sp.write0), ms(sp.write1), ms(sp.deploy), ms(sp.last))
	}
	deps := f.Deployments("")
	if len(deps) == 0 {
		return
	}
	first, last := deps[0].StartedAt, deps[0].FinishedAt
	var busy time.Duration
	for _, d := range deps {
		if d.StartedAt.Before(first) {
			first = d.StartedAt
		}
		if d.FinishedAt.After(last) {
			last = d.FinishedAt
		}
		busy += d.FinishedAt.Sub(d.StartedAt)
	}
	idle := time.Duration(builds)*last.Sub(first) - busy
	fmt.Fprintf(os.Stderr, "first deployment started at %v; builders idle %v each of the %v from it to the last end; last end to makespan %v\n",
		ms(first.Sub(start)), ms(idle/time.Duration(builds)), ms(last.Sub(first)), ms(makespan-last.Sub(start)))
}
