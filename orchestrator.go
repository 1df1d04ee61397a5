// Package orchestrator holds the words every layer of the deploy orchestrator shares, each
// defined once (in the style of benbjohnson/wtf's root package): the Trigger that asks for a
// run and its one Validate, the errors the front doors answer with (ErrUnknownPipeline,
// ErrShuttingDown, ErrInvalid, ErrNotOwner, FieldError), the lock-key vocabulary (the
// namespaces, Phase1Key and Phase2Key, ServiceLockKey, MobileLockKey, the daemons' keys and
// CheckLockKey), app versions, and the Engine contract package api serves and package phases
// implements, with its Plan.
//
// It imports nothing of this module, so every package can import it; cmd/orchestrator's
// architecture test keeps it so.
package orchestrator
