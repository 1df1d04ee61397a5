package phases_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// awaitingDecision waits until run id is awaiting a decision whose digest is not old, and
// returns it.
func awaitingDecision(t *testing.T, h *harness, id, old string) runs.Decision {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		r, err := h.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == runs.StatusAwaiting && r.Decision != nil && r.Decision.Outcome == "" && r.Decision.Digest != old {
			return *r.Decision
		}
		if r.Status.Terminal() {
			t.Fatalf("run ended %s (%s) instead of awaiting a decision", r.Status, r.Reason)
		}
		h.waitEvent(id, runs.EventDecisionAsked, "")
		time.Sleep(10 * time.Millisecond) // the record follows its event
	}
	t.Fatalf("run %s never awaited a new decision", id)
	return runs.Decision{}
}

// Issue 36, item 4: a run of a pipeline that needs two approvals waits before Phase 1,
// awaiting and holding no lock, writing nothing; its trigger's subject may not approve it;
// an approval names the plan's digest and one of another digest is refused; when what the
// run would change differs once it is approved, it asks again and the old approval no longer
// counts; two approvals of the new plan let it deploy.
func TestApprovalOfTheExactPlan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api"}, "approvals: { required: 2, forbid_self_approval: true, expire_after: 1h }\n"))
		id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2", By: "api:ci-prod"})
		d := awaitingDecision(t, h, id, "")
		if d.Kind != runs.DecisionApproval || d.Needed != 2 || !strings.Contains(d.Summary, "api: image tag → v2") || len(d.Digest) != 64 {
			t.Errorf("decision asked: %+v", d)
		}
		held, err := h.locker.List(context.Background(), "coolify:")
		if err != nil || len(held) != 0 {
			t.Errorf("a run awaiting approval holds %+v (%v)", held, err)
		}
		if wrote(h) {
			t.Error("a run awaiting approval wrote to Coolify")
		}
		ctx := context.Background()
		vote := func(by, digest string) error {
			_, err := h.engine.Decide(ctx, id, orchestrator.DecisionVote{By: by, Approve: true, Digest: digest, Reason: "looks right"})
			return err
		}
		if err := vote("api:ci-prod (alice)", d.Digest); !errors.Is(err, orchestrator.ErrSecondPerson) || !strings.Contains(err.Error(), "triggered the run") {
			t.Errorf("self-approval: %v, want refused", err)
		}
		if err := vote("api:alice", "0123"+d.Digest[4:]); !errors.Is(err, orchestrator.ErrDecisionChanged) {
			t.Errorf("approval of another digest: %v, want ErrDecisionChanged", err)
		}
		if err := vote("api:alice", d.Digest); err != nil {
			t.Fatal(err)
		}
		if err := vote("api:alice", d.Digest); !errors.Is(err, orchestrator.ErrSecondPerson) {
			t.Errorf("the same approver twice: %v", err)
		}
		// What the run would change moves under it: LOG_LEVEL is already what it would write.
		h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "LOG_LEVEL", Value: coolifytest.Str("info"), IsRuntime: true, IsBuildtime: true})
		if err := vote("api:bob", d.Digest); err != nil {
			t.Fatal(err)
		}
		d2 := awaitingDecision(t, h, id, d.Digest)
		if d2.Approvals() != 0 {
			t.Errorf("the new decision counts %d approvals of the old plan", d2.Approvals())
		}
		if err := vote("api:carol", d.Digest); !errors.Is(err, orchestrator.ErrDecisionChanged) {
			t.Errorf("approval of the plan as it was: %v, want ErrDecisionChanged", err)
		}
		if wrote(h) {
			t.Error("the run wrote before its new plan was approved")
		}
		for _, by := range []string{"api:alice", "api:bob"} {
			if err := vote(by, d2.Digest); err != nil {
				t.Fatal(err)
			}
		}
		if r := h.wait(id); r.Status != runs.StatusSucceeded || r.Decision == nil || r.Decision.Outcome != runs.DecisionApproved {
			t.Fatalf("run after two approvals of the new plan: %s (%s), decision %+v", r.Status, r.Reason, r.Decision)
		}
	})
}

// Issue 36, item 4: a rejection ends the run failed, naming who and why; a run nobody
// decides on ends expired after expire_after; neither wrote anything.
func TestApprovalRejectedOrExpired(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "approvals: { required: 1 }\n"),
		h.pipelineYAML("quick", []string{"worker"}, "approvals: { required: 1, expire_after: 300ms }\n"))
	rejected := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	expired := h.submit("quick", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	awaitingDecision(t, h, rejected, "")
	if _, err := h.engine.Decide(context.Background(), rejected, orchestrator.DecisionVote{By: "api:alice", Reason: "not during the sale"}); err != nil {
		t.Fatal(err)
	}
	if r := h.wait(rejected); r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "rejected by api:alice: not during the sale") {
		t.Errorf("rejected run: %s (%s)", r.Status, r.Reason)
	}
	if r := h.wait(expired); r.Status != runs.StatusExpired || r.Decision.Outcome != runs.DecisionExpired {
		t.Errorf("undecided run: %s (%s), decision %+v", r.Status, r.Reason, r.Decision)
	}
	if _, err := h.engine.Decide(context.Background(), expired, orchestrator.DecisionVote{By: "api:alice", Approve: true, Digest: "x"}); !errors.Is(err, runs.ErrEnded) {
		t.Errorf("approval of an expired run: %v", err)
	}
	if wrote(h) {
		t.Error("a rejected or expired run wrote to Coolify")
	}
}

// Issue 36, item 4: a run that waits for approval announces itself through the notifiers,
// with what it waits for and the link to its page.
func TestAwaitingRunIsAnnounced(t *testing.T) {
	h := newHarness(t)
	rcv := notifytest.NewServer(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, withNotifier(t, h, rcv, time.Minute)+"approvals: { required: 1 }\n"))
	id := h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3"})
	awaitingDecision(t, h, id, "")
	m := received(t, rcv)
	for _, want := range []string{"prod: build 3 waits for approval", "1 approval(s) of plan", "api: image tag → v3",
		"https://deploy.example.com/runs/" + id} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("message %q lacks %q", m.Text, want)
		}
	}
}

// Issue 36, item 4: under concurrency: supersede, a run waiting for approval is pending like
// a queued one: a newer build supersedes it, and a vote for it is refused as ended.
func TestAwaitingRunIsSuperseded(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "concurrency: supersede\napprovals: { required: 1 }\n"))
	old := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	awaitingDecision(t, h, old, "")
	newer := h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3"})
	if r := h.wait(old); r.Status != runs.StatusSuperseded || !strings.Contains(r.Reason, newer) {
		t.Errorf("the awaiting run after a newer build: %s (%s)", r.Status, r.Reason)
	}
	if _, err := h.engine.Decide(context.Background(), old, orchestrator.DecisionVote{By: "api:alice", Approve: true, Digest: "x"}); !errors.Is(err, runs.ErrEnded) {
		t.Errorf("a vote for the superseded run: %v", err)
	}
	awaitingDecision(t, h, newer, "")
}
