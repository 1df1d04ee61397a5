package api

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// runResponse is the answer of the trigger and cancel routes.
type runResponse struct {
	Run *runs.Run `json:"run"`
	// Existing is true when an Idempotency-Key matched a run created before.
	Existing bool `json:"existing,omitempty"`
}

// handleTrigger serves POST /v1/pipelines/{name}/runs: 202 with the run and its Location;
// the same Idempotency-Key with the same body answers the same run (existing=true), with
// another body 422 naming the key. The key is stored as "api:<key>", apart from the
// "webhook:" keys of deliveries, so a trigger token cannot take a future delivery's key.
func (s *server) handleTrigger() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := s.pipelineParam(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if err := validIdempotencyKey(key); err != nil {
			s.writeError(w, r, err)
			return
		}
		b, err := decodeTrigger(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		t := b.trigger()
		if t.Origin.Traceparent == "" {
			t.Origin.Traceparent = traceparent(r)
		}
		// A build past the pipeline's max_build_ahead is the admin's call, never CI's: the
		// trigger token asking for it is refused before anything is stored.
		if t.AllowBuildAhead && principalOf(r).role != roleAdmin {
			s.writeError(w, r, &httpError{status: http.StatusForbidden, code: "forbidden", field: "allow_build_ahead",
				message: "allow_build_ahead needs the admin role; token " + strconv.Quote(principalOf(r).name) + " has the " + principalOf(r).role.String() + " role and may not let a build past the pipeline's max_build_ahead"})
			return
		}
		if key != "" {
			t.IdempotencyKey = apiKeyNamespace + key
			t.IdempotencyHash = b.digest()
		}
		t.By = actor(r)
		run, existing, err := s.engine.Submit(r.Context(), name, t)
		var reused *runs.KeyReusedError
		if errors.As(err, &reused) {
			err = &httpError{status: http.StatusUnprocessableEntity, code: "idempotency_key_reused", field: "Idempotency-Key",
				message: fmt.Sprintf("Idempotency-Key %q was already used for run %s with a different body; send a new key for a new trigger",
					key, reused.RunID)}
		}
		s.audited(r.Context(), runs.AuditRecord{Subject: t.By, Action: triggerAction(t), Target: name, Reason: t.Reason,
			Detail: triggerDetail(t, run, existing)}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.InfoContext(r.Context(), "run submitted",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.RunID, run.ID), slog.String(logkey.Pipeline, name),
			slog.Bool(logkey.Existing, existing), slog.String(logkey.By, t.By))
		w.Header().Set("Location", "/v1/runs/"+run.ID)
		encode(w, http.StatusAccepted, runResponse{Run: run, Existing: existing})
	}
}

// apiKeyNamespace is put before a client's Idempotency-Key; webhook deliveries' keys start
// with "webhook:" instead.
const apiKeyNamespace = "api:"

