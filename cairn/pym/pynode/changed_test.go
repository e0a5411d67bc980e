package pynode

import (
	"slices"
	"testing"
)

func TestChanged(t *testing.T) {
	old := `import os


def keep(a):
    return a


def edit(b):
    return b


class C:
    def m(self):
        return 1

    def same(self):
        return 2


def gone():
    pass


def twice():
    return 1


def twice():
    return 2
`
	// keep moves down two lines without a change; edit's body changes;
	// C.m changes (so C does); gone is removed; new is added; the second
	// twice changes, the first does not.
	updated := `import os
import sys


def keep(a):
    return a


def edit(b):
    return b + 1


class C:
    def m(self):
        return 10

    def same(self):
        return 2


def twice():
    return 1


def twice():
    return 3


def new():
    pass
`
	changes, of, nf, err := Changed([]byte(old), []byte(updated))
	if err != nil {
		t.Fatal(err)
	}
	if len(of.Problems) != 0 || len(nf.Problems) != 0 {
		t.Fatalf("problems: %v %v", of.Problems, nf.Problems)
	}
	var got []string
	for _, c := range changes {
		got = append(got, string(c.Kind)+" "+c.Node.Name)
	}
	want := []string{"modified edit", "modified C", "modified C.m", "modified twice", "added new", "removed gone"}
	if !slices.Equal(got, want) {
		t.Fatalf("changes:\n got %q\nwant %q", got, want)
	}
	if c := changes[3]; c.Node.Start != 25 || c.Text != "def twice():\n    return 3\n" {
		t.Fatalf("second twice: start %d text %q", c.Node.Start, c.Text)
	}
	if c := changes[5]; c.Text != "def gone():\n    pass\n" {
		t.Fatalf("removed text %q", c.Text)
	}
}

func TestChangedSameAndBroken(t *testing.T) {
	changes, _, _, err := Changed([]byte(sample), []byte(sample))
	if err != nil || len(changes) != 0 {
		t.Fatalf("identical files: %v %v", changes, err)
	}
	// A file that stops parsing: the recovered nodes are compared and the
	// new file carries its problems.
	changes, _, nf, err := Changed([]byte("def a():\n    return 1\n\n\ndef b():\n    return 2\n"),
		[]byte("def a():\n    return 1\n\n\ndef b(:\n    return 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(nf.Problems) == 0 {
		t.Fatal("the broken file has no problems")
	}
	for _, c := range changes {
		if c.Node.Name == "a" {
			t.Fatalf("a did not change: %+v", changes)
		}
	}
}
