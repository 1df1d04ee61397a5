package api

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/http"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The actions on a run that start another: re-run it with the same parameters, and roll back
// to it (a deliberate rollback to a succeeded run's build, with a reason). Both submit a new
// trigger through the engine like POST /v1/pipelines/{name}/runs, and answer as it does.

// actionBody is the body of the rerun and rollback routes.
type actionBody struct {
	// By names the person behind the token; Reason says why (required for a rollback).
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// readAction decodes and checks the body of an action on a run ({by, reason}; an empty body
// when optional), reason at most reasonMax bytes.
func readAction(r *http.Request, optional bool, reasonMax int) (actionBody, error) {
	var b actionBody
	if err := decode(r, &b, optional); err != nil {
		return b, err
	}
	return b, cmp.Or(orchestrator.CheckText("by", b.By, orchestrator.MaxOriginText),
		orchestrator.CheckText("reason", b.Reason, reasonMax))
}

// handleRerun serves POST /v1/runs/{id}/rerun: a new run of the run's pipeline with its
// parameters (build, image tag, commit, app version, params; a rollback stays a rollback).
func (s *server) handleRerun() http.HandlerFunc {
	return s.runAction("re-run", func(run runs.Run, b actionBody) (orchestrator.Trigger, error) {
		t := sameParams(run)
		t.Rollback = run.Trigger.Rollback
		t.Reason = "re-run of run " + run.ID
		if b.Reason != "" {
			t.Reason += ": " + b.Reason
		}
		return t, nil
	})
}

// handleRollbackTo serves POST /v1/runs/{id}/rollback: a rollback to a succeeded run's
// build, recorded with the reason the body must give; 409 for a run that did not succeed.
func (s *server) handleRollbackTo() http.HandlerFunc {
	return s.runAction("rollback", func(run runs.Run, b actionBody) (orchestrator.Trigger, error) {
		if run.Status != runs.StatusSucceeded {
			return orchestrator.Trigger{}, newHTTPError(http.StatusConflict, "not_succeeded",
				"run %s %s: only a run that succeeded can be rolled back to", run.ID, run.Status)
		}
		if b.Reason == "" {
			return orchestrator.Trigger{}, orchestrator.Fieldf("reason", "is required: say why you roll back")
		}
		t := sameParams(run)
		t.Rollback = true
		t.Reason = fmt.Sprintf("roll back to run %s (build %s): %s", run.ID, run.Trigger.Build, b.Reason)
		return t, nil
	})
}

// sameParams is a trigger with run's parameters and origin (its repository, ref and links:
// the same commit), asked for through the API.
func sameParams(run runs.Run) orchestrator.Trigger {
	tr := run.Trigger
	o := tr.Origin
	return orchestrator.Trigger{Build: tr.Build, ImageTag: tr.ImageTag, Commit: tr.Commit, AppVersion: tr.AppVersion,
		Params: maps.Clone(tr.Params),
		Origin: orchestrator.Origin{Provider: originAPI, Repo: o.Repo, Ref: o.Ref, Tag: o.Tag, CommitURL: o.CommitURL, JobURL: o.JobURL}}
}

// runAction is the handler of an action that starts a run from the run the path names: the
// body checked, the trigger made by mk, submitted, 202 with the new run and its Location.
func (s *server) runAction(what string, mk func(runs.Run, actionBody) (orchestrator.Trigger, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		run, err := s.runParam(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		b, err := readAction(r, true, orchestrator.MaxTextLen/2)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		t, err := mk(run, b)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		t.By = operator(r, b.By)
		t.Origin.Actor = b.By
		t.Origin.Traceparent = traceparent(r)
		next, _, err := s.engine.Submit(r.Context(), run.Pipeline, t)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.InfoContext(r.Context(), "run submitted",
			slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.RunID, next.ID),
			slog.String(logkey.Pipeline, run.Pipeline), slog.String(logkey.By, t.By), slog.String(logkey.Reason, what+" of "+run.ID))
		w.Header().Set("Location", "/v1/runs/"+next.ID)
		encode(w, http.StatusAccepted, runResponse{Run: next})
	}
}
