package runstest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// auditTests check runs.AuditLog, the hash-chained audit log; Run runs them.
var auditTests = []struct {
	name string
	fn   func(t *testing.T, open Opener)
}{
	{"AuditChain", testAuditChain},
	{"AuditInvalid", testAuditInvalid},
	{"AuditConcurrent", testAuditConcurrent},
	{"AuditPrune", testAuditPrune},
}

func auditLog(t *testing.T, s runs.Store) runs.AuditLog {
	t.Helper()
	return implements[runs.AuditLog](t, s)
}

// verifyAll reads the whole log of a and checks its chain, failing the test when broken.
func verifyAll(t *testing.T, a runs.AuditLog) []runs.AuditRecord {
	t.Helper()
	ctx := ctxFor(t)
	anchor, head, err := a.AuditEnds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := a.AuditRecords(ctx, anchor.Seq, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.VerifyAudit(anchor, head, recs); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return recs
}

// testAuditChain: records are numbered from 1, keep every field, link to the one before,
// survive a restart, and page by Seq.
func testAuditChain(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	a := auditLog(t, open(t))
	in := []runs.AuditRecord{
		{Subject: "api:ci-prod", Action: runs.AuditTrigger, Target: "prod", Outcome: runs.AuditOK, Detail: map[string]string{"run": "r1", "build": "42"}},
		{Subject: "api:ops", Action: runs.AuditCancel, Target: "r1", Reason: "wrong build", Outcome: runs.AuditOK},
		{Subject: "api:ops", Action: runs.AuditForceRelease, Target: "coolify:phase1", Reason: "crashed", Outcome: "refused: fence moved"},
	}
	var prev string
	for i, rec := range in {
		got, err := a.AppendAudit(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != int64(i+1) || got.Prev != prev || got.Hash == "" || got.At.IsZero() || got.Hash != runs.AuditHash(got) {
			t.Errorf("record %d as appended: %+v (prev hash %q)", i+1, got, prev)
		}
		prev = got.Hash
	}
	recs := verifyAll(t, auditLog(t, open(t))) // another store on the same data
	if len(recs) != 3 || recs[0].Detail["build"] != "42" || recs[1].Reason != "wrong build" || recs[2].Outcome != "refused: fence moved" ||
		recs[2].Subject != "api:ops" || recs[2].Target != "coolify:phase1" || recs[2].Hash != prev {
		t.Errorf("records: got %+v", recs)
	}
	page, err := a.AuditRecords(ctx, 1, 1)
	if err != nil || len(page) != 1 || page[0].Seq != 2 {
		t.Errorf("records after 1, limit 1: got %+v, %v; want record 2", page, err)
	}
	anchor, head, err := a.AuditEnds(ctx)
	if err != nil || anchor != (runs.AuditLink{}) || head != (runs.AuditLink{Seq: 3, Hash: prev}) {
		t.Errorf("ends: anchor %+v head %+v, %v; want no anchor, head 3", anchor, head, err)
	}
}

// testAuditInvalid: a record without subject, action, target or outcome is refused with
// ErrInvalid and not stored.
func testAuditInvalid(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	a := auditLog(t, open(t))
	for _, rec := range []runs.AuditRecord{
		{Action: "trigger", Target: "prod", Outcome: "ok"},
		{Subject: "api:x", Target: "prod", Outcome: "ok"},
		{Subject: "api:x", Action: "trigger", Outcome: "ok"},
		{Subject: "api:x", Action: "trigger", Target: "prod"},
	} {
		if _, err := a.AppendAudit(ctx, rec); !errors.Is(err, runs.ErrInvalid) {
			t.Errorf("append %+v: got %v, want ErrInvalid", rec, err)
		}
	}
	if recs := verifyAll(t, a); len(recs) != 0 {
		t.Errorf("invalid records were stored: %+v", recs)
	}
}

// testAuditConcurrent: appends from two stores on one backend at once form one chain
// without gaps.
func testAuditConcurrent(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	stores := []runs.AuditLog{auditLog(t, open(t)), auditLog(t, open(t))}
	const each = 25
	var wg sync.WaitGroup
	for i, a := range stores {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range each {
					if _, err := a.AppendAudit(ctx, runs.AuditRecord{Subject: fmt.Sprintf("api:s%d-%d", i, w), Action: "trigger",
						Target: fmt.Sprint(n), Outcome: "ok"}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if recs := verifyAll(t, stores[0]); len(recs) != 4*each {
		t.Errorf("records: got %d, want %d", len(recs), 4*each)
	}
}

// testAuditPrune: Prune deletes the records older than the retention's MaxAge and keeps the
// last deleted one's link as the anchor, so the rest still verifies; appends go on from it.
func testAuditPrune(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	s := open(t)
	a := auditLog(t, s)
	old := time.Now().Add(-48 * time.Hour)
	var recs []runs.AuditRecord
	for i := range 5 {
		at := old.Add(time.Duration(i) * time.Minute)
		if i >= 3 {
			at = time.Time{} // now
		}
		r, err := a.AppendAudit(ctx, runs.AuditRecord{At: at, Subject: "api:ops", Action: "freeze", Target: fmt.Sprint(i), Outcome: "ok"})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if _, err := implements[runs.Pruner](t, s).Prune(ctx, runs.Retention{MaxAge: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	kept := verifyAll(t, a)
	if len(kept) != 2 || kept[0].Seq != 4 {
		t.Fatalf("after pruning: kept %+v, want records 4 and 5", kept)
	}
	anchor, _, err := a.AuditEnds(ctx)
	if err != nil || anchor != (runs.AuditLink{Seq: 3, Hash: recs[2].Hash}) {
		t.Errorf("anchor: got %+v, %v; want record 3's link", anchor, err)
	}
	// Pruning again changes nothing; appends go on from the head.
	if _, err := implements[runs.Pruner](t, s).Prune(ctx, runs.Retention{MaxAge: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if r, err := a.AppendAudit(ctx, runs.AuditRecord{Subject: "api:ops", Action: "unfreeze", Target: "x", Outcome: "ok"}); err != nil || r.Seq != 6 {
		t.Fatalf("append after pruning: %+v, %v", r, err)
	}
	if kept := verifyAll(t, a); len(kept) != 3 {
		t.Errorf("after pruning twice and appending: %d records, want 3", len(kept))
	}
}
