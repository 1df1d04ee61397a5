package runs

import (
	"context"
	"time"
)

// Deliveries de-duplicates webhook deliveries: it remembers the delivery IDs it was shown for
// a while. It has nothing to do with runs beyond living on the same backend; both run-store
// backends implement it (runs/sqlitestore, runs/redisstore), and runstest.Run checks both
// against it.
type Deliveries interface {
	// SeenDelivery records a webhook delivery ID and reports whether it was already recorded
	// within the last ttl: the first call for an ID returns false, later calls return true
	// until ttl has passed. The check and the record are one atomic step, so two concurrent
	// calls with one ID get one false and one true.
	//
	// Errors: ErrInvalid (empty id, ttl <= 0); ErrUnavailable.
	SeenDelivery(ctx context.Context, id string, ttl time.Duration) (seen bool, err error)
}
