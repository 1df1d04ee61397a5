package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func cmdLocks(ctx context.Context, c *cli, args []string) error {
	return subcommand(ctx, c, args, "locks", locksUsage, map[string]func(context.Context, *cli, []string) error{
		"list": cmdLocksList, "release": cmdLocksRelease, "freeze": cmdLocksFreeze,
		"unfreeze": cmdLocksUnfreeze, "audit": cmdLocksAudit,
	})
}

const locksUsage = `Usage: orchestrator locks <list|release|freeze|unfreeze|audit> [flags]

With --url (or ORCH_URL) through the daemon's API (token from --token, ORCH_READ_TOKEN to
read, ORCH_ADMIN_TOKEN to act); without it on the local backend: Redis when ORCH_REDIS_URL
(or redis_url in --config) is set, else the embedded SQLite file in the state dir
(ORCH_STATE_DIR, default ./.orchestrator). Every output first names what it read.

  list            held locks: holder, fence, acquired, expires, message, waiters
  release KEY     force-release a crashed holder's lock (the fence or holder you saw, and a reason)
  freeze KEY      put an operator lease on a key until --for / --until
  unfreeze KEY    lift a freeze
  audit           actions on locks from the audit log (forced releases, freezes, lifts,
                  the daemon's deployment cancels, takeovers and rollbacks): who, when, why;
                  ` + "`orchestrator audit export`" + ` and GET /v1/audit have the whole log
`

// lockKeyArg is the one KEY argument, checked with the rule the API applies.
func lockKeyArg(fs *pflag.FlagSet, cmd string) (string, error) {
	if fs.NArg() != 1 {
		return "", usageError("%s: want one KEY argument (see --help)", cmd)
	}
	if err := orchestrator.CheckLockKey(fs.Arg(0)); err != nil {
		return "", usageError("%s: %w", cmd, err)
	}
	return fs.Arg(0), nil
}

// lockRefusal gives the lock service's refusals (stale fence, key held, not frozen) exit
// code 1 and its invalid requests exit code 2; the API client has already classified its own.
func lockRefusal(err error) error {
	var ee *exitError
	switch {
	case err == nil || errors.As(err, &ee):
		return err
	case errors.Is(err, locks.ErrInvalid):
		return &exitError{code: exitUsage, err: err}
	}
	return err
}

func cmdLocksList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("locks list", "[--prefix P] [--json] [--url URL]", "Lists the held locks (tokens are never shown).")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	prefix := fs.String("prefix", "", "only keys starting with this prefix (e.g. coolify:)")
	asJSON := fs.Bool("json", false, "print one JSON lock per line")
	if done, err := parse(fs, args); done {
		return err
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	infos, err := e.locks.List(ctx, *prefix)
	if err != nil {
		return err
	}
	e.header(c, *asJSON)
	if *asJSON {
		return jsonLines(c.stdout, infos)
	}
	if len(infos) == 0 {
		fmt.Fprintln(c.stdout, e.none("no locks held"))
		return nil
	}
	printLocks(c.stdout, infos, time.Now())
	return nil
}

