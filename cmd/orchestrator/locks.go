package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

func cmdLocks(ctx context.Context, c *cli, args []string) error {
	sub := map[string]func(context.Context, *cli, []string) error{
		"list": cmdLocksList, "release": cmdLocksRelease, "freeze": cmdLocksFreeze,
	}
	if len(args) == 0 || sub[args[0]] == nil {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
			fmt.Fprint(c.stderr, locksUsage)
			return nil
		}
		fmt.Fprint(c.stderr, locksUsage)
		return usageError("locks: want a subcommand: list, release or freeze")
	}
	return sub[args[0]](ctx, c, args[1:])
}

const locksUsage = `Usage: orchestrator locks <list|release|freeze> [flags]

Works on the configured lock backend: Redis when ORCH_REDIS_URL (or redis_url in --config) is
set, otherwise the embedded SQLite file in ORCH_STATE_DIR (default ./.orchestrator).

  list      show held locks: holder, fence, acquired, expires, message, waiters
  release   force-release a crashed holder's lock (needs the fence or holder you saw, and a reason)
  freeze    put an operator lease on a key (or --lift one)
`

// lockBackend opens the configured backend for a locks subcommand.
func lockBackend(ctx context.Context, c *cli, fs *pflag.FlagSet, cfgPath string) (*backends, error) {
	d, err := config.LoadDaemon(cfgPath, c.getenv, fs)
	if err != nil {
		return nil, fmt.Errorf("daemon config:\n%w", err)
	}
	log, err := newLogger(c.stderr, "warn", "text")
	if err != nil {
		return nil, err
	}
	return openBackends(ctx, d, log, nil)
}

func lockFlags(c *cli, name, argsUsage, summary string) (*pflag.FlagSet, *string) {
	fs := c.flags("locks "+name, argsUsage, summary)
	cfg := fs.String("config", c.getenv("ORCH_CONFIG"), "daemon config file (env ORCH_CONFIG)")
	config.AddFlags(fs)
	return fs, cfg
}

func cmdLocksList(ctx context.Context, c *cli, args []string) error {
	fs, cfg := lockFlags(c, "list", "[--prefix P] [--json] [--audit]", "Lists the held locks (tokens are never shown).")
	prefix := fs.String("prefix", "", "only keys starting with this prefix (e.g. coolify:)")
	asJSON := fs.Bool("json", false, "print JSON")
	audit := fs.Bool("audit", false, "show the operator audit log (forced releases, freezes) instead")
	if done, err := parse(fs, args); done {
		return err
	}
	b, err := lockBackend(ctx, c, fs, *cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	if *audit {
		entries, err := b.locker.Audit(ctx, 100)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(c.stdout, entries)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tACTION\tKEY\tBY\tREASON\tEVICTED")
		for _, e := range entries {
			evicted := "-"
			if e.Evicted != nil {
				evicted = fmt.Sprintf("%s (fence %d)", e.Evicted.Holder, e.Evicted.Fence)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.DateTime), e.Action, e.Key, e.By, e.Reason, evicted)
		}
		return tw.Flush()
	}
	infos, err := b.locker.List(ctx, *prefix)
	if err != nil {
		return err
	}
	if *asJSON {
		if infos == nil {
			infos = []locks.Info{}
		}
		return writeJSON(c.stdout, infos)
	}
	printLocks(c.stdout, infos, time.Now())
	return nil
}

func printLocks(w io.Writer, infos []locks.Info, now time.Time) {
	if len(infos) == 0 {
		fmt.Fprintln(w, "no locks held")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tFENCE\tACQUIRED\tEXPIRES IN\tWAITERS\tMESSAGE")
	for _, i := range infos {
		holder := i.Holder
		if i.Frozen {
			holder += " [frozen]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", i.Key, holder, i.Fence,
			i.AcquiredAt.Local().Format(time.DateTime), i.Remaining(now).Round(time.Second), i.Waiters, i.Message)
	}
	tw.Flush()
}

func cmdLocksRelease(ctx context.Context, c *cli, args []string) error {
	fs, cfg := lockFlags(c, "release", "KEY (--fence N | --holder H) --reason TEXT",
		"Force-releases the lock on KEY, for a holder that crashed. Name the fence or the holder you\n"+
			"saw in `locks list`: if the lock changed since, nothing is released. The key then stays\n"+
			"closed for the lock-delay so the evicted holder can notice. The action is audited.")
	fence := fs.Int64("fence", 0, "the fence you saw")
	holder := fs.String("holder", "", "the holder you saw")
	reason := fs.String("reason", "", "why (required, kept in the audit log)")
	by := fs.String("by", "", "who you are (default $USER)")
	delay := fs.Duration("lock-delay", locks.DefaultLockDelay, "how long the key stays closed afterwards")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("locks release: want one KEY argument (see --help)")
	}
	if (*fence == 0) == (*holder == "") || *reason == "" {
		return usageError("locks release: give exactly one of --fence or --holder, and --reason")
	}
	b, err := lockBackend(ctx, c, fs, *cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	info, err := b.locker.ForceRelease(ctx, locks.ForceRequest{Key: fs.Arg(0), Fence: *fence, Holder: *holder,
		Reason: *reason, By: orDefault(*by, "cli:"+userName(c.getenv)), LockDelay: *delay})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "released %s (held by %s, fence %d); closed for %s\n", info.Key, info.Holder, info.Fence, *delay)
	return nil
}

func cmdLocksFreeze(ctx context.Context, c *cli, args []string) error {
	fs, cfg := lockFlags(c, "freeze", "KEY --message TEXT [--for 1h | --until TIME] | KEY --lift --reason TEXT",
		"Freezes KEY with an operator lease (no heartbeat) that expires after --for or at --until;\n"+
			"runs that meet it wait or fail, as their pipeline says. --lift removes a freeze.")
	message := fs.String("message", "", "why the key is frozen (shown to waiting runs)")
	dur := fs.Duration("for", time.Hour, "how long the freeze lasts")
	until := fs.String("until", "", "when the freeze ends (RFC 3339), instead of --for")
	lift := fs.Bool("lift", false, "lift the freeze instead")
	reason := fs.String("reason", "", "why the freeze is lifted (with --lift)")
	by := fs.String("by", "", "who you are (default $USER)")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("locks freeze: want one KEY argument (see --help)")
	}
	who := orDefault(*by, "cli:"+userName(c.getenv))
	end := time.Now().Add(*dur)
	if *until != "" {
		t, err := time.Parse(time.RFC3339, *until)
		if err != nil {
			return usageError("locks freeze: --until %q: want RFC 3339, e.g. 2026-12-24T18:00:00Z", *until)
		}
		end = t
	}
	if !*lift && *message == "" {
		return usageError("locks freeze: --message is required")
	}
	b, err := lockBackend(ctx, c, fs, *cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	if *lift {
		if err := b.locker.Unfreeze(ctx, fs.Arg(0), who, orDefault(*reason, "lifted from the CLI")); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "lifted the freeze on %s\n", fs.Arg(0))
		return nil
	}
	info, err := b.locker.Freeze(ctx, locks.FreezeRequest{Key: fs.Arg(0), Message: *message, By: who, Until: end})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "froze %s until %s\n", info.Key, info.ExpiresAt.Local().Format(time.DateTime))
	return nil
}
