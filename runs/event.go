package runs

import "time"

// EventType says what happened. Types are "<subject>.<verb>"; consumers should ignore types
// they do not know.
type EventType string

// Event types written by the engine and the store.
const (
	EventRunQueued  EventType = "run.queued"
	EventRunStarted EventType = "run.started"
	// EventPreflight: the read-only checks of every outside system before Phase 1 (the
	// message says ok, or lists every problem; the run then ends failed, having written
	// nothing).
	EventPreflight     EventType = "preflight"
	EventPhaseStarted  EventType = "phase.started"
	EventPhaseFinished EventType = "phase.finished"
	// EventWaveStarted: Phase 2 starts a wave of services ("wave 2 of 3: a, b"); the run's
	// events thus say which waves ran. Written only for a pipeline with more than one wave.
	EventWaveStarted EventType = "wave.started"

	EventLockWaiting  EventType = "lock.waiting"
	EventLockAcquired EventType = "lock.acquired"
	EventLockReleased EventType = "lock.released"
	EventLockLost     EventType = "lock.lost"

	EventServiceSynced     EventType = "service.synced"
	EventServiceUnchanged  EventType = "service.unchanged"
	EventServiceSuperseded EventType = "service.superseded"
	EventServiceFailed     EventType = "service.failed"
	EventServiceRestored   EventType = "service.restored"
	EventDeployStarted     EventType = "deploy.started"
	EventDeployFinished    EventType = "deploy.finished"
	// EventDeployCanceled: a deployment was canceled by this run (one left running by a run
	// whose daemon died, or one that did not end within the deploy timeout), or by the
	// daemon that took the run over.
	EventDeployCanceled EventType = "deploy.canceled"
	// EventDeployStillRunning: a deployment of the run's own did not end when canceled
	// again and again; the run released the service's lock with it still queued or in
	// progress, and writes nothing more to the service (its state is unknown).
	EventDeployStillRunning EventType = "deploy.still_running"
	EventHealthOK           EventType = "health.ok"
	EventHealthFailed       EventType = "health.failed"
	EventMobileUpdated      EventType = "mobile.updated"
	// EventMobileReverted: a rollback put back what the run's mobile step wrote (the
	// message names the fields kept because they changed since).
	EventMobileReverted EventType = "mobile.reverted"
	// EventCoolifyPaced: calls of the run waited for the Coolify instance's rate budget
	// (coolify.rate_limit). One event sums the waits of a few seconds; Data holds DataCalls,
	// DataPriorityCalls, DataWaitedMS and DataLongestMS.
	EventCoolifyPaced EventType = "coolify.paced"
	// EventAnalysisStarted: the run measures its metric checks (the message names the stage:
	// after which wave, or after the mobile step); EventAnalysisMeasured is one measurement
	// (Service; Data: DataCheck, DataValue, DataOutcome, DataMeasurement); EventAnalysisEnded
	// says how the analysis ended (Data: DataOutcome) and what the run does about it.
	EventAnalysisStarted  EventType = "analysis.started"
	EventAnalysisMeasured EventType = "analysis.measured"
	EventAnalysisEnded    EventType = "analysis.ended"
	// EventServiceStale: the service carries a newer build than the run's; the run leaves it.
	EventServiceStale EventType = "service.stale"

	// EventNotifyAttempt: one attempt to deliver a notification about the run (Data: target,
	// event, attempt, status); EventNotifySent and EventNotifyFailed say how the delivery
	// ended. They may follow the run's end event.
	EventNotifyAttempt EventType = "notify.attempt"
	EventNotifySent    EventType = "notify.sent"
	EventNotifyFailed  EventType = "notify.failed"

	// EventStatusFailed: a deployment state could not be told to a Git host (Data: host,
	// state, attempt, and gave_up "true" when it is dropped; the message has the host's
	// answer). Written on the first failed attempt at a state and when it is given up, not on
	// every retry. EventStatusSkipped: the run is not reported to a host its pipeline names,
	// and why (no commit, another repository). Both may follow the run's end event.
	EventStatusFailed  EventType = "status.failed"
	EventStatusSkipped EventType = "status.skipped"

	EventRunSucceeded   EventType = "run.succeeded"
	EventRunFailed      EventType = "run.failed"
	EventRunSuperseded  EventType = "run.superseded"
	EventRunCanceled    EventType = "run.canceled"
	EventRunInterrupted EventType = "run.interrupted"
	// EventRunExpired: nobody decided what the run waited for before the decision expired.
	EventRunExpired EventType = "run.expired"

	// EventRunTakeover: another daemon (or this one, after it lost its liveness lease) takes
	// the run over: it advanced the run's ownership epoch and goes on to end it interrupted.
	EventRunTakeover EventType = "run.takeover"
	// EventRunCancelRequested: someone asked the run to stop (Data: by, and reason when
	// given); the run ends canceled at its next safe point.
	EventRunCancelRequested EventType = "run.cancel_requested"
	// EventDecisionAsked: the run waits for a person's decision (Run.Decision), holding no
	// lock; EventDecisionVote: someone approved or rejected (Data: by, reason, verdict).
	EventDecisionAsked EventType = "decision.asked"
	EventDecisionVote  EventType = "decision.vote"
	// EventWindowClosed: the run reached Phase 1 or Phase 2 outside its pipeline's deploy
	// windows: it waits, holding no lock (Data: until, when known), or fails.
	EventWindowClosed EventType = "window.closed"
	// EventWindowOverride: someone overrode the run's deploy windows (Data: by, reason), or
	// asked to, when a second person must override too.
	EventWindowOverride EventType = "window.override"
)

