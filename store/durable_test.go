package store

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestDurables: the list holds every name kept, sorted, with its
// position's size, and no name deleted.
func TestDurables(t *testing.T) {
	tests := []struct {
		name   string
		save   map[string]string // name → position
		delete []string
		want   []DurableInfo
	}{
		{name: "empty", want: nil},
		{
			name: "sorted with sizes",
			save: map[string]string{"zeta": "z", "alpha": strings.Repeat("a", 300), "mid": ""},
			want: []DurableInfo{{Name: "alpha", Bytes: 300}, {Name: "mid", Bytes: 0}, {Name: "zeta", Bytes: 1}},
		},
		{
			name:   "deleted gone",
			save:   map[string]string{"a": "one", "b": "two", "c": "three"},
			delete: []string{"b"},
			want:   []DurableInfo{{Name: "a", Bytes: 3}, {Name: "c", Bytes: 5}},
		},
		{
			name:   "all deleted",
			save:   map[string]string{"only": "p"},
			delete: []string{"only"},
			want:   nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t)
			ctx := context.Background()
			for n, v := range tc.save {
				if err := s.SaveDurable(ctx, n, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range tc.delete {
				if err := s.DeleteDurable(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Durables(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Durables = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDurablesSizeFollowsSave: a position saved again is listed with its
// new size.
func TestDurablesSizeFollowsSave(t *testing.T) {
	s, _ := open(t, WithMaxDurables(2))
	ctx := context.Background()
	if s.MaxDurables() != 2 {
		t.Fatalf("MaxDurables = %d, want 2", s.MaxDurables())
	}
	for _, v := range []string{"short", "a longer one"} {
		if err := s.SaveDurable(ctx, "r", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Durables(ctx)
	if err != nil || !slices.Equal(got, []DurableInfo{{Name: "r", Bytes: len("a longer one")}}) {
		t.Fatalf("Durables = %v %v", got, err)
	}
}