// triggerBody is the body of POST /v1/pipelines/{name}/runs: what a client may say of a
// trigger. The fields the server sets (by, idempotency_key, idempotency_hash) are not in it,
// so a body naming them is refused as an unknown field. Marshalled, it is also the canonical
// JSON a trigger's digest is taken of: every field, none left out when empty, and fixed (not
// the trigger's own JSON) so that the digests stored with Idempotency-Keys stay valid.
type triggerBody struct {
	Build      buildText         `json:"build"`
	ImageTag   string            `json:"image_tag"`
	Commit     string            `json:"commit"`
	AppVersion string            `json:"app_version"`
	Params     map[string]string `json:"params"`
	Rollback   bool              `json:"rollback"`
	Reason     string            `json:"reason"`
	// AllowBuildAhead lets a build past the pipeline's max_build_ahead through; admin token
	// only. Left out of the digest's JSON when false, so the digests of bodies stored before
	// it existed stay valid.
	AllowBuildAhead bool `json:"allow_build_ahead,omitempty"`
	// What asked for the run (orchestrator.Origin), as the caller says: left out of the
	// digest's JSON when empty, like allow_build_ahead. The traceparent header, when the
	// body has none, is taken too.
	Repo        string `json:"repo,omitempty"`
	Ref         string `json:"ref,omitempty"`
	Tag         bool   `json:"tag,omitempty"`
	CommitURL   string `json:"commit_url,omitempty"`
	JobURL      string `json:"job_url,omitempty"`
	Actor       string `json:"actor,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
}

// digest is the SHA-256 of the body as canonical JSON (every field, in a fixed order), so
// two bodies that say the same in another order or spacing have one digest.
func (b triggerBody) digest() string {
	j, _ := json.Marshal(b) // a struct of strings, a bool and a map of strings: cannot fail
	sum := sha256.Sum256(j)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fields are the body's fields, for decodeFields.
func (b *triggerBody) fields() []bodyField {
	return []bodyField{buildField(&b.Build), stringField("image_tag", &b.ImageTag), stringField("commit", &b.Commit),
		stringField("app_version", &b.AppVersion), paramsField(&b.Params), boolField("rollback", &b.Rollback),
		stringField("reason", &b.Reason), boolField("allow_build_ahead", &b.AllowBuildAhead),
		stringField("repo", &b.Repo), stringField("ref", &b.Ref), boolField("tag", &b.Tag),
		stringField("commit_url", &b.CommitURL), stringField("job_url", &b.JobURL), stringField("actor", &b.Actor),
		stringField("traceparent", &b.Traceparent)}
}

// trigger is the trigger the body asks for.
func (b triggerBody) trigger() orchestrator.Trigger {
	return orchestrator.Trigger{Build: string(b.Build), ImageTag: b.ImageTag, Commit: b.Commit, AppVersion: b.AppVersion,
		Params: b.Params, Rollback: b.Rollback, Reason: b.Reason, AllowBuildAhead: b.AllowBuildAhead,
		Origin: orchestrator.Origin{Provider: originAPI, Repo: b.Repo, Ref: b.Ref, Tag: b.Tag, CommitURL: b.CommitURL,
			JobURL: b.JobURL, Actor: b.Actor, Traceparent: b.Traceparent}}
}

// originAPI is the provider of a run triggered through the API (the CLI's included).
const originAPI = "api"

// handlePlan serves GET /v1/pipelines/{name}/plan: the dry run for the trigger given in the
// query (build, image_tag, commit, app_version, param=KEY=VALUE). Its calls to Coolify take
// the lowest priority (see phases.Engine.Plan).
func (s *server) handlePlan() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := s.pipelineParam(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		t, err := validPlanQuery(r.URL.Query())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		t.By = actor(r)
		plan, err := s.engine.Plan(r.Context(), name, t)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, map[string]any{"pipeline": name, "plan": plan})
	}
}

// handlePipelines serves GET /v1/pipelines: the loaded pipelines' names, sorted.
func (s *server) handlePipelines() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		names := slices.Clone(s.engine.Pipelines())
		slices.Sort(names)
		encode(w, http.StatusOK, map[string]any{"pipelines": names})
	}
}

// handleListRuns serves GET /v1/runs?pipeline=&status=&limit=&cursor=: newest first, with
// "next" as the cursor of the following page.
func (s *server) handleListRuns() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, err := validListQuery(r.URL.Query())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		f.ReadOnly = true // only encoded
		page, err := s.runs.List(r.Context(), f)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.encodePage(w, http.StatusOK, page)
	}
}

// handleGetRun serves GET /v1/runs/{id}.
func (s *server) handleGetRun() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		run, err := s.runParam(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("ETag", etag(run))
		s.encodeRun(w, http.StatusOK, &run)
	}
}

// handleCancel serves POST /v1/runs/{id}/cancel: 200 with the run; 409 when it already ended.
func (s *server) handleCancel() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := validRunID(chi.URLParam(r, "id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		body, err := readAction(r, true, orchestrator.MaxTextLen)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		by := operator(r, body.By)
		run, err := s.engine.Cancel(r.Context(), id, by, body.Reason)
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: runs.AuditCancel, Target: id, Reason: body.Reason}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.InfoContext(r.Context(), "run cancel requested",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.RunID, id), slog.String(logkey.By, by))
		encode(w, http.StatusOK, runResponse{Run: run})
	}
}

// handleOverride serves POST /v1/runs/{id}/override with {reason, by}: the run may go ahead
// outside its deploy windows. 200 with the run and whether the override is granted (false:
// it waits for a second person's); 403 second_person_required when the person who asked
// first asks again.
func (s *server) handleOverride() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := validRunID(chi.URLParam(r, "id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		body, err := readAction(r, false, orchestrator.MaxTextLen)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		by := operator(r, body.By)
		run, granted, err := s.engine.OverrideWindow(r.Context(), id, by, body.Reason)
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: runs.AuditOverride, Target: id, Reason: body.Reason,
			Detail: map[string]string{"granted": strconv.FormatBool(granted)}}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, map[string]any{"run": run, "granted": granted})
	}
}

// handleDecide serves POST /v1/runs/{id}/approve with {digest, reason} (approve: the digest
// of the plan the approver saw, GET /v1/runs/{id}'s decision.digest) and
// /v1/runs/{id}/reject with {reason}: 200 with the run. The vote is the token's subject's
// (no "by": an approval is a person's, not a name they type).
func (s *server) handleDecide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := validRunID(chi.URLParam(r, "id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var body struct {
			Digest string `json:"digest"`
			Reason string `json:"reason"`
		}
		if err := decode(r, &body, !approve); err != nil {
			s.writeError(w, r, err)
			return
		}
		if approve && body.Digest == "" {
			s.writeError(w, r, fieldErr("digest", "is required: the digest of the plan you approve (the run's decision.digest)"))
			return
		}
		if err := cmp.Or(orchestrator.CheckText("digest", body.Digest, 128),
			orchestrator.CheckText("reason", body.Reason, orchestrator.MaxTextLen)); err != nil {
			s.writeError(w, r, err)
			return
		}
		by := actor(r)
		run, err := s.engine.Decide(r.Context(), id, orchestrator.DecisionVote{By: by, Approve: approve, Digest: body.Digest, Reason: body.Reason})
		action := runs.AuditReject
		if approve {
			action = runs.AuditApprove
		}
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: action, Target: id, Reason: body.Reason,
			Detail: map[string]string{"digest": body.Digest}}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, runResponse{Run: run})
	}
}

// pipelineParam is the path's {name}: a valid name of a loaded pipeline.
func (s *server) pipelineParam(r *http.Request) (string, error) {
	name, err := validPipelineName(chi.URLParam(r, "name"))
	if err != nil {
		return "", err
	}
	return name, s.knownPipeline(name)
}

// runParam reads the run the path's {id} names.
func (s *server) runParam(r *http.Request) (runs.Run, error) {
	id, err := validRunID(chi.URLParam(r, "id"))
	if err != nil {
		return runs.Run{}, err
	}
	return s.runs.Get(r.Context(), id)
}

// knownPipeline answers 404 before the engine is asked when no pipeline has that name.
func (s *server) knownPipeline(name string) error {
	if slices.Contains(s.engine.Pipelines(), name) {
		return nil
	}
	return orchestrator.UnknownPipeline(name, s.engine.Pipelines())
}

func etag(r runs.Run) string {
	return `"` + r.ID + "-" + strconv.FormatInt(r.Version, 10) + `"`
}
