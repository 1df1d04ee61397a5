package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// cmdAudit is `orchestrator audit verify|export`: the audit log read straight from the
// backend (never through a daemon, whose word verify is there to check), or an export file.
func cmdAudit(ctx context.Context, c *cli, args []string) error {
	return subcommand(ctx, c, args, "audit", auditUsage, map[string]func(context.Context, *cli, []string) error{"verify": cmdAuditVerify, "export": cmdAuditExport})
}

const auditUsage = `Usage: orchestrator audit <verify|export> [flags]

Reads the audit log from the local backend: Redis when ORCH_REDIS_URL (or redis_url in
--config) is set, else the embedded SQLite file in the state dir (ORCH_STATE_DIR, default
./.orchestrator). A daemon's export (GET /v1/audit/export) is checked with verify --file.

  verify    check that no record was changed, removed or inserted; exit 0 when intact, 1 when not
  export    write every record kept as JSON lines, oldest first, after a line with the anchor and head
`

// errAuditBroken is verify's answer when the chain is broken (exit 1, as a failed run).
var errAuditBroken = errors.New("audit log verification failed")

func cmdAuditVerify(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("audit verify", "[--file EXPORT]", "Checks the audit log's hash chain from its anchor to its head.")
	t := addAuditSourceFlags(c, fs)
	file := fs.String("file", "", "verify this export (GET /v1/audit/export, audit export) instead of the backend")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 0 {
		return usageError("audit verify takes no arguments (see --help)")
	}
	var span runs.AuditSpan
	var recs []runs.AuditRecord
	source := ""
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return usageError("audit verify: %v", err)
		}
		defer f.Close()
		if span, recs, err = runs.ReadAuditExport(f); err != nil {
			return fmt.Errorf("%w: %s: %w", errAuditBroken, *file, err)
		}
		source = "file " + *file
	} else {
		b, err := t.openLocal(ctx, c)
		if err != nil {
			return err
		}
		defer b.Close()
		if span.Anchor, span.Head, err = b.store.AuditEnds(ctx); err != nil {
			return err
		}
		if recs, err = b.store.AuditRecords(ctx, span.Anchor.Seq, 0); err != nil {
			return err
		}
		source = b.where
	}
	fmt.Fprintf(c.stdout, "from %s\n", source)
	if err := runs.VerifyAudit(span.Anchor, span.Head, recs); err != nil {
		return fmt.Errorf("%w: %w", errAuditBroken, err)
	}
	from := "the first record"
	if span.Anchor.Seq > 0 {
		from = fmt.Sprintf("the anchor %d (records up to it were pruned)", span.Anchor.Seq)
	}
	fmt.Fprintf(c.stdout, "audit log intact: %d records, from %s to the head %d (hash %s)\n", len(recs), from, span.Head.Seq, span.Head.Hash)
	return nil
}

func cmdAuditExport(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("audit export", "", "Writes the audit log as JSON lines to stdout.")
	t := addAuditSourceFlags(c, fs)
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 0 {
		return usageError("audit export takes no arguments (see --help)")
	}
	b, err := t.openLocal(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	_, err = runs.ExportAudit(ctx, c.stdout, b.store)
	return err
}

// auditSource is the local backend a command reads: the daemon config's, with the
// --redis-url and --state-dir flags over it.
type auditSource struct {
	cfg *string
	fs  *pflag.FlagSet
}

func addAuditSourceFlags(c *cli, fs *pflag.FlagSet) *auditSource {
	t := &auditSource{cfg: fs.String("config", c.getenv("ORCH_CONFIG"), "daemon config file naming the backend (env ORCH_CONFIG)"), fs: fs}
	config.AddFlagSubset(fs, "redis-url", "state-dir")
	return t
}

// openLocal opens the backend to read: on the embedded one it creates nothing.
func (t *auditSource) openLocal(ctx context.Context, c *cli) (*backends, error) {
	d, log, err := localDaemon(ctx, c, *t.cfg, t.fs)
	if err != nil {
		return nil, err
	}
	return openBackendsToRead(ctx, d, log)
}
