// Package gitsync owns every conversation with git: it fetches a branch
// (shallow by default) into memory, reads files at a commit, writes a
// writer's owned paths as one commit built straight from the object store,
// and pushes it with a compare-and-swap on the branch. When the branch moved
// underneath, it fetches again and calls the writer back to recompute its
// files on the new head ("recompute, don't rebase"), with jittered
// exponential backoff bounded in attempts and time. It also reads many refs
// in one fetch (the renderer reads every writer's ref) and walks their
// history with the raw commits a signature is checked against.
//
// Nothing here walks a work tree: a commit touches only the trees on the
// paths it changes, so its cost does not grow with the size of the
// repository. Credentials never appear in errors: every error leaving the
// package is passed through a redactor that knows the configured secrets.
//
// Dir implements the same Store interface over a plain directory, for
// development and for the `--dir` forms of the commands; it does not speak
// git.
package gitsync
