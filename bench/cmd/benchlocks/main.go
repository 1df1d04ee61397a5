// Command benchlocks compares lock implementations side by side against one local
// redis-server that it starts itself (free loopback port, temporary directory, no
// persistence): the orchestrator's Redis and SQLite backends (through locks.Locker with its
// defaults, as the product uses them) — SQLite both with every client in this process and
// with each client a child process of its own (orchestrator-sqlite-procs, as `serve` and
// `run` share a state directory) —, github.com/bsm/redislock with linear backoff of 10 ms
// and 100 ms, and github.com/go-redsync/redsync/v4 with its defaults.
//
// It prints one line per arrival pattern and implementation:
//
//	pattern=<burst|staggered> impl=<name> uncontended_p50_us=<n> handoff_p50_us=<n> handoff_p99_us=<n> chain_max_wait_ms=<n> idle_cmds_per_waiter_s=<n>
//
// then, when both are in the run, the uncontended p50s of orchestrator-redis and
// redislock-10ms measured taking turns with each other alone, as the goal on their ratio is
// defined, before every other phase (first) and after them (last):
//
//	paired phase=<first|last> orchestrator-redis=<n>us redislock-10ms=<n>us ratio=<r>
//
// and with -json writes the same figures for cmd/benchreport (`make bench`). The measures:
//   - uncontended: acquire+release of distinct keys, -n times (after 100 for warm-up), by
//     one client;
//   - handoff: -waiters clients, each with its own connections as separate processes would
//     have, queue on one key held by another; each holds it -hold, releases and leaves.
//     handoff_* is the gap from the call of a release to the next grant (of a waiter that
//     was waiting by then), over -rounds rounds per pattern; chain_max_wait_ms is the
//     longest wait of a round (from the first release of the round to a waiter's grant),
//     the median over the rounds. Two arrival patterns: burst (every waiter asks at once,
//     as a CI fan-out) and staggered (each asks at a uniformly random time over -window,
//     and the first holder releases at its end), which puts pollers' retries at random
//     phases instead of in lockstep;
//   - idle_cmds_per_waiter_s: Redis commands per second per waiter while the key is held
//     for -idle, from INFO commandstats deltas, which count the commands scripts call as
//     well (0 for SQLite, which sends none).
//
// Times are taken where the lock is taken: a child process reports its own, so the pipe to
// it adds nothing to a figure.
//
// A diagnostic subject, orchestrator-redis-driver (the Redis driver without a Locker),
// is measured uncontended and reported on stderr only, to split our result into the
// driver's share and the Locker's.
//
// The implementations take turns so that the load of a shared machine is spread over all
// of them: one handoff round each, and in the uncontended phase one operation each
// (-interleave), in a new random order every round. Turns of one operation make the
// uncontended p50s a paired comparison: with turns of 50 (a few milliseconds), the
// machine's state (load, idle cores waking, periodic work such as the SQLite drivers' file
// polls or Redis' cron) changed between turns and moved one implementation's p50 against
// another's by 30% from run to run; the random order keeps one implementation from always
// following the same other one. Details (percentiles, worst round,
// the commands counted) go to stderr. Run it with `make bench-locks`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == childFlag {
		if err := runChild(os.Args[2], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "benchlocks child:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchlocks:", err)
		os.Exit(1)
	}
}

