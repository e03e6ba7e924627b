// Package archtest holds the tests that enforce DESIGN.md's dependency
// rules and documentation habits, so the layering cannot rot silently. It
// has no code of its own.
//
// The rules name packages by path. A rule that names a package which does
// not exist fails rather than checking nothing, so renaming a package
// means renaming its rules with it. The shared test helpers (meshtest,
// p2ptest, testlog, wait) are for tests only: no production package may
// import them, and those below node import nothing of the project, so any
// package's tests can use them.
package archtest
