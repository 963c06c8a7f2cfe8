// Package house holds the tests that keep the code's house in order (docs/ARCHITECTURE.md,
// "Guards"): no hand-written Go file over 500 lines, and no function of the render packages over
// 100 lines. It has no code of its own.
package house
