package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverShowsItsValue(t *testing.T) {
	s := Secret(sentinel)
	type holder struct {
		Token Secret
		Ptr   *Secret
	}
	h := holder{Token: s, Ptr: &s}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", s, "holder", h)
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := s.MarshalText()
	forms := []string{
		s.String(), s.GoString(), string(text), string(js), logs.String(),
		fmt.Sprintf("%s %v %+v %#v %q %x %X %d %10s", s, s, h, h, s, s, s, s, s),
		fmt.Sprint(s), fmt.Sprintln(h),
	}
	for _, f := range forms {
		if strings.Contains(f, sentinel) || strings.Contains(f, fmt.Sprintf("%x", sentinel)) {
			t.Errorf("secret shown: %s", f)
		}
	}
	if s.String() != "[redacted]" || !strings.Contains(string(js), `"Token":"[redacted]"`) {
		t.Errorf("got %q and %s", s.String(), js)
	}
	if s.Reveal() != sentinel || !s.IsSet() {
		t.Error("Reveal lost the value")
	}
	if Secret("").String() != "" || Secret("").IsSet() {
		t.Error("an empty secret should print empty and not be set")
	}
}

func TestSecretUnmarshalsJSON(t *testing.T) {
	var v struct{ Token Secret }
	if err := json.Unmarshal([]byte(`{"Token":"abc"}`), &v); err != nil || v.Token.Reveal() != "abc" {
		t.Errorf("got %v, %v", v.Token.Reveal(), err)
	}
}
