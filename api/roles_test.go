package api_test

import (
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Named tokens of the roles test (issue 36, item 1).
const (
	viewerToken   = "viewer-token-SENTINEL-0007"
	deployerToken = "deployer-token-SENTINEL-0008"
	approverToken = "approver-token-SENTINEL-0009"
	opsToken      = "ops-admin-token-SENTINEL-0010"
)

// withNamedTokens adds a named token of each role to a fixture's config.
func withNamedTokens(c *config.Daemon) {
	c.Tokens.Named = []config.NamedToken{
		{Name: "dashboard", Role: config.RoleViewer, Token: viewerToken},
		{Name: "ci-prod", Role: config.RoleDeployer, Token: deployerToken},
		{Name: "alice", Role: config.RoleApprover, Token: approverToken},
		{Name: "ops", Role: config.RoleAdmin, Token: opsToken},
	}
}

// Issue 36, item 1: each role passes the routes it admits and no other; a refusal is a 403
// naming the role the route needs and the token's own; what a named token does is recorded
// under its name.
func TestRolesOfNamedTokens(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	trigger := func(tok string) (int, apiError) {
		rec := f.do("POST", "/v1/pipelines/demo/runs", tok, map[string]any{"build": "1", "image_tag": "v1"})
		if rec.Code == 202 {
			return 202, apiError{}
		}
		return rec.Code, wantError(t, rec, rec.Code, "")
	}
	approve := func(tok string) (int, apiError) {
		rec := f.do("POST", "/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/approve", tok, map[string]any{"digest": "plan-1"})
		if rec.Code != 403 {
			return rec.Code, apiError{}
		}
		return 403, wantError(t, rec, 403, "")
	}
	release := func(tok string) (int, apiError) {
		rec := f.do("POST", "/v1/locks/coolify:phase1/release", tok, map[string]any{"fence": 1, "reason": "test"})
		if rec.Code != 403 {
			return rec.Code, apiError{}
		}
		return 403, wantError(t, rec, 403, "")
	}
	for _, c := range []struct {
		what string
		do   func(string) (int, apiError)
		tok  string
		name string
		role string
		need string
	}{
		{"trigger", trigger, viewerToken, "dashboard", "viewer", "deployer or admin"},
		{"trigger", trigger, approverToken, "alice", "approver", "deployer or admin"},
		{"approve", approve, viewerToken, "dashboard", "viewer", "approver or admin"},
		{"approve", approve, deployerToken, "ci-prod", "deployer", "approver or admin"},
		{"release", release, viewerToken, "dashboard", "viewer", "admin"},
		{"release", release, deployerToken, "ci-prod", "deployer", "admin"},
		{"release", release, approverToken, "alice", "approver", "admin"},
	} {
		code, e := c.do(c.tok)
		want := "this route needs the " + c.need + ` role; token "` + c.name + `" has the ` + c.role + " role, which is not enough"
		if code != 403 || e.Error.Code != "forbidden" || e.Error.Message != want {
			t.Errorf("%s with the %s token: got %d %s %q, want 403 forbidden %q", c.what, c.role, code, e.Error.Code, e.Error.Message, want)
		}
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("refused triggers started %d runs", n)
	}

	// What each role may do, it does, under its token's name.
	rec := f.do("POST", "/v1/pipelines/demo/runs", deployerToken, map[string]any{"build": "2", "image_tag": "v2"})
	if rec.Code != 202 {
		t.Fatalf("trigger with the deployer token: got %d %s", rec.Code, rec.Body)
	}
	run := decodeJSON[struct{ Run runs.Run }](t, rec).Run
	if run.Trigger.By != "api:ci-prod" {
		t.Errorf("trigger by: got %q, want api:ci-prod", run.Trigger.By)
	}
	for _, tok := range []string{viewerToken, deployerToken, approverToken, opsToken} {
		if rec := f.do("GET", "/v1/runs/"+run.ID, tok, nil); rec.Code != 200 {
			t.Errorf("read with a named token: got %d", rec.Code)
		}
	}
	rec = f.do("POST", "/v1/runs/"+run.ID+"/cancel", opsToken, map[string]any{"reason": "wrong build"})
	if rec.Code != 200 {
		t.Fatalf("cancel with the admin token: got %d %s", rec.Code, rec.Body)
	}
	if got := decodeJSON[struct{ Run *runs.Run }](t, rec).Run; got.Reason != "canceled by api:ops: wrong build" {
		t.Errorf("cancel reason %q, want canceled by api:ops: wrong build", got.Reason)
	}
}

// Issue 36, items 1 and 3: overriding a run's deploy windows needs the approver or admin
// role (a deployer is refused naming them) and a reason; the person who asked first asking
// again is refused 403 second_person_required; each attempt is in the audit log.
func TestOverrideRoute(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	run := f.trigger("demo", map[string]any{"image_tag": "v1"})
	path := "/v1/runs/" + run.ID + "/override"
	e := wantError(t, f.do("POST", path, deployerToken, map[string]any{"reason": "hotfix"}), 403, "")
	if !strings.Contains(e.Error.Message, "needs the approver or admin role") {
		t.Errorf("override with a deployer token: %s", e.Error.Message)
	}
	rec := f.do("POST", path, approverToken, map[string]any{"reason": "hotfix"})
	if rec.Code != 200 || !decodeJSON[struct{ Granted bool }](t, rec).Granted {
		t.Fatalf("override by an approver: %d %s", rec.Code, rec.Body)
	}
	if e := wantError(t, f.do("POST", path, opsToken, map[string]any{"reason": "hotfix", "by": "again"}), 403, ""); e.Error.Code != "second_person_required" {
		t.Errorf("override by the person who asked first: %s %s", e.Error.Code, e.Error.Message)
	}
	recs := decodeJSON[struct{ Records []runs.AuditRecord }](t, f.do("GET", "/v1/audit?action=override", opsToken, nil)).Records
	if len(recs) != 2 || recs[0].Subject != "api:ops (again)" || !strings.HasPrefix(recs[0].Outcome, "refused: ") ||
		recs[1].Subject != "api:alice" || recs[1].Outcome != "ok" || recs[1].Detail["granted"] != "true" {
		t.Errorf("override audit records: %+v", recs)
	}
}

// Issue 36, item 4: approve and reject are the approver's (the token's subject votes, no
// "by"), need the plan's digest to approve, and are audited; an approval of another digest
// is 409 plan_changed.
func TestApproveRoute(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	run := f.trigger("demo", map[string]any{"image_tag": "v1"})
	path := "/v1/runs/" + run.ID
	wantError(t, f.do("POST", path+"/approve", approverToken, map[string]any{"reason": "ok"}), 400, "digest")
	wantError(t, f.do("POST", path+"/approve", approverToken, map[string]any{"digest": "plan-1", "by": "someone"}), 400, "by")
	if e := wantError(t, f.do("POST", path+"/approve", approverToken, map[string]any{"digest": "plan-0"}), 409, ""); e.Error.Code != "plan_changed" {
		t.Errorf("approval of another digest: %s", e.Error.Code)
	}
	rec := f.do("POST", path+"/approve", approverToken, map[string]any{"digest": "plan-1", "reason": "checked"})
	if rec.Code != 200 {
		t.Fatalf("approve: %d %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct{ Run runs.Run }](t, rec).Run
	if got.Decision == nil || len(got.Decision.Votes) != 1 || got.Decision.Votes[0].By != "api:alice" {
		t.Errorf("vote recorded: %+v", got.Decision)
	}
	if rec := f.do("POST", path+"/reject", opsToken, nil); rec.Code != 200 {
		t.Errorf("reject without a body: %d %s", rec.Code, rec.Body)
	}
	recs := decodeJSON[struct{ Records []runs.AuditRecord }](t, f.do("GET", "/v1/audit?target="+run.ID, opsToken, nil)).Records
	var actions []string
	for _, r := range recs {
		actions = append(actions, r.Action+" "+r.Subject+" "+strings.SplitN(r.Outcome, ":", 2)[0])
	}
	if strings.Join(actions, ", ") != "reject api:ops ok, approve api:alice ok, approve api:alice refused" {
		t.Errorf("audit of the decisions: %v", actions)
	}
}
