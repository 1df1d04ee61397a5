package runs

import (
	"context"
	"errors"
	"time"
)

// Mark records who last changed a Coolify resource and under which fence: "synced by run R
// at fence F" after Phase 1, "deployed by run R at fence F" after Phase 2. Phase 2 reads it
// under the service lock before acting: a mark of another run means a newer run re-synced the
// service (this run's config is gone, so it is not deployed), and a fence newer than the
// lease's own means someone acted on the service after this lease was granted.
//
// The mark records the run's build too ("synced by run R at fence F, build B"), with the run's
// creation time and whether it was a rollback.
//
// The same type is each pipeline's record on a resource (its "pipeline mark"): the newest
// build that pipeline synced or deployed there and the run whose build it is. The stale-build
// guard compares a later run's build with its own pipeline's record, not with the resource's
// mark: the resource's mark is whichever pipeline wrote last, and a pipeline's history on a
// resource that several pipelines deploy must outlive another pipeline's write.
type Mark struct {
	UUID  string    `json:"uuid"`
	RunID string    `json:"run_id"`
	Fence int64     `json:"fence"`
	Phase Phase     `json:"phase"`
	At    time.Time `json:"at"`
	// Pipeline is run RunID's pipeline, Build its trigger's build ("" when it had none),
	// RunCreated when it was created, Rollback whether it was a rollback. After a restore the
	// resource's mark names the restoring run (the write guard must know who wrote last), and
	// these fields describe the build put back, which may be another pipeline's.
	Pipeline   string    `json:"pipeline,omitempty"`
	Build      string    `json:"build,omitempty"`
	RunCreated time.Time `json:"run_created,omitzero"`
	Rollback   bool      `json:"rollback,omitempty"`
}

// ErrFenceBehind: a mark was not written because the resource already carries a mark with a
// higher fence.
var ErrFenceBehind = errors.New("a newer fence is recorded for the resource")

// MarkStore keeps one Mark per Coolify resource, and per resource one Mark per pipeline that
// wrote it. Both run stores implement it.
//
// Marks written before pipeline marks existed have no pipeline mark of their own: the
// resource's mark stands for its pipeline's (PipelineMark, PipelineMarks) until another write
// replaces it, and every write first keeps it as its pipeline's mark when that pipeline has
// none, so an upgrade loses no pipeline's history.
type MarkStore interface {
	// PutMark records m as the resource's mark unless the resource's current mark has a
	// higher fence, in which case nothing is written and an error wrapping ErrFenceBehind is
	// returned together with the current mark. When m.Pipeline is set, m is also recorded as
	// that pipeline's mark on the resource. The check and the writes are one atomic step.
	PutMark(ctx context.Context, m Mark) (current Mark, err error)
	// RestoreMark records m as the resource's mark under PutMark's fence rule and puts
	// pipeline's mark on the resource back to *prev (nil: the pipeline has none), in one
	// atomic step; the marks of other pipelines are left as they are, whichever pipeline
	// m.Pipeline names (a restore puts back a build, maybe another pipeline's, under the
	// restoring run's name). A refusal writes neither.
	RestoreMark(ctx context.Context, m Mark, pipeline string, prev *Mark) (current Mark, err error)
	// GetMark returns the resource's mark; ErrNotFound when it has none.
	GetMark(ctx context.Context, uuid string) (Mark, error)
	// PipelineMark returns pipeline's mark on the resource: the newest build it synced or
	// deployed there and the run whose build it is. When the pipeline has none but the
	// resource's mark names it (written before pipeline marks existed), that mark; else
	// ErrNotFound.
	PipelineMark(ctx context.Context, uuid, pipeline string) (Mark, error)
	// PipelineMarks returns the mark of every pipeline on the resource, by pipeline name, as
	// PipelineMark would return each; none (and no error) when it has none.
	PipelineMarks(ctx context.Context, uuid string) ([]Mark, error)
	// PutRunning records r as what the resource runs now, replacing what was recorded.
	// Errors: ErrInvalid (no uuid or run id).
	PutRunning(ctx context.Context, r Running) error
	// GetRunning returns what the resource was last seen running; ErrNotFound when nothing
	// was recorded.
	GetRunning(ctx context.Context, uuid string) (Running, error)
}

// Running is what a Coolify resource was last seen running: the deployment a run verified
// there (its health checks, and its version probe where the pipeline has one, passed), or
// the previous config a rollback redeployed and verified (Restored). It describes the build:
// RunID, Pipeline and Build are the run whose build it is; RestoredBy the run that put it
// back.
type Running struct {
	UUID       string    `json:"uuid"`
	ImageTag   string    `json:"image_tag,omitempty"`
	Commit     string    `json:"commit,omitempty"`
	AppVersion string    `json:"app_version,omitempty"`
	Deployment string    `json:"deployment_uuid,omitempty"`
	RunID      string    `json:"run_id"`
	Pipeline   string    `json:"pipeline,omitempty"`
	Build      string    `json:"build,omitempty"`
	Since      time.Time `json:"since"`
	Restored   bool      `json:"restored,omitempty"`
	RestoredBy string    `json:"restored_by,omitempty"`
}
