package mobile

import (
	"errors"
	"reflect"
	"testing"
)

func TestApplyFields(t *testing.T) {
	cases := []struct {
		name    string
		cur     Value
		changes []Change
		want    Value
		changed bool
		skipped int
	}{
		{"keeps key order and formatting of untouched values",
			StringValue(`{"b":{"x":1.50,"y":[1,{"z":null}]},"a":"<tag> & é"}`),
			[]Change{{Path: "b.x", Value: 2}},
			StringValue(`{"b":{"x":2,"y":[1,{"z":null}]},"a":"<tag> & é"}`), true, 0},
		{"creates missing objects, appends new keys last",
			StringValue(`{"ios":{}}`),
			[]Change{{Path: "android.latest_version", Value: "1.0.0"}},
			StringValue(`{"ios":{},"android":{"latest_version":"1.0.0"}}`), true, 0},
		{"an empty value starts from an empty document",
			Value{}, []Change{{Path: "a", Value: true}},
			StringValue(`{"a":true}`), true, 0},
		{"an empty string starts from an empty document",
			StringValue(""), []Change{{Path: "a", Value: "x"}},
			StringValue(`{"a":"x"}`), true, 0},
		{"same content differently formatted is no change",
			StringValue("{ \"a\" : \"x\" }"), []Change{{Path: "a", Value: "x"}},
			StringValue("{ \"a\" : \"x\" }"), false, 0},
		{"never-downgrade skips a lower version",
			StringValue(`{"v":"1.10.0"}`), []Change{{Path: "v", Value: "1.9.0", NeverDowngrade: true}},
			StringValue(`{"v":"1.10.0"}`), false, 1},
		{"never-downgrade sets a missing version",
			StringValue(`{}`), []Change{{Path: "v", Value: "1.9.0", NeverDowngrade: true}},
			StringValue(`{"v":"1.9.0"}`), true, 0},
		{"later changes see earlier ones",
			StringValue(`{"v":"1.0.0"}`), []Change{{Path: "v", Value: "3.0.0"}, {Path: "v", Value: "2.0.0", NeverDowngrade: true}},
			StringValue(`{"v":"3.0.0"}`), true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, skipped, changed, err := apply(c.cur, c.changes)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || changed != c.changed || len(skipped) != c.skipped {
				t.Fatalf("got %v changed=%v skipped=%v; want %v changed=%v skipped=%d", got, changed, skipped, c.want, c.changed, c.skipped)
			}
		})
	}
}

func TestApplyRefusesWhatDoesNotFit(t *testing.T) {
	cases := []struct {
		name    string
		cur     Value
		changes []Change
	}{
		{"path through a non-object", StringValue(`{"ios":"2.0"}`), []Change{{Path: "ios.latest_version", Value: "1"}}},
		{"empty path segment", StringValue(`{}`), []Change{{Path: "ios..v", Value: "1"}}},
		{"value is not a document", StringValue(`not json`), []Change{{Path: "a", Value: "1"}}},
		{"value is a JSON array", StringValue(`[1]`), []Change{{Path: "a", Value: "1"}}},
		{"trailing data", StringValue(`{} {}`), []Change{{Path: "a", Value: "1"}}},
		{"field change on an integer", IntValue(3), []Change{{Path: "a", Value: "1"}}},
		{"whole change of another type", BoolValue(true), []Change{{Value: 1}}},
		{"whole change with a fraction", IntValue(1), []Change{{Value: 1.5}}},
		{"whole and field changes mixed", StringValue(`{}`), []Change{{Value: "x"}, {Path: "a", Value: 1}}},
		{"never-downgrade on a number", StringValue(`{"v":1}`), []Change{{Path: "v", Value: "2.0", NeverDowngrade: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, _, err := apply(c.cur, c.changes); !errors.Is(err, ErrChange) {
				t.Fatalf("got %v, want ErrChange", err)
			}
		})
	}
}

func TestApplyWhole(t *testing.T) {
	got, skipped, changed, err := apply(StringValue("2.0.0"), []Change{{Value: "1.9.0", NeverDowngrade: true}})
	if err != nil || changed || len(skipped) != 1 || got != StringValue("2.0.0") {
		t.Fatalf("got %v %v %v %v, want the downgrade skipped", got, skipped, changed, err)
	}
	got, _, changed, err = apply(Value{}, []Change{{Value: 7}})
	if err != nil || !changed || got != IntValue(7) {
		t.Fatalf("got %v %v %v, want integer 7 on an empty value", got, changed, err)
	}
}

func TestValueJSON(t *testing.T) {
	for _, v := range []Value{{}, StringValue(`{"a":"b"}`), IntValue(-3), BoolValue(true), BoolValue(false)} {
		b, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Value
		if err := back.UnmarshalJSON(b); err != nil || back != v {
			t.Fatalf("%s: round trip gave %v, %v", b, back, err)
		}
	}
	var v Value
	if err := v.UnmarshalJSON([]byte(`1.5`)); err == nil {
		t.Fatal("a fraction decoded without error")
	}
}

func TestRevert(t *testing.T) {
	cases := []struct {
		name    string
		rv      Revert
		cur     Value
		want    Value
		changed bool
		kept    int
	}{
		{"a whole value still as written goes back",
			Revert{Old: IntValue(3), New: IntValue(4), Paths: []string{""}}, IntValue(4), IntValue(3), true, 0},
		{"a whole value changed since is kept",
			Revert{Old: IntValue(3), New: IntValue(4), Paths: []string{""}}, IntValue(5), IntValue(5), false, 1},
		{"a field the step created is removed, its parent kept",
			Revert{Old: StringValue(`{"a":{}}`), New: StringValue(`{"a":{"b":1}}`), Paths: []string{"a.b"}},
			StringValue(`{"a":{"b":1},"c":true}`), StringValue(`{"a":{},"c":true}`), true, 0},
		{"a field removed since stays removed",
			Revert{Old: StringValue(`{"a":1}`), New: StringValue(`{"a":2}`), Paths: []string{"a"}},
			StringValue(`{}`), StringValue(`{}`), false, 1},
		{"an object value compares whole",
			Revert{Old: StringValue(`{"a":{"x":1}}`), New: StringValue(`{"a":{"x":2}}`), Paths: []string{"a"}},
			StringValue(`{"a":{"x":2}}`), StringValue(`{"a":{"x":1}}`), true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, kept, changed, err := c.rv.apply(c.cur)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || changed != c.changed || len(kept) != c.kept {
				t.Fatalf("got %v changed=%v kept=%v; want %v changed=%v kept=%d", got, changed, kept, c.want, c.changed, c.kept)
			}
		})
	}
}

func TestFieldValues(t *testing.T) {
	old := StringValue(`{"ios":{"latest":"2.3.0","min":"2.0"},"note":"x"}`)
	new := StringValue(`{"ios":{"latest":"2.4.0","min":"2.0","force":true},"note":"x"}`)
	got := FieldValues(old, new, []string{"ios.latest", "ios.force"})
	want := []FieldValue{{Path: "ios.latest", Old: `"2.3.0"`, New: `"2.4.0"`}, {Path: "ios.force", Old: "", New: "true"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FieldValues = %+v, want %+v", got, want)
	}
	whole := FieldValues(IntValue(3), IntValue(4), []string{""})
	if want := []FieldValue{{Path: "", Old: "3", New: "4"}}; !reflect.DeepEqual(whole, want) {
		t.Errorf("FieldValues of a whole value = %+v, want %+v", whole, want)
	}
}
