package phases

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Errors of Phase 2.
var (
	// ErrFenceNewer: the service carries a mark with a fence newer than the lease this run
	// holds, so someone acted on it after this lease was granted; the run refuses to act.
	ErrFenceNewer = errors.New("service carries a newer fence than this run's lease")
	// ErrUnhealthy: the health check did not pass before its timeout.
	ErrUnhealthy = errors.New("health check failed")
)

// maxDeployTries bounds how often a deploy dropped by Coolify's dedup is retried after
// waiting for the deployment that caused it.
const maxDeployTries = 3

// deployService is Phase 2 for one service: under coolify:<uuid>, check that the service
// still carries this run's sync, deploy, wait, health-check.
func (x *execution) deployService(pctx context.Context, st *svcState) error {
	s := st.svc
	start := time.Now()
	wctx, stopWait := x.untilStop(pctx)
	// The grant is stored while the mark and the service are read (deployLocked waits for it
	// before anything else).
	sl := serviceLock(runs.Phase2, s, start)
	lease, recorded, err := x.leases.acquireReading(wctx, sl)
	stopWait()
	if err != nil {
		st.failed = true
		x.rec.fail(runs.Phase2, s.Name, err)
		return err
	}
	sctx, cancel := lease.Context(pctx)
	sctx = coolify.WithTrace(sctx, x.run.ID, lease.Fence())

	status, err := x.deployLocked(sctx, st, lease, recorded)
	recorded()
	err = leaseErr(lease, sctx, err)
	cancel()
	if rerr := x.leases.release(lease, sl); err == nil && errors.Is(rerr, locks.ErrLost) {
		err = rerr
	}
	if err != nil {
		st.failed = true
		x.rec.fail(runs.Phase2, s.Name, err)
		x.stepDone(runs.Phase2, runs.StepFailed, start)
		return fmt.Errorf("deploy %s: %w", s.Name, err)
	}
	x.stepDone(runs.Phase2, status, start)
	return nil
}

