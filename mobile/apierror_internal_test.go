package mobile

import "testing"

// DRF answers a field's messages as a list, as a plain string, or nested for nested
// serializers; each reaches the error's detail.
func TestAPIErrorReadsDRFBodies(t *testing.T) {
	for body, want := range map[string]string{
		`{"detail":"Not found."}`: "Not found.",
		`{"environment":"Environment must use v2 feature versioning."}`:           "environment: Environment must use v2 feature versioning.",
		`{"name":["This field is required."],"type":["Not a valid choice."]}`:     "name: This field is required.; type: Not a valid choice.",
		`{"feature_states_to_update":[{"feature_state_value":["Too long."]},{}]}`: "feature_states_to_update: {feature_state_value: Too long.}",
		`<html>bad gateway</html>`: "<html>bad gateway</html>",
	} {
		if got := newAPIError("POST", "/p/", 400, []byte(body)).Message; got != want {
			t.Errorf("%s: got detail %q, want %q", body, got, want)
		}
	}
}
