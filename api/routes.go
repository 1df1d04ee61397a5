package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// routes is the map of the API: every route, its access rule, its body limit and its rate
// limit, in one place. Access names the roles a route admits (auth.go's admitted): read is
// any role (none when public_read), trigger is deployer or admin, approve is approver or
// admin, audit is viewer or admin, admin is admin only.
//
//	GET    /healthz                        public    process up
//	GET    /readyz                         public    run store and lock backend reachable
//	GET    /metrics                        read      Prometheus
//	GET    /                               read      dashboard: recent runs and current locks (login page without a token)
//	GET    /runs/{id}                      read      dashboard: one run, live (login page without a token)
//	GET    /services                       read      dashboard: what each service runs now, since when, by which run
//	GET    /delivery                       read      dashboard: delivery figures per pipeline (days=7|30|90)
//	GET    /locks/history                  read      dashboard: which run held which key when, who waited (period=1h|6h|24h|7d)
//	GET    /audit                          audit     dashboard: the audit log, filtered (subject, action, target), 100 a page
//	GET    /login                          public    dashboard: the login form
//	POST   /login                          public    dashboard: check a token, store it in the session cookie
//	POST   /logout                         public    dashboard: delete the session cookie
//	GET    /login/oidc                     public    dashboard: log in through the OpenID provider (when oidc is configured)
//	GET    /login/oidc/callback            public    dashboard: the provider's answer: verified, mapped to a role, a session
//	GET    /static/*                       public    embedded CSS and JS
//	POST   /v1/pipelines/{name}/runs       trigger   start a run (Idempotency-Key), rate limited per token
//	GET    /v1/pipelines/{name}/plan       trigger   dry run, rate limited per token (its own bucket); its Coolify calls yield to runs
//	GET    /v1/pipelines                   read      pipeline names
//	GET    /v1/runs                        read      list (pipeline, status, limit, cursor)
//	GET    /v1/runs/{id}                   read      one run
//	GET    /v1/runs/{id}/events            read      SSE: the log so far, then live (Last-Event-ID)
//	POST   /v1/runs/{id}/cancel            trigger   cancel a run
//	POST   /v1/runs/{id}/rerun             trigger   a new run with the run's parameters (reason optional)
//	POST   /v1/runs/{id}/rollback          trigger   roll back to a succeeded run's build (reason required)
//	GET    /v1/delivery                    read      delivery figures per pipeline over days=7|30|90 (also orchestrator_delivery_* metrics)
//	GET    /v1/services                    read      the services the pipelines deploy: who wrote each last, each pipeline's newest build
//	GET    /v1/locks                       read      current leases (never tokens)
//	GET    /v1/locks/audit                 audit     the lock actions of the audit log, in the former lock trail's shape
//	GET    /v1/locks/history               read      holds and waits per key over a period (period=1h|6h|24h|7d), from the runs' events
//	POST   /v1/runs/{id}/approve           approve   approve the run's plan (the digest seen, reason)
//	POST   /v1/runs/{id}/reject            approve   reject it (reason): the run ends failed
//	POST   /v1/runs/{id}/override          approve   let a run go ahead outside its deploy windows (reason; a second person when configured)
//	GET    /v1/audit                       audit     the audit log: every action, newest first (subject, action, target, since, before, limit)
//	GET    /v1/audit/export                audit     the audit log as JSON lines, oldest first, for `audit verify --file`
//	POST   /v1/locks/{key}/release         admin     forced release (fence or holder, reason)
//	POST   /v1/locks/{key}/freeze          admin     freeze (message, until or for)
//	DELETE /v1/locks/{key}/freeze          admin     lift a freeze
//	POST   /v1/webhooks/{github,gitlab,generic}  signature  CI webhooks, rate limited per provider
//
// Every route but /healthz and /readyz checks the Host header against allowed_hosts first;
// every unsafe request then passes the cross-origin check (session.go).
// Rate limits apply after the credential checked out, per credential; failed attempts take
// from a bucket of their own, per client address: on every route that takes a token (and
// the login form) a wrong token does, on the trigger and plan routes a missing one too.
func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.observe, s.checkHost, s.crossOrigin, s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.answerError(w, r, newHTTPError(http.StatusNotFound, "not_found", "no such route"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.answerError(w, r, newHTTPError(http.StatusMethodNotAllowed, "method_not_allowed", "method %s is not allowed here", r.Method))
	})

	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	r.Get("/metrics", s.require(accessRead, s.metrics.Handler().ServeHTTP))

	r.Get("/", s.requirePage(accessRead, s.handleDashboard()))
	r.Get("/runs/{id}", s.requirePage(accessRead, s.handleRunPage()))
	r.Get("/services", s.requirePage(accessRead, s.handleServicesPage()))
	r.Get("/locks/history", s.requirePage(accessRead, s.handleLockHistoryPage()))
	r.Get("/delivery", s.requirePage(accessRead, s.handleDeliveryPage()))
	r.Get("/audit", s.requirePage(accessAudit, s.handleAuditPage()))
	r.Get("/login", s.handleLoginPage())
	r.Post("/login", s.handleLogin())
	r.Post("/logout", s.handleLogout())
	if s.auth.oidc != nil {
		r.Get("/login/oidc", s.handleOIDCStart())
		r.Get("/login/oidc/callback", s.handleOIDCCallback())
	}
	r.Handle("/static/*", s.handleStatic())

	r.Route("/v1", func(r chi.Router) {
		r.Get("/pipelines", s.require(accessRead, s.handlePipelines()))
		r.Post("/pipelines/{name}/runs", s.requireLimited(accessTrigger, s.triggerRate,
			limitBody(maxAPIBody, s.handleTrigger())))
		r.Get("/pipelines/{name}/plan", s.requireLimited(accessTrigger, s.planRate, s.handlePlan()))

		r.Get("/runs", s.require(accessRead, s.handleListRuns()))
		r.Get("/runs/{id}", s.require(accessRead, s.handleGetRun()))
		r.Get("/runs/{id}/events", s.require(accessRead, s.handleEvents()))
		r.Post("/runs/{id}/cancel", s.require(accessTrigger, limitBody(maxAPIBody, s.handleCancel())))
		r.Post("/runs/{id}/rerun", s.requireLimited(accessTrigger, s.triggerRate, limitBody(maxAPIBody, s.handleRerun())))
		r.Post("/runs/{id}/rollback", s.requireLimited(accessTrigger, s.triggerRate, limitBody(maxAPIBody, s.handleRollbackTo())))
		r.Post("/runs/{id}/override", s.require(accessApprove, limitBody(maxAPIBody, s.handleOverride())))
		r.Post("/runs/{id}/approve", s.require(accessApprove, limitBody(maxAPIBody, s.handleDecide(true))))
		r.Post("/runs/{id}/reject", s.require(accessApprove, limitBody(maxAPIBody, s.handleDecide(false))))

		r.Get("/services", s.require(accessRead, s.handleListServices()))
		r.Get("/delivery", s.require(accessRead, s.handleDelivery()))

		r.Get("/locks", s.require(accessRead, s.handleListLocks()))
		r.Get("/locks/audit", s.require(accessAudit, s.handleAudit()))
		r.Get("/locks/history", s.require(accessRead, s.handleLockHistory()))
		r.Get("/audit", s.require(accessAudit, s.handleAuditLog()))
		r.Get("/audit/export", s.require(accessAudit, s.handleAuditExport()))
		r.Post("/locks/{key}/release", s.require(accessAdmin, limitBody(maxAPIBody, s.handleForceRelease())))
		r.Post("/locks/{key}/freeze", s.require(accessAdmin, limitBody(maxAPIBody, s.handleFreeze())))
		r.Delete("/locks/{key}/freeze", s.require(accessAdmin, limitBody(maxAPIBody, s.handleUnfreeze())))

		r.Post("/webhooks/{provider}", s.webhookBody(s.webhookBodyLimit(), s.handleWebhook()))
	})
	return r
}