// deployLocked does the work of deployService while the service lock is held. Its first
// calls are reads; it calls recorded (which waits for the lock's grant to be stored) once
// they are done.
func (x *execution) deployLocked(ctx context.Context, st *svcState, lease *locks.Lease, recorded func()) (runs.StepStatus, error) {
	s := st.svc
	by, err := x.supersededBy(ctx, st, lease.Fence())
	recorded()
	if err != nil {
		return "", err
	} else if by != "" {
		st.superseded = true
		x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) {
			step.Status, step.EndedAt = runs.StepSuperseded, time.Now().UTC()
		}, runs.Event{Type: runs.EventServiceSuperseded, Phase: runs.Phase2, Service: s.Name, LockKey: lease.Key(), Fence: lease.Fence(),
			Message: "not deployed: " + by})
		return runs.StepSuperseded, nil
	}

	depUUID, seen, err := x.trigger(ctx, s, runs.Phase2)
	if err != nil {
		return "", err
	}
	if _, err := x.e.d.Marks.PutMark(ctx, x.mark(s.UUID, lease.Fence(), runs.Phase2)); err != nil {
		return "", fmt.Errorf("record deploy mark: %w", err)
	}
	x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) { step.DeploymentUUID, step.DeployRequestedAt = depUUID, time.Time{} },
		runs.Event{Type: runs.EventDeployStarted, Phase: runs.Phase2, Service: s.Name, LockKey: lease.Key(), Fence: lease.Fence(),
			Data: map[string]string{runs.DataDeployment: depUUID}})

	if err := x.waitDeployed(ctx, s, depUUID, seen); err != nil {
		if ctx.Err() != nil {
			x.cancelOrphan(ctx, s, depUUID)
			return "", err
		}
		// A deployment that failed or was canceled has ended; any other failure of the wait
		// (a stuck deployment whose cancel was refused, reads that kept failing) may leave
		// it building: it is canceled until Coolify shows it ended before anything more is
		// written to the application, by this run's rollback or the next run.
		if s.Kind != config.KindService && !errors.Is(err, coolify.ErrDeploymentFailed) && !errors.Is(err, coolify.ErrDeploymentCancelled) {
			if eerr := x.endOwnDeployment(ctx, s, depUUID); eerr != nil {
				return "", x.stillBuilding(st, lease, err, eerr)
			}
		}
		if errors.Is(err, coolify.ErrDeploymentFailed) && s.Kind != config.KindService {
			// Coolify's rolling update keeps the old container when the new one fails.
			prev := "its previous deployment"
			if st.snap != nil && st.snap.tagChanged {
				prev = "tag " + cmp.Or(st.snap.tag, "(none)")
			}
			err = fmt.Errorf("%w; Coolify keeps the old container: %s is still on %s, not down", err, s.Name, prev)
		}
		return "", err
	}
	deployed := withStep(runs.Phase2, s.Name, func(step *runs.Step) { step.Status = runs.StepDeployed })
	finished := runs.Event{Type: runs.EventDeployFinished, Phase: runs.Phase2, Service: s.Name, Fence: lease.Fence(),
		Data: map[string]string{runs.DataDeployment: depUUID}}
	if s.Health.CoolifyStatus == "" && s.Health.HTTP == nil {
		x.rec.later(deployed, finished) // no check to wait for: the outcome is written next
	} else {
		x.rec.update(deployed, finished) // shown while the check runs
	}

	if err := x.health(coolify.WithPurpose(ctx, coolify.PurposeHealth), s); err != nil {
		x.rec.event(runs.Event{Type: runs.EventHealthFailed, Phase: runs.Phase2, Service: s.Name, Message: err.Error()})
		return "", err
	}
	st.deployed = true
	x.recordRunning(ctx, s, depUUID, nil, false)
	x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) {
		step.Status, step.EndedAt = runs.StepHealthy, time.Now().UTC()
	}, runs.Event{Type: runs.EventHealthOK, Phase: runs.Phase2, Service: s.Name, Fence: lease.Fence()})
	return runs.StepHealthy, nil
}

// stillBuilding records that the run leaves the service with a deployment of its own that
// would not end (eerr, a *StillBuildingError, or ctx's error): the service's state is unknown
// (compensation leaves it alone), and the release of its lock that follows is made loud: an
// event, an error log, the metric; the run's failure, and so its notification, names the
// deployment. It returns the step's error: the wait's, then why nothing more was written.
func (x *execution) stillBuilding(st *svcState, lease *locks.Lease, waitErr, eerr error) error {
	var sb *StillBuildingError
	if !errors.As(eerr, &sb) {
		return fmt.Errorf("%w; whether its deployment ended is unknown: %w", waitErr, eerr)
	}
	st.stillBuilding = sb
	x.log.LogAttrs(context.Background(), slog.LevelError, "deployment left building; service lock released with it",
		slog.String(logService, st.svc.Name), slog.String(logkey.Deployment, sb.Deployment), slog.String(logLockKey, lease.Key()))
	x.rec.event(runs.Event{Type: runs.EventDeployStillRunning, Phase: runs.Phase2, Service: st.svc.Name,
		LockKey: lease.Key(), Fence: lease.Fence(), Message: sb.Error(), Data: map[string]string{runs.DataDeployment: sb.Deployment}})
	if o := x.e.d.Observer; o != nil {
		o.DeploymentStillBuilding(x.run.Pipeline)
	}
	return fmt.Errorf("%w; %w", waitErr, sb)
}

