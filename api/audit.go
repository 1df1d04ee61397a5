package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The audit log of the actions taken through the API: each handler that changes state
// (trigger, rollback, cancel, freeze, unfreeze, force release, and a webhook's trigger)
// records who did it, to what, why and how it ended (runs.AuditLog, hash-chained in the run
// store). A failed append is logged at error level, never the answer: the action has
// happened. The record is written after the action, once its outcome and (for a forced
// release) the evicted lease are known: a record written first would claim actions that
// were refused; the price is that a daemon dying between the two leaves the action
// unrecorded (docs/operations.md, "The audit log"). The lock backends keep no trail of
// their own: this is the only record of a forced release, freeze or lift.

// audited records an action in the audit log once its outcome (err) is known.
func (s *server) audited(ctx context.Context, rec runs.AuditRecord, err error) {
	rec.Outcome = auditOutcome(err)
	rec.At = s.now()
	// The request may end (the client hang up) once the action is done: the record is still
	// written.
	if _, aerr := s.audit.AppendAudit(context.WithoutCancel(ctx), rec); aerr != nil {
		s.log.ErrorContext(ctx, "audit record not written",
			slog.String(logkey.RequestID, requestID(ctx)), slog.String(logkey.By, rec.Subject),
			slog.String(logkey.Action, rec.Action), slog.Any(logkey.Error, aerr))
	}
}

// auditOutcome is runs.AuditOK, or "refused: <message>" for an answer in the 4xx range and
// "failed: <message>" for the others: the message the client was given, which holds no
// secret.
func auditOutcome(err error) string {
	if err == nil {
		return runs.AuditOK
	}
	status, detail, _ := toHTTP(err)
	if status < 500 {
		return runs.AuditRefused + ": " + detail.Message
	}
	return runs.AuditFailed + ": " + detail.Message
}

// triggerAction is the audit action of a trigger: rollback or trigger.
func triggerAction(t orchestrator.Trigger) string {
	if t.Rollback {
		return runs.AuditRollback
	}
	return runs.AuditTrigger
}

// triggerDetail is what the audit log keeps of a trigger and the run it made.
func triggerDetail(t orchestrator.Trigger, run *runs.Run, existing bool) map[string]string {
	d := map[string]string{}
	for k, v := range map[string]string{"build": t.Build, "image_tag": t.ImageTag, "commit": t.Commit} {
		if v != "" {
			d[k] = v
		}
	}
	if run != nil {
		d["run"] = run.ID
		if existing {
			d["existing"] = "true"
		}
	}
	return d
}

// maxAuditPage caps GET /v1/audit's limit.
const maxAuditPage = 1000

// auditQuery is a validated GET /v1/audit query.
type auditQuery struct {
	filter runs.AuditFilter
	limit  int
	before int64 // only records with Seq < before (0: from the newest)
	// keep, when set, selects too (GET /v1/locks/audit: runs.IsLockAction).
	keep func(runs.AuditRecord) bool
}

// validAuditQuery reads subject, action, target, since (RFC 3339), before (a seq) and limit.
func validAuditQuery(q url.Values) (auditQuery, error) {
	var a auditQuery
	a.filter = runs.AuditFilter{Subject: q.Get("subject"), Action: q.Get("action"), Target: q.Get("target")}
	for _, f := range []struct{ name, v string }{{"subject", a.filter.Subject}, {"action", a.filter.Action}, {"target", a.filter.Target}} {
		if err := orchestrator.CheckText(f.name, f.v, 256); err != nil {
			return a, err
		}
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return a, fieldErr("since", "a time in RFC 3339 (2026-12-06T08:00:00Z)")
		}
		a.filter.Since = t
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return a, fieldErr("before", "a record number from 1")
		}
		a.before = n
	}
	a.limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditPage {
			return a, fieldErr("limit", "a number from 1 to 1000")
		}
		a.limit = n
	}
	return a, nil
}

// findAudit returns the records q selects, newest first (runs.NewestAudit).
func (s *server) findAudit(ctx context.Context, q auditQuery) (runs.AuditPage, error) {
	return runs.NewestAudit(ctx, s.audit, q.before, func(r runs.AuditRecord) bool {
		return q.filter.Match(r) && (q.keep == nil || q.keep(r))
	}, q.limit)
}

// handleAuditLog serves GET /v1/audit?subject=&action=&target=&since=&before=&limit=.
func (s *server) handleAuditLog() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := validAuditQuery(r.URL.Query())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		page, err := s.findAudit(r.Context(), q)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, page)
	}
}

// handleAuditExport serves GET /v1/audit/export: runs.ExportAudit's JSON lines (the anchor
// and head, then every record kept, oldest first), which `orchestrator audit verify --file`
// checks.
func (s *server) handleAuditExport() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := s.audit.AuditEnds(r.Context()); err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", `attachment; filename="orchestrator-audit.jsonl"`)
		if _, err := runs.ExportAudit(r.Context(), w, s.audit); err != nil {
			// The status is sent: the client gets a short export, which verify refuses.
			s.log.WarnContext(r.Context(), "audit export cut short",
				slog.String(logkey.RequestID, requestID(r.Context())), slog.Any(logkey.Error, err))
		}
	}
}

// auditActions are the actions the audit page's filter offers.
var auditActions = []string{runs.AuditTrigger, runs.AuditRollback, runs.AuditCancel, runs.AuditFreeze,
	runs.AuditUnfreeze, runs.AuditForceRelease, runs.AuditOverride, runs.AuditApprove, runs.AuditReject, runs.AuditCancelDeployment, runs.AuditTakeover,
	runs.AuditConfig}

type auditData struct {
	Title   string
	Session session
	Filter  runs.AuditFilter
	Actions []string
	Records []runs.AuditRecord
	Problem string
	Next    string // the next page's URL ("" on the last)
}

// handleAuditPage serves GET /audit?subject=&action=&target=&before=: the audit log, newest
// first, filtered, 100 records a page.
func (s *server) handleAuditPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d := auditData{Title: "Audit log", Session: sessionOf(r), Actions: auditActions}
		q, err := validAuditQuery(r.URL.Query())
		if err != nil {
			_, detail, _ := toHTTP(err)
			d.Problem = sentence(detail.Message)
			s.render(w, r, http.StatusBadRequest, s.pages.audit, d)
			return
		}
		d.Filter = q.filter
		page, err := s.findAudit(r.Context(), q)
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		d.Records = page.Records
		if page.Before > 0 {
			next := url.Values{"before": {strconv.FormatInt(page.Before, 10)}}
			for k, v := range map[string]string{"subject": q.filter.Subject, "action": q.filter.Action, "target": q.filter.Target} {
				if v != "" {
					next.Set(k, v)
				}
			}
			d.Next = "/audit?" + next.Encode()
		}
		s.render(w, r, http.StatusOK, s.pages.audit, d)
	}
}
