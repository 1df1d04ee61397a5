package api_test

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Issue 36, item 2: every action taken through the API (trigger, cancel, freeze, a refused
// freeze, unfreeze, force release) is in the audit log with its subject, target, reason and
// outcome; the log lists newest first with filters, for the viewer and admin roles only, and
// its export verifies.
func TestActionsAreAudited(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	run := f.trigger("demo", map[string]any{"build": "7", "image_tag": "v7", "reason": "hotfix"})
	if rec := f.do("POST", "/v1/runs/"+run.ID+"/cancel", deployerToken, map[string]any{"by": "bob", "reason": "wrong build"}); rec.Code != 200 {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/v1/locks/coolify:phase2/freeze", opsToken, map[string]any{"message": "launch", "for": "1h"}); rec.Code != 200 {
		t.Fatalf("freeze: %d %s", rec.Code, rec.Body)
	}
	f.do("POST", "/v1/locks/coolify:phase2/freeze", opsToken, map[string]any{"message": "again", "for": "1h"}) // 409
	if rec := f.do("DELETE", "/v1/locks/coolify:phase2/freeze", opsToken, map[string]any{"reason": "launched"}); rec.Code != 204 {
		t.Fatalf("unfreeze: %d %s", rec.Code, rec.Body)
	}
	f.do("POST", "/v1/locks/coolify:phase1/release", opsToken, map[string]any{"fence": 9, "reason": "crashed"}) // nothing held

	rec := f.do("GET", "/v1/audit", viewerToken, nil)
	if rec.Code != 200 {
		t.Fatalf("GET /v1/audit: %d %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct{ Records []runs.AuditRecord }](t, rec).Records
	want := []struct{ subject, action, target, reason, outcome string }{
		{"api:ops", "force_release", "coolify:phase1", "crashed", "refused: "},
		{"api:ops", "unfreeze", "coolify:phase2", "launched", "ok"},
		{"api:ops", "freeze", "coolify:phase2", "again", "refused: "},
		{"api:ops", "freeze", "coolify:phase2", "launch", "ok"},
		{"api:ci-prod (bob)", "cancel", run.ID, "wrong build", "ok"},
		{"api:trigger", "trigger", "demo", "hotfix", "ok"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit records: got %d, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Subject != w.subject || g.Action != w.action || g.Target != w.target || g.Reason != w.reason ||
			!strings.HasPrefix(g.Outcome, w.outcome) || g.At.IsZero() || g.Seq != int64(len(want)-i) {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}
	if got[5].Detail["run"] != run.ID || got[5].Detail["build"] != "7" {
		t.Errorf("trigger record's detail: %v", got[5].Detail)
	}

	// Filters and pages.
	rec = f.do("GET", "/v1/audit?subject=api:ops&action=freeze&limit=1", opsToken, nil)
	page := decodeJSON[struct {
		Records []runs.AuditRecord
		Before  int64
	}](t, rec)
	if len(page.Records) != 1 || page.Records[0].Reason != "again" || page.Before != page.Records[0].Seq {
		t.Fatalf("filtered page: %s", rec.Body)
	}
	rec = f.do("GET", fmt.Sprintf("/v1/audit?subject=api:ops&action=freeze&limit=1&before=%d", page.Before), opsToken, nil)
	if page := decodeJSON[struct{ Records []runs.AuditRecord }](t, rec); len(page.Records) != 1 || page.Records[0].Reason != "launch" {
		t.Fatalf("second page: %s", rec.Body)
	}
	wantError(t, f.do("GET", "/v1/audit?since=yesterday", opsToken, nil), 400, "since")

	// Only the viewer and admin roles read it.
	for _, tok := range []string{deployerToken, approverToken} {
		e := wantError(t, f.do("GET", "/v1/audit", tok, nil), 403, "")
		if !strings.Contains(e.Error.Message, "needs the viewer or admin role") {
			t.Errorf("audit with a %s token: %s", tok, e.Error.Message)
		}
	}

	// The export is the whole chain, oldest first, and verifies.
	rec = f.do("GET", "/v1/audit/export", viewerToken, nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %d %s", rec.Code, rec.Header())
	}
	span, recs, err := runs.ReadAuditExport(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.VerifyAudit(span.Anchor, span.Head, recs); err != nil || len(recs) != len(want) || recs[0].Action != "trigger" {
		t.Errorf("export: %d records, verify %v", len(recs), err)
	}
	for _, secret := range []string{opsToken, viewerToken, deployerToken} {
		if bytes.Contains(rec.Body.Bytes(), []byte(secret)) {
			t.Errorf("the export holds a token")
		}
	}
}

// Issue 36, item 2: the dashboard's audit page lists the records newest first, filtered by
// subject, action and target, to the viewer and admin roles; a deployer's session is told
// which role the page needs.
func TestAuditPage(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	f.trigger("demo", map[string]any{"build": "7", "image_tag": "v7"})
	for _, m := range []string{"launch <b>", "weekend"} {
		if rec := f.do("POST", "/v1/locks/coolify:phase2/freeze", opsToken, map[string]any{"message": m, "for": "1h"}); rec.Code != 200 {
			t.Fatalf("freeze: %d %s", rec.Code, rec.Body)
		}
		f.do("DELETE", "/v1/locks/coolify:phase2/freeze", opsToken, map[string]any{"reason": "done"})
	}
	page := func(path string, tok string) (int, string) {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(f.login(tok))
		rec := f.serve(req)
		return rec.Code, rec.Body.String()
	}
	code, body := page("/audit?action=freeze", viewerToken)
	if code != 200 || strings.Count(body, `<tr data-seq=`) != 2 || !strings.Contains(body, "launch &lt;b&gt;") ||
		strings.Index(body, "weekend") > strings.Index(body, "launch") || strings.Contains(body, `data-label="Action">trigger<`) {
		t.Errorf("audit page filtered on freeze: %d\n%s", code, body)
	}
	if code, body := page("/audit", opsToken); code != 200 || strings.Count(body, `<tr data-seq=`) != 5 {
		t.Errorf("audit page for the admin: %d, %d records", code, strings.Count(body, `<tr data-seq=`))
	}
	if code, body := page("/audit?since=never", viewerToken); code != 400 || !strings.Contains(body, "since") {
		t.Errorf("audit page with a bad filter: %d\n%s", code, body)
	}
	if code, body := page("/audit", deployerToken); code != 403 || !strings.Contains(body, "needs the viewer or admin role") {
		t.Errorf("audit page for a deployer: %d\n%s", code, body)
	}
}