// cancelOrphan cancels this run's deployment when the wait for it stopped because the run's
// context ended (lease lost, run aborted): a deployment nobody holds the lock for must not
// race with the next holder's.
func (x *execution) cancelOrphan(ctx context.Context, s config.Service, depUUID string) {
	if ctx.Err() == nil || depUUID == "" {
		return
	}
	// Protective: sent while the daemon holds its liveness lease, without waiting for the
	// store, which may be what cost the lease (ownership.go).
	cctx, cancel := context.WithTimeout(protective(context.WithoutCancel(ctx)), finalWriteTimeout)
	defer cancel()
	err := x.cl.CancelDeployment(cctx, depUUID)
	msg := "deployment " + depUUID + " canceled: the run no longer holds the service lock"
	if err != nil && !errors.Is(err, coolify.ErrBadRequest) { // 400: it had ended already
		msg = "deployment " + depUUID + " could not be canceled after the service lock was lost: " + err.Error()
	}
	x.rec.event(runs.Event{Type: runs.EventDeployFinished, Phase: runs.Phase2, Service: s.Name, Message: msg,
		Data: map[string]string{runs.DataDeployment: depUUID}})
}

// supersededBy says whether the service no longer carries this run's sync ("" if it does,
// else who or what replaced it). A recorded fence newer than the lease's is an error.
func (x *execution) supersededBy(ctx context.Context, st *svcState, fence int64) (string, error) {
	s := st.svc
	m, err := x.e.d.Marks.GetMark(ctx, s.UUID)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		// The mark is gone (e.g. the store was wiped): the service's content decides below.
	case err != nil:
		return "", fmt.Errorf("read sync mark: %w", err)
	case m.Fence > fence:
		return "", fmt.Errorf("%w: fence %d recorded by run %s (%s) > own fence %d; refusing to act",
			ErrFenceNewer, m.Fence, m.RunID, m.Phase, fence)
	case m.RunID != x.run.ID:
		return fmt.Sprintf("run %s re-synced it at fence %d", m.RunID, m.Fence), nil
	}
	ok, err := x.carries(ctx, st)
	if err != nil {
		return "", err
	}
	if !ok {
		return "its env vars or image tag changed since this run synced it", nil
	}
	return "", nil
}

// carries reports whether the service still holds the tag and env values this run synced.
func (x *execution) carries(ctx context.Context, st *svcState) (bool, error) {
	s := st.svc
	// The tag and the env vars, read at once when both are to be checked.
	var app *coolify.Application
	var current []coolify.EnvVar
	readApp := func() (err error) { app, err = x.cl.GetApplication(ctx, s.UUID); return err }
	readEnvs := func() (err error) { current, err = x.cl.ListEnvs(ctx, refOf(s)); return err }
	checkTag, checkEnvs := s.Kind != config.KindService && s.ImageTag != "", len(s.Env) > 0
	appErr, envsErr := readAtOnce(readIf(checkTag, readApp), readIf(checkEnvs, readEnvs))
	if checkTag {
		if appErr != nil {
			return false, fmt.Errorf("check image tag: %w", appErr)
		}
		if app.ImageTag != s.ImageTag {
			return false, nil
		}
	}
	if !checkEnvs {
		return true, nil
	}
	desired, err := x.desiredEnvs(ctx, s)
	if err != nil {
		return false, err
	}
	if envsErr != nil {
		return false, fmt.Errorf("check env vars: %w", envsErr)
	}
	_, _, changes := envDiff(s.Kind, current, desired)
	for _, c := range changes {
		if !c.ValueUnknown || len(c.Flags) > 0 || c.Comment != nil { // a hidden value can't be compared
			return false, nil
		}
	}
	return true, nil
}

// trigger starts the deployment of a service and returns its deployment UUID ("" for
// Coolify services, which have none) and the deployment as the deploy's confirming read found
// it (nil if none). Coolify silently drops a deploy while the application has a queued or
// running deployment, so trigger first clears such deployments (clearDeployments: waits for
// them, or cancels one a dead daemon left), and retries a deploy that was dropped anyway.
func (x *execution) trigger(ctx context.Context, s config.Service, phase runs.Phase) (string, *coolify.Deployment, error) {
	if s.Kind == config.KindService {
		if _, err := x.cl.RestartService(ctx, s.UUID, true); err != nil {
			return "", nil, err
		}
		return "", nil, nil
	}
	return x.deploy(ctx, s, phase)
}

