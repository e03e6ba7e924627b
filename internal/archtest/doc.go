// Package archtest holds the tests that enforce DESIGN.md's dependency
// rules and documentation habits, so the layering cannot rot silently. It
// has no code of its own.
//
// The rules are an allow-list: mayImport gives every package of the module
// the packages of the module it may import directly, written from
// DESIGN.md's arrows. A new package without an entry fails, and so does an
// entry naming a package that no longer exists, so renaming a package means
// renaming its rule with it. Library packages do not print or exit (only
// cli and main do), checked on their syntax trees. The shared test helpers
// are for tests only: no production package may import them.
package archtest
