package coolifytest

import "time"

// advanceLocked plays the deployment queue forward to the clock's now: deployments whose run
// time is over end, and queued deployments start as slots free up, each event at its own
// instant and in time order (finishes before starts at the same instant), so the outcome does
// not depend on how often anyone looks.
func (f *Fake) advanceLocked() {
	now := f.clock.Now()
	for {
		var next *deployment
		var at time.Time
		finish := false
		for _, d := range f.deployments {
			if d.Status != "in_progress" || d.outcome == Hang {
				continue
			}
			if end := d.StartedAt.Add(d.runFor); !end.After(now) && (next == nil || end.Before(at)) {
				next, at, finish = d, end, true
			}
		}
		for _, d := range f.deployments {
			if f.stalled || d.Status != "queued" || d.outcome == StuckQueued || !f.slotFreeLocked(d) {
				continue
			}
			start := d.readyAt
			if f.cursor.After(start) {
				start = f.cursor
			}
			if !start.After(now) && (next == nil || start.Before(at)) {
				next, at, finish = d, start, false
			}
		}
		if next == nil {
			return
		}
		if at.After(f.cursor) {
			f.cursor = at
		}
		if finish {
			f.finishLocked(next, at)
		} else {
			f.startLocked(next, at)
		}
	}
}

// slotFreeLocked: one in_progress per application (and PR), ConcurrentBuilds per server.
func (f *Fake) slotFreeLocked(d *deployment) bool {
	running := 0
	for _, o := range f.deployments {
		if o.Status != "in_progress" {
			continue
		}
		running++
		if o.AppUUID == d.AppUUID && o.pr == d.pr {
			return false
		}
	}
	return running < f.concurrentBuilds
}

// startLocked moves a deployment to in_progress; like Coolify's job, it reads the image tag
// and the env vars now, not when it was queued.
func (f *Fake) startLocked(d *deployment, at time.Time) {
	d.Status = "in_progress"
	d.StartedAt = at
	d.updatedAt = at
	a := f.apps[d.AppUUID]
	if a == nil {
		return
	}
	defer f.noteStatusLocked(a, at)
	cfg := f.configLocked(a)
	d.ImageTag, d.Env, d.ConfigBy = cfg.ImageTag, cfg.Env, f.hist.writer[a.UUID]
}

// finishLocked ends a deployment: failed when told to fail or when the health check is on and
// the app is unhealthy (Coolify keeps the old container), finished otherwise.
func (f *Fake) finishLocked(d *deployment, at time.Time) {
	d.FinishedAt = at
	d.updatedAt = at
	a := f.apps[d.AppUUID]
	if d.outcome == Fail || a == nil || (a.HealthCheckEnabled && a.unhealthy) {
		d.Status = "failed"
		if a != nil {
			f.noteStatusLocked(a, at)
		}
		return
	}
	d.Status = "finished"
	a.NotRunning = false
	a.DeployedImageTag = d.ImageTag
	a.DeployedEnv = d.Env
	f.noteStatusLocked(a, at)
}

// queueLocked queues a deployment of a, unless Coolify's dedup drops it: without force, an
// application with a queued or in_progress deployment of the same commit gets nothing new, and
// the caller is handed a fresh uuid that is never stored (skipped true).
func (f *Fake) queueLocked(a *app, force, restartOnly bool, runID, fence string) (uuid string, skipped bool) {
	commit := a.GitCommitSHA
	if commit == "" {
		commit = "HEAD"
	}
	if !force {
		for _, d := range f.deployments {
			if d.AppUUID == a.UUID && d.Commit == commit && d.pr == 0 && (d.Status == "queued" || d.Status == "in_progress") {
				return newUUID(), true
			}
		}
	}
	now := f.clock.Now()
	f.nextID++
	outcome := a.outcome
	if len(a.next) > 0 {
		outcome, a.next = a.next[0], a.next[1:]
	}
	d := &deployment{
		Deployment: Deployment{
			ID: f.nextID, UUID: newUUID(), AppUUID: a.UUID, AppName: a.Name, Status: "queued",
			Commit: commit, Force: force, RestartOnly: restartOnly, RunID: runID, Fence: fence,
			CreatedAt: now,
		},
		appID:     a.ID,
		readyAt:   now.Add(f.timing.Queued),
		runFor:    f.drawRunLocked(),
		outcome:   outcome,
		updatedAt: now,
		isAPI:     true,
	}
	f.deployments = append(f.deployments, d)
	return d.UUID, false
}

func (f *Fake) drawRunLocked() time.Duration {
	lo, hi := f.timing.RunMin, f.timing.RunMax
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)+1))
}

// queuedCountLocked is the number of queued rows on the server (the queue limit's measure).
func (f *Fake) queuedCountLocked() int {
	n := 0
	for _, d := range f.deployments {
		if d.Status == "queued" {
			n++
		}
	}
	return n
}

// cancelLocked cancels an active deployment; the queue moves on from now.
func (f *Fake) cancelLocked(d *deployment) {
	now := f.clock.Now()
	d.Status = "cancelled-by-user"
	d.FinishedAt = now
	d.updatedAt = now
	if now.After(f.cursor) {
		f.cursor = now
	}
	if a := f.apps[d.AppUUID]; a != nil {
		f.noteStatusLocked(a, now)
	}
}
