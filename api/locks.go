package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// locksResponse is GET /v1/locks: every live lease with holder, fence, times, message and
// waiters, and the runs waiting for it. locks.Info never encodes its token.
type locksResponse struct {
	Locks []lockView `json:"locks"`
}

// lockView is a lease with the runs waiting for its key.
type lockView struct {
	locks.Info
	// WaitingRuns are the runs whose record says they wait for the key, the longest waiting
	// first (Waiters counts every waiter the backend has, a CLI run's too).
	WaitingRuns []lockWaiter `json:"waiting_runs,omitempty"`
}

// lockWaiter is a run waiting for a key: which run, its pipeline and step, since when.
type lockWaiter struct {
	RunID    string    `json:"run_id"`
	Pipeline string    `json:"pipeline"`
	Step     string    `json:"step"`
	Since    time.Time `json:"since"`
}

// handleListLocks serves GET /v1/locks?prefix=.
func (s *server) handleListLocks() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		prefix := r.URL.Query().Get("prefix")
		if err := orchestrator.CheckText("prefix", prefix, 256); err != nil {
			s.writeError(w, r, err)
			return
		}
		infos, err := s.locks.List(r.Context(), prefix)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		views, err := s.lockViews(r.Context(), infos)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, locksResponse{Locks: views})
	}
}

// lockViews adds to each lease (tokens cleared) the runs waiting for its key, read from the
// unfinished runs' records; only when some lease has waiters.
func (s *server) lockViews(ctx context.Context, infos []locks.Info) ([]lockView, error) {
	views := make([]lockView, len(infos))
	waited := false
	for i, l := range redactLeases(infos) {
		views[i] = lockView{Info: l}
		waited = waited || l.Waiters > 0
	}
	if !waited {
		return views, nil
	}
	active, err := s.runs.Unfinished(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the waiting runs: %w", err)
	}
	byKey := map[string][]lockWaiter{}
	for _, r := range active {
		for _, w := range r.Waiting {
			byKey[w.LockKey] = append(byKey[w.LockKey], lockWaiter{RunID: r.ID, Pipeline: r.Pipeline, Step: w.Step, Since: w.Since})
		}
	}
	for i := range views {
		ws := byKey[views[i].Key]
		slices.SortFunc(ws, func(a, b lockWaiter) int { return a.Since.Compare(b.Since) })
		views[i].WaitingRuns = ws
	}
	return views, nil
}

// redactLeases clears tokens (belt and braces: Info's JSON form omits them already).
func redactLeases(in []locks.Info) []locks.Info {
	out := make([]locks.Info, len(in))
	for i, l := range in {
		l.Token = ""
		out[i] = l
	}
	return out
}

// handleAudit serves GET /v1/locks/audit?limit=: the actions on locks (runs.IsLockAction)
// of the audit log, newest first, in the shape of the lock backends' former audit trail
// (runs.LockAuditEntry) under "entries". GET /v1/audit is the whole log.
func (s *server) handleAudit() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit, err := validAuditLimit(r.URL.Query().Get("limit"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		page, err := s.findAudit(r.Context(), auditQuery{limit: limit, keep: runs.IsLockAction})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		entries := make([]runs.LockAuditEntry, len(page.Records))
		for i, rec := range page.Records {
			entries[i] = runs.LockAuditEntryOf(rec)
		}
		encode(w, http.StatusOK, map[string]any{"entries": entries})
	}
}

// handleForceRelease serves POST /v1/locks/{key}/release with {fence|holder, reason, by}:
// 200 with the evicted lease; 409 naming the current lease when what was seen is stale.
func (s *server) handleForceRelease() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, err := validLockKey(chi.URLParam(r, "key"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var b forceBody
		if err := decode(r, &b, false); err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := validForce(b); err != nil {
			s.writeError(w, r, err)
			return
		}
		by := operator(r, b.By)
		evicted, err := s.locks.ForceRelease(r.Context(), locks.ForceRequest{
			Key: key, Fence: b.Fence, Holder: b.Holder, Reason: b.Reason, By: by,
		})
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: runs.AuditForceRelease, Target: key, Reason: b.Reason,
			Detail: forceDetail(b, evicted)}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		evicted.Token = ""
		s.log.WarnContext(r.Context(), "lock force-released",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.LockKey, key), slog.Int64(logkey.Fence, evicted.Fence),
			slog.String(logkey.Holder, evicted.Holder), slog.String(logkey.By, by), slog.String(logkey.Reason, b.Reason))
		encode(w, http.StatusOK, map[string]any{"released": evicted})
	}
}