// EndsRun reports whether the event is the last word on a run: run.succeeded, run.failed,
// run.superseded, run.canceled or run.interrupted.
func (t EventType) EndsRun() bool {
	switch t {
	case EventRunSucceeded, EventRunFailed, EventRunSuperseded, EventRunCanceled, EventRunInterrupted, EventRunExpired:
		return true
	}
	return false
}

// EndEvent returns the event type that ends a run in terminal status s ("" if s is not terminal).
func EndEvent(s Status) EventType {
	switch s {
	case StatusSucceeded:
		return EventRunSucceeded
	case StatusFailed:
		return EventRunFailed
	case StatusSuperseded:
		return EventRunSuperseded
	case StatusCanceled:
		return EventRunCanceled
	case StatusInterrupted:
		return EventRunInterrupted
	case StatusExpired:
		return EventRunExpired
	}
	return ""
}

// Event is one entry of a run's append-only log. The store assigns Seq (1, 2, 3… per run,
// without gaps, in append order), fills RunID, and sets At when it is zero.
//
// Events never carry secret values: Message and Data hold names, tags, fences and UUIDs.
type Event struct {
	Seq     int64             `json:"seq"`
	RunID   string            `json:"run_id"`
	At      time.Time         `json:"at"`
	Type    EventType         `json:"type"`
	Phase   Phase             `json:"phase,omitempty"`
	Service string            `json:"service,omitempty"`
	LockKey string            `json:"lock_key,omitempty"`
	Fence   int64             `json:"fence,omitempty"`
	Message string            `json:"message,omitempty"`
	Data    map[string]string `json:"data,omitempty"`
}

// Data keys used by the events the store writes itself.
const (
	// DataHeldLocks is a run.interrupted event's comma-separated list of the keys the run
	// held when its daemon stopped.
	DataHeldLocks = "held_locks"
	// DataInstance is the daemon instance (Run.Instance) a run.interrupted or run.takeover
	// event was marked for.
	DataInstance = "owner"
	// DataTakenOverBy is the daemon instance that takes the run over (run.takeover).
	DataTakenOverBy = "taken_over_by"
	// DataCheck, DataValue, DataOutcome and DataMeasurement describe an analysis.* event:
	// the check's name, the value measured ("no data" when none), successful, failed or
	// inconclusive, and the measurement's number ("2/3").
	DataCheck       = "check"
	DataValue       = "value"
	DataOutcome     = "outcome"
	DataMeasurement = "measurement"
	// DataDeployment is the Coolify deployment a deploy.* or service.restored event is about.
	DataDeployment = "deployment_uuid"
	// DataCalls, DataPriorityCalls, DataWaitedMS and DataLongestMS are a coolify.paced
	// event's number of calls that waited, how many of them were priority calls, their total
	// wait and the longest one, in milliseconds.
	DataCalls         = "calls"
	DataPriorityCalls = "priority_calls"
	DataWaitedMS      = "waited_ms"
	DataLongestMS     = "longest_ms"
	// DataBy and DataReason are who asked for a run.cancel_requested and why.
	DataBy     = "by"
	DataReason = "reason"
	// DataVerdict is a decision.vote's "approved" or "rejected".
	DataVerdict = "verdict"
	// DataUntil is when a window.closed run's deploy windows open next (RFC 3339).
	DataUntil = "until"
)
