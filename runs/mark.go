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
// creation time and whether it was a rollback: the stale-build guard compares a later run's
// build with it.
type Mark struct {
	UUID  string    `json:"uuid"`
	RunID string    `json:"run_id"`
	Fence int64     `json:"fence"`
	Phase Phase     `json:"phase"`
	At    time.Time `json:"at"`
	// Pipeline is run RunID's pipeline, Build its trigger's build ("" when it had none),
	// RunCreated when it was created, Rollback whether it was a rollback. After a restore they
	// describe the build put back.
	Pipeline   string    `json:"pipeline,omitempty"`
	Build      string    `json:"build,omitempty"`
	RunCreated time.Time `json:"run_created,omitzero"`
	Rollback   bool      `json:"rollback,omitempty"`
}

// ErrFenceBehind: a mark was not written because the resource already carries a mark with a
// higher fence.
var ErrFenceBehind = errors.New("a newer fence is recorded for the resource")

// MarkStore keeps one Mark per Coolify resource. Both run stores implement it.
type MarkStore interface {
	// PutMark records m unless the resource's current mark has a higher fence, in which case
	// nothing is written and an error wrapping ErrFenceBehind is returned together with the
	// current mark. The check and the write are one atomic step.
	PutMark(ctx context.Context, m Mark) (current Mark, err error)
	// GetMark returns the resource's mark; ErrNotFound when it has none.
	GetMark(ctx context.Context, uuid string) (Mark, error)
}
