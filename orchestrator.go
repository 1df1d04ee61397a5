// Package orchestrator holds the words every layer of the deploy orchestrator shares, each
// defined once (in the style of benbjohnson/wtf's root package):
//
//   - the Trigger that asks for a run, with its one Validate and limits (MaxCommitLen, …),
//     and app versions (ParseVersion, CompareVersions);
//   - the errors the front doors answer with: ErrUnknownPipeline, ErrInvalid (with
//     FieldError and FieldErrors naming the field as data), ErrShuttingDown, ErrNotOwner;
//   - the lock-key vocabulary: the namespaces, Phase1Key and Phase2Key, IsPhaseKey,
//     ServiceLockKey, MobileLockKey, DaemonLiveKey and DaemonTakeoverKey, CheckNamespaces,
//     CheckLockKey, and LeaseInfo, what a lease on a key says;
//   - the Engine contract that package api serves and package phases implements, with its
//     Plan and the changes a plan and a run list (EnvChange, TagChange), and its services
//     view (Service, ServicePipeline, ServiceMark).
//
// It imports nothing of this module, so every package can import it; cmd/orchestrator's
// architecture test keeps it so.
package orchestrator