// deploy is trigger for an application.
//
// It stores the step's DeployRequestedAt before each request. When it fails after a request,
// the field is cleared again if nothing was queued; a request whose outcome is still unknown
// keeps it (a takeover looks for its deployment).
func (x *execution) deploy(ctx context.Context, s config.Service, phase runs.Phase) (_ string, _ *coolify.Deployment, err error) {
	requested, unknown := false, false
	defer func() {
		if err != nil && requested && !unknown {
			x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) { step.DeployRequestedAt = time.Time{} })
		}
	}()
	var last error
	for range maxDeployTries {
		if err := x.clearDeployments(ctx, s, phase, true); err != nil {
			return "", nil, err
		}
		// Stored before the request: a daemon that dies before the deployment is recorded
		// leaves its takeover a trace of it (the guard above left no other running).
		stamp := time.Now().UTC()
		x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) { step.DeployRequestedAt = stamp })
		requested = true
		res, err := x.cl.Deploy(ctx, s.UUID, false)
		if errors.Is(err, coolify.ErrDeployDeduplicated) {
			last = err
			continue
		}
		if errors.Is(err, outbound.ErrOutcomeUnknown) {
			// Sent, answer lost: read what it did before anything else, instead of deploying
			// again on a guess or giving up while its deployment may build unseen.
			d, found, rerr := x.requestedDeployment(ctx, s, stamp)
			switch {
			case rerr != nil:
				unknown = true
				return "", nil, fmt.Errorf("%w; reading its deployments to learn whether it was queued failed too: %w", err, rerr)
			case !found:
				// Nothing was queued: ask again (the loop's bound counts it).
				x.log.LogAttrs(ctx, slog.LevelInfo, "deploy answer lost and nothing queued; deploying again",
					slog.String(logService, s.Name))
				last = fmt.Errorf("%w; no deployment of it was queued", err)
				continue
			}
			x.log.LogAttrs(ctx, slog.LevelInfo, "deploy answer lost; found its deployment by reading",
				slog.String(logService, s.Name), slog.String(logkey.Deployment, d.UUID))
			x.noteStarted(d.UUID)
			return d.UUID, d, nil
		}
		if err != nil && (res == nil || res.DeploymentUUID == "") {
			return "", nil, err
		}
		if err != nil {
			// Queued as far as Coolify said, but its confirming read failed: it is this run's
			// deployment, followed like any other (the wait rides out transient failures).
			x.log.LogAttrs(ctx, slog.LevelWarn, "deployment queued but not confirmed; following it",
				slog.String(logService, s.Name), slog.String(logkey.Deployment, res.DeploymentUUID), slog.String(logError, err.Error()))
		}
		x.noteStarted(res.DeploymentUUID)
		return res.DeploymentUUID, res.Deployment, nil
	}
	return "", nil, fmt.Errorf("deploy not queued after %d tries: %w", maxDeployTries, last)
}

// Reads of a deploy request whose answer was lost: up to lostAnswerReads tries, the first
// right away, then after lostAnswerPause, doubled each time.
const (
	lostAnswerReads = 4
	lostAnswerPause = 250 * time.Millisecond
)

// requestedDeployment learns what a deploy request stamped requested, whose answer was
// lost, did: the deployment it queued (queued or running now: the newest, since the guard
// left none running before the request; or ended already: endedSince), and whether it found
// one. Failed reads are tried again a few times: a run must not give up while the
// deployment its request started builds unseen. A deployment it returns that has ended is
// returned as read.
func (x *execution) requestedDeployment(ctx context.Context, s config.Service, requested time.Time) (*coolify.Deployment, bool, error) {
	pause := lostAnswerPause
	var err error
	for try := range lostAnswerReads {
		if try > 0 {
			if err := ctxtime.Sleep(ctx, pause); err != nil {
				return nil, false, err
			}
			pause *= 2
		}
		var active []coolify.Deployment
		if active, err = x.cl.ActiveDeployments(ctx, s.UUID); err != nil {
			continue
		}
		if len(active) > 0 {
			d := active[len(active)-1]
			return &d, true, nil
		}
		var d coolify.Deployment
		var found bool
		if d, found, err = endedSince(ctx, x.cl, s.UUID, requested); err != nil {
			continue
		}
		if !found {
			return nil, false, nil
		}
		return &d, true, nil
	}
	return nil, false, err
}

