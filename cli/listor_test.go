package cli

import (
	"errors"
	"testing"
)

func TestListOr(t *testing.T) {
	dlq := listOrVerb{noun: "dlq", verb: "replay", arg: "ID", argDesc: "the ID of a dead letter"}
	for _, c := range []struct {
		name       string
		positional []string
		want       string // "list", "act:ARG", or the usage error
	}{
		{"list", []string{"list"}, "list"},
		{"verb and argument", []string{"replay", "m1"}, "act:m1"},
		{"verb alone", []string{"replay"}, "dlq replay needs the ID of a dead letter (see `meshagent dlq list`)"},
		{"verb with an empty argument", []string{"replay", ""}, "dlq replay needs the ID of a dead letter (see `meshagent dlq list`)"},
		{"verb with two arguments", []string{"replay", "m1", "m2"}, "dlq replay needs the ID of a dead letter (see `meshagent dlq list`)"},
		{"list with an argument", []string{"list", "x"}, "dlq needs `list` or `replay ID`"},
		{"nothing", nil, "dlq needs `list` or `replay ID`"},
		{"another verb", []string{"forget", "m1"}, "dlq needs `list` or `replay ID`"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &runState{positional: c.positional}
			var got string
			err := r.listOr(dlq,
				func() error { got = "list"; return nil },
				func(arg string) error { got = "act:" + arg; return nil })
			if err != nil {
				var ee *ExitError
				if !errors.As(err, &ee) || ee.Code != ExitUsage {
					t.Fatalf("error %v is not a usage error", err)
				}
				got = ee.Error()
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
