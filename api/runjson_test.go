package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The cached encodings answer exactly what encode answers, and a new version is encoded anew.
func TestRunJSONAnswersAsEncode(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 0, 0, 123456789, time.UTC)
	run := func(id string, version int64, status runs.Status) runs.Run {
		return runs.Run{ID: id, Pipeline: "prod", Status: status, CreatedAt: at, Version: version,
			Trigger: orchestrator.Trigger{Build: "1", ImageTag: "<v2>&", By: "api:ci"},
			Steps:   []runs.Step{{Phase: runs.Phase1, Name: "api", UUID: "u1", Status: runs.StepSynced, StartedAt: at, EndedAt: at.Add(time.Second)}}}
	}
	s := &server{runJSON: newRunJSON()}
	answer := func(fn func(w http.ResponseWriter)) string {
		rec := httptest.NewRecorder()
		fn(rec)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("got %d %q, want 200 JSON", rec.Code, rec.Header().Get("Content-Type"))
		}
		return rec.Body.String()
	}
	for _, page := range []runs.Page{
		{},
		{Runs: []runs.Run{run("r1", 3, runs.StatusPhase1), run("r2", 7, runs.StatusSucceeded)}, Next: "cursor-1"},
		{Runs: []runs.Run{run("r1", 4, runs.StatusSucceeded)}}, // r1 moved on: encoded anew
	} {
		want := answer(func(w http.ResponseWriter) {
			p := page
			if p.Runs == nil {
				p.Runs = []runs.Run{}
			}
			encode(w, http.StatusOK, p)
		})
		if got := answer(func(w http.ResponseWriter) { s.encodePage(w, http.StatusOK, page) }); got != want {
			t.Errorf("page answer:\n got %s\nwant %s", got, want)
		}
		for _, r := range page.Runs {
			want := answer(func(w http.ResponseWriter) { encode(w, http.StatusOK, r) })
			if got := answer(func(w http.ResponseWriter) { s.encodeRun(w, http.StatusOK, &r) }); got != want {
				t.Errorf("run answer:\n got %s\nwant %s", got, want)
			}
		}
	}
}