// waitDeployed waits for the deployment to end (canceling it past the service's deploy
// timeout); for Coolify services, for the restart to show in the service's status and the
// service to run again. seen is the deployment as last read: when it had ended already, it is
// not read again.
func (x *execution) waitDeployed(ctx context.Context, s config.Service, depUUID string, seen *coolify.Deployment) error {
	if s.Kind != config.KindService {
		if seen != nil && seen.Status.Terminal() {
			return seen.Err()
		}
		d, err := x.cl.WaitDeployment(ctx, depUUID, s.DeployTimeout)
		if link := deploymentPage(x.p.Coolify.URL, d); link != "" {
			x.rec.step(runs.Phase2, s.Name, func(step *runs.Step) { step.DeploymentURL = link })
		}
		return err
	}
	// Right after the restart the status still reads as before it (see coolify.Service):
	// first see the restart's job, looking often as it may take only a few seconds, then the
	// service run again.
	ctx = coolify.WithPurpose(ctx, coolify.PurposePoll)
	deadline := time.Now().Add(s.DeployTimeout)
	status := func(want bool) func() (bool, string, error) {
		return func() (bool, string, error) {
			svc, err := x.cl.GetService(ctx, s.UUID)
			if err != nil {
				return false, "", err
			}
			return svc.Running() == want, "status " + svc.Status, nil
		}
	}
	if err := x.pollEvery(ctx, min(x.e.d.PollInterval, restartLook), s.DeployTimeout, status(false),
		"Coolify never showed the service restarting"); err != nil {
		return err
	}
	return x.poll(ctx, time.Until(deadline), status(true), "service did not run again")
}

// health runs the service's health check: the Coolify status, then the HTTP check.
func (x *execution) health(ctx context.Context, s config.Service) error {
	h := s.Health
	if h.CoolifyStatus != "" {
		timeout := cmp.Or(h.StatusTimeout, config.DefaultHealthTimeout)
		err := x.poll(ctx, timeout, func() (bool, string, error) {
			var status string
			if s.Kind == config.KindService {
				svc, err := x.cl.GetService(ctx, s.UUID)
				if err != nil {
					return false, "", err
				}
				status = svc.Status
			} else {
				app, err := x.cl.GetApplication(ctx, s.UUID)
				if err != nil {
					return false, "", err
				}
				status = app.Status
			}
			return h.StatusOK(status), "status " + status, nil
		}, fmt.Sprintf("coolify status never matched %q", h.CoolifyStatus))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnhealthy, s.Name, err)
		}
	}
	if c := h.HTTP; c != nil {
		want := c.ExpectStatus
		if want == 0 {
			want = http.StatusOK
		}
		timeout := c.Timeout
		if timeout <= 0 {
			timeout = config.DefaultHealthTimeout
		}
		err := x.poll(ctx, timeout, func() (bool, string, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
			if err != nil {
				return false, "", err
			}
			resp, err := x.e.d.HTTP.Do(req)
			if err != nil {
				return false, "unreachable", nil // keep trying until the timeout
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			seen := fmt.Sprintf("HTTP %d", resp.StatusCode)
			if resp.StatusCode/100 == 3 && resp.StatusCode != want && resp.Header.Get("Location") != "" {
				// The client follows redirects on the URL's own host only (Deps.HTTP).
				seen += ", a redirect not followed (only those to the URL's own scheme, host and port are)"
			}
			return resp.StatusCode == want, seen, nil
		}, fmt.Sprintf("GET %s never answered %d", c.URL, want))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnhealthy, s.Name, err)
		}
	}
	if c := h.Version; c != nil {
		if err := x.probeVersion(ctx, s, c); err != nil {
			return err
		}
	}
	return nil
}

