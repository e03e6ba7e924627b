// Package archtest holds the tests that enforce DESIGN.md's dependency
// rules and documentation habits, so the layering cannot rot silently. It
// has no code of its own.
package archtest