// handleFreeze serves POST /v1/locks/{key}/freeze with {message, until|for, by}: 200 with
// the operator lease; 409 when the key is held.
func (s *server) handleFreeze() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, err := validLockKey(chi.URLParam(r, "key"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var b freezeBody
		if err := decode(r, &b, false); err != nil {
			s.writeError(w, r, err)
			return
		}
		until, err := validFreeze(b, s.now())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		by := operator(r, b.By)
		info, err := s.locks.Freeze(r.Context(), locks.FreezeRequest{Key: key, Message: b.Message, By: by, Until: until})
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: runs.AuditFreeze, Target: key, Reason: b.Message,
			Detail: freezeDetail(until, info)}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		info.Token = ""
		s.log.WarnContext(r.Context(), "lock frozen",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.LockKey, key), slog.String(logkey.By, by), slog.Time(logkey.Until, until))
		s.notifyFreeze(config.NotifyFreeze, notify.Lock{Key: key, Holder: by, Message: b.Message, Until: until})
		encode(w, http.StatusOK, map[string]any{"frozen": info})
	}
}

// handleUnfreeze serves DELETE /v1/locks/{key}/freeze with an optional {reason, by}: 204;
// 404 when the key is not frozen.
func (s *server) handleUnfreeze() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, err := validLockKey(chi.URLParam(r, "key"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var b unfreezeBody
		if err := decode(r, &b, true); err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := validUnfreeze(b); err != nil {
			s.writeError(w, r, err)
			return
		}
		by := operator(r, b.By)
		lifted, err := s.locks.Unfreeze(r.Context(), key)
		s.audited(r.Context(), runs.AuditRecord{Subject: by, Action: runs.AuditUnfreeze, Target: key, Reason: b.Reason,
			Detail: evictedDetail(nil, lifted)}, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.WarnContext(r.Context(), "lock unfrozen",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.LockKey, key), slog.String(logkey.By, by))
		s.notifyFreeze(config.NotifyUnfreeze, notify.Lock{Key: key, Holder: by, Message: b.Reason})
		w.WriteHeader(http.StatusNoContent)
	}
}

// forceDetail is what the audit log keeps of a forced release: the fence or holder the
// operator saw, and the lease evicted.
func forceDetail(b forceBody, evicted locks.Info) map[string]string {
	d := map[string]string{}
	if b.Fence != 0 {
		d["fence"] = strconv.FormatInt(b.Fence, 10)
	}
	if b.Holder != "" {
		d["holder"] = b.Holder
	}
	return evictedDetail(d, evicted)
}

// evictedDetail adds to d (nil: a new map) the holder and fence of the lease a forced
// release evicted or an unfreeze lifted, when there is one; never its token.
func evictedDetail(d map[string]string, evicted locks.Info) map[string]string {
	if d == nil {
		d = map[string]string{}
	}
	if evicted.Holder != "" {
		d["evicted_holder"] = evicted.Holder
		d["evicted_fence"] = strconv.FormatInt(evicted.Fence, 10)
	}
	return d
}

// freezeDetail is what the audit log keeps of a freeze: its end, and the fence it got.
func freezeDetail(until time.Time, frozen locks.Info) map[string]string {
	d := map[string]string{"until": until.UTC().Format(time.RFC3339)}
	if frozen.Fence != 0 {
		d["fence"] = strconv.FormatInt(frozen.Fence, 10)
	}
	return d
}

// Notifier is told about freezes (*notify.Notifier). Notify must return at once.
type Notifier interface {
	Notify(cfg *config.Notify, ev notify.Event)
}

// notifyFreeze announces a freeze placed or lifted, to the daemon's default targets.
func (s *server) notifyFreeze(kind config.NotifyEvent, l notify.Lock) {
	if s.notifier != nil {
		s.notifier.Notify(nil, notify.Event{Kind: kind, Lock: &l, At: s.now()})
	}
}

// operator is who an admin action is recorded as: the token's role, and the name the
// operator gave, if any ("api:admin (alice)").
func operator(r *http.Request, name string) string {
	if name == "" {
		return actor(r)
	}
	return actor(r) + " (" + name + ")"
}
