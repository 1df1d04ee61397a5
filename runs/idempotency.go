package runs

import (
	"errors"
	"fmt"
)

// ErrKeyReused: an idempotency key was used again with a different request (another
// Trigger.IdempotencyHash). Store.Create returns it as a *KeyReusedError.
var ErrKeyReused = errors.New("idempotency key reused with a different request")

// KeyReusedError is Store.Create's refusal of an idempotency key that already names a run
// created for a different request. It matches ErrKeyReused.
type KeyReusedError struct {
	Pipeline string
	Key      string // the stored key, with its namespace ("api:…")
	RunID    string // the run the key names
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("idempotency key %q of pipeline %q names run %s, created for a different request: %v",
		e.Key, e.Pipeline, e.RunID, ErrKeyReused)
}

// Is makes a *KeyReusedError match ErrKeyReused.
func (e *KeyReusedError) Is(target error) bool { return target == ErrKeyReused }