func cmdLocksAudit(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("locks audit", "[--limit N] [--json] [--url URL]",
		"Shows the actions on locks from the audit log, newest first: forced releases, freezes and\n"+
			"lifts, and the daemon's deployment cancels, takeovers and rollbacks (the whole log:\n"+
			"`orchestrator audit export`, or GET /v1/audit).")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	limit := fs.Int("limit", 100, "how many entries")
	asJSON := fs.Bool("json", false, "print one JSON entry per line")
	if done, err := parse(fs, args); done {
		return err
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	entries, err := e.locks.Audit(ctx, *limit)
	if err != nil {
		return err
	}
	e.header(c, *asJSON)
	if *asJSON {
		return jsonLines(c.stdout, entries)
	}
	if len(entries) == 0 {
		fmt.Fprintln(c.stdout, e.none("no operator actions recorded"))
		return nil
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

// jsonLines writes each element of vs as one JSON line.
func jsonLines[T any](w io.Writer, vs []T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
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
	fs := c.flags("locks release", "KEY (--fence N | --holder H) --reason TEXT [--url URL]",
		"Force-releases the lock on KEY, for a holder that crashed. Name the fence or the holder you\n"+
			"saw in `locks list`: if the lock changed since, nothing is released. The key then stays\n"+
			"closed for the lock-delay so the evicted holder can notice. The action is audited.")
	fence := fs.Int64("fence", 0, "the fence you saw")
	holder := fs.String("holder", "", "the holder you saw")
	reason := fs.String("reason", "", "why (required, kept in the audit log)")
	by := fs.String("by", "", "who you are (default $USER)")
	t := addTargetFlags(c, fs)
	if done, err := parse(fs, args); done {
		return err
	}
	key, err := lockKeyArg(fs, "locks release")
	if err != nil {
		return err
	}
	if (*fence == 0) == (*holder == "") || *reason == "" {
		return usageError("locks release: give exactly one of --fence or --holder, and --reason")
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	who := orDefault(*by, "cli:"+userName(c.getenv))
	info, err := e.locks.ForceRelease(ctx, locks.ForceRequest{Key: key, Fence: *fence, Holder: *holder,
		Reason: *reason, By: who})
	e.audited(ctx, c, runs.AuditRecord{Subject: who, Action: runs.AuditForceRelease, Target: key, Reason: *reason,
		Detail: forceDetail(*fence, *holder, info)}, err)
	if err != nil {
		return lockRefusal(err)
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "released %s (held by %s, fence %d); the key stays closed for the lock delay so the holder can notice\n",
		info.Key, info.Holder, info.Fence)
	return nil
}

func cmdLocksFreeze(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("locks freeze", "KEY --message TEXT [--for 1h | --until TIME] [--url URL]",
		"Freezes KEY with an operator lease (no heartbeat) that expires after --for or at --until;\n"+
			"runs that meet it wait or fail, as their pipeline says. `locks unfreeze KEY` lifts it.")
	message := fs.String("message", "", "why the key is frozen (shown to waiting runs)")
	dur := fs.Duration("for", time.Hour, "how long the freeze lasts")
	until := fs.String("until", "", "when the freeze ends (RFC 3339), instead of --for")
	by := fs.String("by", "", "who you are (default $USER)")
	t := addTargetFlags(c, fs)
	if done, err := parse(fs, args); done {
		return err
	}
	key, err := lockKeyArg(fs, "locks freeze")
	if err != nil {
		return err
	}
	who := orDefault(*by, "cli:"+userName(c.getenv))
	now := time.Now()
	end := now.Add(*dur)
	switch {
	case *until != "" && fs.Changed("for"):
		return usageError("locks freeze: give --for or --until, not both")
	case *until != "":
		t, err := time.Parse(time.RFC3339, *until)
		if err != nil {
			return usageError("locks freeze: --until %q: want RFC 3339, e.g. 2026-12-24T18:00:00Z", *until)
		}
		if !t.After(now) {
			return usageError("locks freeze: --until %s: must be in the future", *until)
		}
		end = t
	case *dur <= 0:
		return usageError("locks freeze: --for %s: want a positive duration, e.g. 30m or 2h", *dur)
	}
	if end.Sub(now) > orchestrator.MaxFreeze {
		return usageError("locks freeze: the freeze would last %s: at most %s", end.Sub(now).Round(time.Second), orchestrator.MaxFreeze)
	}
	if *message == "" {
		return usageError("locks freeze: --message is required")
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	info, err := e.locks.Freeze(ctx, locks.FreezeRequest{Key: key, Message: *message, By: who, Until: end})
	detail := map[string]string{"until": end.UTC().Format(time.RFC3339)}
	if info.Fence != 0 {
		detail["fence"] = strconv.FormatInt(info.Fence, 10)
	}
	e.audited(ctx, c, runs.AuditRecord{Subject: who, Action: runs.AuditFreeze, Target: key, Reason: *message, Detail: detail}, err)
	if err != nil {
		return lockRefusal(err)
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "froze %s until %s\n", info.Key, info.ExpiresAt.Local().Format(time.DateTime))
	return nil
}

func cmdLocksUnfreeze(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("locks unfreeze", "KEY [--reason TEXT] [--url URL]", "Lifts the freeze on KEY. The action is audited.")
	reason := fs.String("reason", "", "why the freeze is lifted (kept in the audit log)")
	by := fs.String("by", "", "who you are (default $USER)")
	t := addTargetFlags(c, fs)
	if done, err := parse(fs, args); done {
		return err
	}
	key, err := lockKeyArg(fs, "locks unfreeze")
	if err != nil {
		return err
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	who, why := orDefault(*by, "cli:"+userName(c.getenv)), orDefault(*reason, "lifted from the CLI")
	lifted, err := e.locks.Unfreeze(ctx, key, who, why)
	e.audited(ctx, c, runs.AuditRecord{Subject: who, Action: runs.AuditUnfreeze, Target: key, Reason: why,
		Detail: forceDetail(0, "", lifted)}, err)
	if err != nil {
		return lockRefusal(err)
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "lifted the freeze on %s\n", key)
	return nil
}

// audited appends a lock action taken on the local backend to the run store's audit log,
// once its outcome (err) is known: ok, "failed: …" when the backend could not be reached,
// "refused: …" otherwise. Through a daemon's API the daemon records it. A failed append is a
// warning on stderr, never dropped in silence: the action has happened (or not) either way.
func (e *endpoint) audited(ctx context.Context, c *cli, rec runs.AuditRecord, err error) {
	if e.audit == nil {
		return
	}
	switch {
	case err == nil:
		rec.Outcome = runs.AuditOK
	case errors.Is(err, locks.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		rec.Outcome = runs.AuditFailed + ": " + err.Error()
	default:
		rec.Outcome = runs.AuditRefused + ": " + err.Error()
	}
	if _, aerr := e.audit.AppendAudit(context.WithoutCancel(ctx), rec); aerr != nil {
		fmt.Fprintf(c.stderr, "warning: the audit log did not take the record of this %s: %v\n", rec.Action, aerr)
	}
}

// forceDetail is what the audit log keeps of a forced release: the fence or holder the
// operator named, and the lease evicted (its holder and fence; a lease's token is never
// encoded); of an unfreeze, the freeze lifted. The API's records hold the same.
func forceDetail(fence int64, holder string, evicted locks.Info) map[string]string {
	d := map[string]string{}
	if fence != 0 {
		d["fence"] = strconv.FormatInt(fence, 10)
	}
	if holder != "" {
		d["holder"] = holder
	}
	if evicted.Holder != "" {
		d["evicted_holder"] = evicted.Holder
		d["evicted_fence"] = strconv.FormatInt(evicted.Fence, 10)
	}
	return d
}