// ErrWrongVersion: the service's version probe did not show the version the run deployed
// before its timeout: Coolify reported the deployment finished, but the old container (or
// another one) keeps serving.
var ErrWrongVersion = errors.New("the service does not serve the version deployed")

// maxVersionBody bounds what a version probe reads of a body.
const maxVersionBody = 64 << 10

// probeVersion polls the service's version probe until it shows c.Expect.
func (x *execution) probeVersion(ctx context.Context, s config.Service, c *config.VersionCheck) error {
	err := x.poll(ctx, c.Timeout, func() (bool, string, error) {
		got, err := x.readVersion(ctx, c)
		if err != nil {
			return false, err.Error(), nil // keep trying until the timeout
		}
		return got == c.Expect, fmt.Sprintf("%q", got), nil
	}, fmt.Sprintf("GET %s never showed version %q", c.URL, c.Expect))
	if err != nil {
		return fmt.Errorf("%w: %s: %w (Coolify reported the deployment finished; the old container may still serve)", ErrWrongVersion, s.Name, err)
	}
	return nil
}

// readVersion reads the version the probe shows: the header, the JSON field or the whole
// body (trimmed).
func (x *execution) readVersion(ctx context.Context, c *config.VersionCheck) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return "", err
	}
	resp, err := x.e.d.HTTP.Do(req)
	if err != nil {
		return "", errors.New("unreachable")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionBody))
	switch {
	case err != nil:
		return "", errors.New("body not read")
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	case c.Header != "":
		return resp.Header.Get(c.Header), nil
	case c.Field == "":
		return strings.TrimSpace(string(body)), nil
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", errors.New("the body is not JSON")
	}
	for _, seg := range strings.Split(c.Field, ".") {
		obj, ok := doc.(map[string]any)
		if !ok {
			return "", fmt.Errorf("no field %s in the body", c.Field)
		}
		if doc, ok = obj[seg]; !ok {
			return "", fmt.Errorf("no field %s in the body", c.Field)
		}
	}
	switch v := doc.(type) {
	case string:
		return v, nil
	case nil:
		return "", fmt.Errorf("field %s is null", c.Field)
	}
	b, _ := json.Marshal(doc)
	return string(b), nil
}

// poll calls check every PollInterval until it reports done, it fails, or timeout passes
// (then the error says what was last seen).
func (x *execution) poll(ctx context.Context, timeout time.Duration, check func() (bool, string, error), what string) error {
	return x.pollEvery(ctx, x.e.d.PollInterval, timeout, check, what)
}

// restartLook is how often at most a restarted service is polled until its restart shows.
const restartLook = 500 * time.Millisecond

// pollEvery is poll with its own interval.
func (x *execution) pollEvery(ctx context.Context, every, timeout time.Duration, check func() (bool, string, error), what string) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTimer(0)
	defer t.Stop()
	last := "nothing yet"
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		ok, seen, err := check()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		last = seen
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s within %s (last: %s)", what, timeout, last)
		}
		t.Reset(min(every, left))
	}
}

// deploymentPage is the link to d's page in Coolify's UI: the instance's scheme and host
// with the UI path Coolify gives (deployment_url), or "" without one. Only a path is taken
// from Coolify's answer, so the link never leaves the instance the pipeline names.
func deploymentPage(instance string, d *coolify.Deployment) string {
	if d == nil || !strings.HasPrefix(d.DeploymentURL, "/") || strings.HasPrefix(d.DeploymentURL, "//") {
		return ""
	}
	base, err := url.Parse(instance)
	if err != nil || base.Host == "" {
		return ""
	}
	ref, err := url.Parse(d.DeploymentURL)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: base.Scheme, Host: base.Host, Path: ref.Path}).String()
}
