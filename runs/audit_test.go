package runs_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// chain returns n sealed records after anchor.
func chain(anchor runs.AuditLink, n int) []runs.AuditRecord {
	var out []runs.AuditRecord
	prev := anchor
	for i := range n {
		r := runs.SealAudit(runs.AuditRecord{Subject: "api:ops", Action: "freeze", Target: "coolify:phase1",
			Reason: "launch", Outcome: "ok", Detail: map[string]string{"i": string(rune('a' + i))}}, prev, time.Unix(1800000000, int64(i)))
		out = append(out, r)
		prev = runs.AuditLink{Seq: r.Seq, Hash: r.Hash}
	}
	return out
}

func headOf(recs []runs.AuditRecord) runs.AuditLink {
	l := recs[len(recs)-1]
	return runs.AuditLink{Seq: l.Seq, Hash: l.Hash}
}

// Issue 36, item 2: VerifyAudit accepts an intact chain (from the start or from a pruning
// anchor) and names the first record that was changed, removed, inserted or reordered.
func TestVerifyAudit(t *testing.T) {
	recs := chain(runs.AuditLink{}, 5)
	if err := runs.VerifyAudit(runs.AuditLink{}, headOf(recs), recs); err != nil {
		t.Fatalf("intact chain: %v", err)
	}
	anchor := runs.AuditLink{Seq: recs[1].Seq, Hash: recs[1].Hash}
	if err := runs.VerifyAudit(anchor, headOf(recs), recs[2:]); err != nil {
		t.Fatalf("chain after a pruning anchor: %v", err)
	}
	if err := runs.VerifyAudit(runs.AuditLink{}, runs.AuditLink{}, nil); err != nil {
		t.Fatalf("empty log: %v", err)
	}
	for _, c := range []struct {
		what   string
		anchor runs.AuditLink
		head   runs.AuditLink
		recs   func() []runs.AuditRecord
		seq    int64
		says   string
	}{
		{"a reason changed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			r := slices.Clone(recs)
			r[2].Reason = "nothing to see"
			return r
		}, 3, "changed"},
		{"a detail changed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			r := slices.Clone(recs)
			r[1].Detail = map[string]string{"i": "z"}
			return r
		}, 2, "changed"},
		{"a record changed and rehashed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			r := slices.Clone(recs)
			r[2].Subject = "api:someone-else"
			r[2].Hash = runs.AuditHash(r[2])
			return r
		}, 4, "link"},
		{"a record removed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			return slices.Delete(slices.Clone(recs), 2, 3)
		}, 3, "missing"},
		{"the last record removed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			return slices.Clone(recs[:4])
		}, 5, "missing"},
		{"the first record removed", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			return slices.Clone(recs[1:])
		}, 1, "missing"},
		{"two records swapped", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			r := slices.Clone(recs)
			r[1], r[2] = r[2], r[1]
			return r
		}, 2, "missing"},
		{"records pruned without an anchor", runs.AuditLink{}, headOf(recs), func() []runs.AuditRecord {
			return slices.Clone(recs[2:])
		}, 1, "missing"},
		{"an anchor that is not the pruned record's", runs.AuditLink{Seq: 2, Hash: recs[0].Hash}, headOf(recs), func() []runs.AuditRecord {
			return slices.Clone(recs[2:])
		}, 3, "link"},
	} {
		err := runs.VerifyAudit(c.anchor, c.head, c.recs())
		var ae *runs.AuditError
		if !errors.As(err, &ae) || ae.Seq != c.seq || !strings.Contains(ae.Problem, c.says) {
			t.Errorf("%s: got %v, want an AuditError at %d saying %q", c.what, err, c.seq, c.says)
		}
	}
}

// Issue 36, item 2: pruning keeps AuditKeep records at most, and those not older than the
// age limit.
func TestAuditPruneUpTo(t *testing.T) {
	for _, c := range []struct{ head, old, want int64 }{
		{10, 0, 0},
		{10, 4, 4},
		{runs.AuditKeep + 7, 0, 7},
		{runs.AuditKeep + 7, 9, 9},
		{runs.AuditKeep + 7, 3, 7},
	} {
		if got := runs.AuditPruneUpTo(c.head, c.old); got != c.want {
			t.Errorf("AuditPruneUpTo(%d, %d): got %d, want %d", c.head, c.old, got, c.want)
		}
	}
}
