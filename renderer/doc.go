// Package renderer owns the render daemon, beside agent and recorder: one render of every
// writer's ref committed to gitbroker/rendered (Renderer.Once: verify.Collect, the kept
// render.Renderer, one gitsync write, the folder branches moved with it, and the verified
// Configurations published for the agents on gitbroker/configurations), the loop that repeats
// it with probes' state and Prometheus metrics (Daemon), and the leader election Lease that
// also remembers the commit pushed last (Daemon.Lead). What a render decides is in render and
// verify; what it writes goes through gitsync; the command only parses flags and opens remotes.
package renderer
