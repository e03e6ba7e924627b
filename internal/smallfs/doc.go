// Package smallfs gives tests a small filesystem to fill: a tmpfs of a few
// MiB mounted for one test (as root only; a test run as another user is
// skipped), and a way to fill it to the last block, so that a store on it
// meets "no space left on device" and then gets its space back. It
// imports nothing of the project.
package smallfs
