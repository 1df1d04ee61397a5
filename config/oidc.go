package config

import (
	"fmt"
	"net/url"
	"slices"
)

// OIDC is the dashboard's login through an OpenID Connect provider: people sign in there, and
// the claims of their ID token (and userinfo) map to a role (Roles, first match of the
// highest role wins). The session's subject is "oidc:<email>" (or "oidc:<sub>" without an
// email claim).
//
//	oidc:
//	  issuer: https://login.example.com
//	  client_id: orchestrator
//	  client_secret: ${OIDC_CLIENT_SECRET}
//	  roles:
//	    - { claim: groups, value: deploy-approvers, role: approver }
//	    - { claim: email, value: ops@example.com, role: admin }
type OIDC struct {
	// Issuer is the provider's issuer URL (its /.well-known/openid-configuration is read).
	Issuer   string `koanf:"issuer"`
	ClientID string `koanf:"client_id"`
	// ClientSecret also keys the signature of the OIDC sessions.
	ClientSecret Secret `koanf:"client_secret"`
	// RedirectURL is this daemon's callback as the provider knows it (default: public_url +
	// /login/oidc/callback).
	RedirectURL string `koanf:"redirect_url"`
	// Scopes asked for besides openid (default profile, email).
	Scopes []string `koanf:"scopes"`
	// Roles map claims to roles; a person no rule matches may not log in.
	Roles []OIDCRole `koanf:"roles"`
}

// OIDCRole gives Role to a person whose claim Claim is Value, or, for a list claim (groups),
// contains it.
type OIDCRole struct {
	Claim string `koanf:"claim"`
	Value string `koanf:"value"`
	Role  Role   `koanf:"role"`
}

// oidc checks the oidc block.
func (v *validator) oidc(o *OIDC) {
	if o == nil {
		return
	}
	if u, err := url.Parse(o.Issuer); err != nil || u.Scheme == "" || u.Host == "" {
		v.add("oidc.issuer", "%s is not a URL (https://login.example.com)", v.show("oidc.issuer", o.Issuer))
	}
	if o.ClientID == "" {
		v.add("oidc.client_id", "is required")
	}
	if !o.ClientSecret.IsSet() {
		v.add("oidc.client_secret", "is required")
	}
	v.secretStrength("oidc.client_secret", o.ClientSecret)
	if o.RedirectURL != "" {
		if u, err := url.Parse(o.RedirectURL); err != nil || u.Scheme == "" || u.Host == "" {
			v.add("oidc.redirect_url", "%s is not a URL", v.show("oidc.redirect_url", o.RedirectURL))
		}
	}
	if len(o.Roles) == 0 {
		v.add("oidc.roles", "map at least one claim to a role: nobody could log in")
	}
	for i, r := range o.Roles {
		f := fmt.Sprintf("oidc.roles[%d]", i)
		if r.Claim == "" {
			v.add(f+".claim", "is required")
		}
		if r.Value == "" {
			v.add(f+".value", "is required")
		}
		if !slices.Contains(Roles, r.Role) {
			v.add(f+".role", "%s is not a role: use %s", v.show(f+".role", string(r.Role)), roleList())
		}
	}
}
