package config

import "time"

// Approvals say that a run of the pipeline waits, before Phase 1 and holding no lock, until
// Required people approved its exact plan.
//
//	approvals: { required: 2, forbid_self_approval: true, expire_after: 24h }
type Approvals struct {
	// Required is how many approvals by different people a run needs (at least 1).
	Required int `koanf:"required"`
	// ForbidSelfApproval: the subject that triggered the run may not approve it.
	ForbidSelfApproval bool `koanf:"forbid_self_approval"`
	// ExpireAfter ends a run still waiting for approval this long after it asked, as
	// expired (default DefaultApprovalExpiry).
	ExpireAfter time.Duration `koanf:"expire_after"`
}

// DefaultApprovalExpiry is Approvals.ExpireAfter's default.
const DefaultApprovalExpiry = 24 * time.Hour

// approvals checks a pipeline's approvals block and fills its defaults.
func (v *validator) approvals(field string, a *Approvals) {
	if a == nil {
		return
	}
	if a.ExpireAfter == 0 {
		a.ExpireAfter = DefaultApprovalExpiry
	}
	if a.Required < 1 {
		v.add(field+".required", "must be at least 1 (leave the approvals block out for none)")
	}
	if a.ExpireAfter < 0 {
		v.add(field+".expire_after", "must be positive (e.g. 24h)")
	}
}
