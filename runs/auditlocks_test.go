package runs_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// TestLockAudit: the lock view of the audit log holds the lock actions done (and the
// engine's rollbacks of a service), newest first, across the chunks it reads the log in,
// in the old trail's shape; refused actions, triggers and API rollbacks are not in it.
func TestLockAudit(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := []runs.AuditRecord{
		{Subject: "api:admin", Action: runs.AuditForceRelease, Target: "coolify:a", Reason: "dead", Outcome: runs.AuditOK,
			Detail: map[string]string{"evicted_holder": "prod#1/api", "evicted_fence": "42"}},
		{Subject: "api:admin", Action: runs.AuditForceRelease, Target: "coolify:a", Reason: "stale", Outcome: runs.AuditRefused + ": lock changed"},
		{Subject: "api:deployer", Action: runs.AuditTrigger, Target: "prod", Outcome: runs.AuditOK},
		{Subject: "api:deployer", Action: runs.AuditRollback, Target: "prod", Outcome: runs.AuditOK},
		{Subject: "daemon:d1", Action: runs.AuditRollback, Target: "coolify:a", Outcome: runs.AuditOK},
		{Subject: "daemon:d1", Action: runs.AuditCancelDeployment, Target: "coolify:a", Outcome: runs.AuditOK},
		{Subject: "daemon:d1", Action: runs.AuditTakeover, Target: "daemon:live:d2", Outcome: runs.AuditOK},
		{Subject: "cli:ops", Action: runs.AuditFreeze, Target: "coolify:phase1", Outcome: runs.AuditOK},
		{Subject: "cli:ops", Action: runs.AuditUnfreeze, Target: "coolify:phase1", Outcome: runs.AuditOK},
	}
	const rounds = 130 // 1170 records: the view reads them in three chunks
	for range rounds {
		for _, r := range in {
			if _, err := st.AppendAudit(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := runs.LockAudit(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := rounds * 6; len(all) != want {
		t.Fatalf("lock actions: got %d, want %d", len(all), want)
	}
	want := []string{runs.AuditUnfreeze, runs.AuditFreeze, runs.AuditTakeover, runs.AuditCancelDeployment, runs.AuditRollback, runs.AuditForceRelease}
	for i, e := range all {
		if e.Action != want[i%len(want)] || (i > 0 && e.Seq >= all[i-1].Seq) || e.Outcome != runs.AuditOK {
			t.Fatalf("entry %d: got %+v, want %s, newest first", i, e, want[i%len(want)])
		}
	}
	fr := all[5]
	if fr.Key != "coolify:a" || fr.By != "api:admin" || fr.Reason != "dead" || fr.Evicted == nil ||
		*fr.Evicted != (runs.EvictedLease{Key: "coolify:a", Holder: "prod#1/api", Fence: 42}) {
		t.Errorf("the forced release: got %+v (evicted %+v)", fr, fr.Evicted)
	}
	three, err := runs.LockAudit(ctx, st, 3)
	if err != nil || len(three) != 3 || three[0] != all[0] || three[2] != all[2] {
		t.Errorf("limit 3: got %+v, %v; want the newest three", three, err)
	}
}