type config struct {
	n int
	// interleave is how many uncontended operations one implementation runs before the
	// next takes its turn.
	interleave int
	waiters    int
	hold       time.Duration
	window     time.Duration
	rounds     int
	idle       time.Duration
	only       []string
	jsonPath   string
	price      int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var only string
	fs.IntVar(&cfg.n, "n", 3000, "uncontended acquire+release pairs")
	fs.IntVar(&cfg.interleave, "interleave", 1, "uncontended operations one implementation runs before the next takes its turn")
	fs.IntVar(&cfg.waiters, "waiters", 8, "waiters queued on one key")
	fs.DurationVar(&cfg.hold, "hold", 2*time.Millisecond, "how long each waiter holds the key")
	fs.DurationVar(&cfg.window, "window", 100*time.Millisecond, "staggered arrivals: the window over which waiters arrive")
	fs.IntVar(&cfg.rounds, "rounds", 15, "handoff rounds per arrival pattern")
	fs.DurationVar(&cfg.idle, "idle", 5*time.Second, "how long the key is held while waiters idle")
	fs.StringVar(&only, "only", "", "comma-separated implementations to run (default all)")
	fs.IntVar(&cfg.price, "price", 3000, "uncontended pairs per variant pricing the Redis backend's layers and guarantees (0: skip)")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the figures to this file for benchreport")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if only != "" {
		cfg.only = strings.Split(only, ",")
	}
	if cfg.n < 1 || cfg.interleave < 1 || cfg.waiters < 1 || cfg.rounds < 1 || cfg.idle <= 0 || cfg.window <= 0 {
		return errors.New("-n, -interleave, -waiters, -rounds, -idle and -window must be positive")
	}
	rep := figures.Start("locks", "Locks", "cd bench && go run ./cmd/benchlocks "+strings.Join(withoutJSON(args[1:]), " "))

	srv, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()

	dir, err := os.MkdirTemp("", "benchlocks-sqlite-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	var impls []impl
	for _, im := range implementations(srv.addr, dir) {
		if len(cfg.only) == 0 || slices.Contains(cfg.only, im.name) {
			impls = append(impls, im)
		}
	}
	// The ratio's goal is measured first, before this run's other phases, as a run with
	// -only orchestrator-redis,redislock-10ms measures it; again last, after them all. The
	// two can differ by far more than run-to-run noise: after sustained activity a round
	// trip on a VM can take a fraction of its time from idle, and then what each side
	// computes weighs more (see docs/benchmarks.md).
	first, pairedOK, err := paired(ctx, impls, cfg, "first")
	if err != nil {
		return fmt.Errorf("paired uncontended, first: %w", err)
	}
	results, err := measureAll(ctx, impls, srv, cfg, stderr)
	if err != nil {
		return err
	}
	for _, p := range patterns {
		for i, res := range results {
			if impls[i].diagnostic {
				continue
			}
			h := res.handoff[p]
			fmt.Fprintf(stdout, "pattern=%s impl=%s uncontended_p50_us=%d handoff_p50_us=%d handoff_p99_us=%d chain_max_wait_ms=%d idle_cmds_per_waiter_s=%.1f\n",
				p, impls[i].name, res.uncontendedP50.Microseconds(), h.p50.Microseconds(), h.p99.Microseconds(),
				h.chainMaxWait.Milliseconds(), res.idleCmds)
		}
	}
	last, _, err := paired(ctx, impls, cfg, "last")
	if err != nil {
		return fmt.Errorf("paired uncontended, last: %w", err)
	}
	if pairedOK {
		printPaired(stdout, "first", first)
		printPaired(stdout, "last", last)
	}
	var pr []priceResult
	if cfg.price > 0 {
		if pr, err = price(ctx, srv, cfg.price); err != nil {
			return fmt.Errorf("price of guarantees: %w", err)
		}
		bsm := pr[len(pr)-1].p50
		for _, r := range pr {
			fmt.Fprintf(stdout, "price variant=%q pair_p50_us=%.1f ratio_to_bsm=%.2f redis_us=%.1f\n", r.name,
				float64(r.p50.Nanoseconds())/1e3, float64(r.p50)/float64(bsm), float64(r.redis.Nanoseconds())/1e3)
		}
	}
	if cfg.jsonPath == "" {
		return nil
	}
	addFigures(rep, impls, results, cfg)
	if pairedOK {
		addPairedFigures(rep, first, last)
	}
	addPriceFigures(rep, pr, cfg)
	return rep.Finish(cfg.jsonPath)
}

// printPaired prints the paired uncontended p50s of one phase.
func printPaired(w io.Writer, phase string, p50s [len(pairedNames)]time.Duration) {
	fmt.Fprintf(w, "paired phase=%s %s=%dus %s=%dus ratio=%.2f\n", phase, pairedNames[0], p50s[0].Microseconds(),
		pairedNames[1], p50s[1].Microseconds(), float64(p50s[0])/float64(p50s[1]))
}

// withoutJSON drops the -json flag and its value from args, for the command a report shows.
func withoutJSON(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-json" || args[i] == "--json":
			i++
		case strings.HasPrefix(args[i], "-json=") || strings.HasPrefix(args[i], "--json="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}
