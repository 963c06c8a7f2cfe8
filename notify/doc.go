// Package notify owns the push notifications that make the loop take seconds instead of
// intervals (DESIGN.md, "Seconds, not minutes"), both ways round:
//
//   - Hook is the render daemon's one endpoint for notifications in: a git host's push webhook
//     (GitHub, GitLab, Gitea/Forgejo), a generic HMAC-signed call (the agents' nudge after their
//     own push, a post-receive hook), authenticated, bounded, rate-limited. A notification
//     carries no trust: an accepted one only wakes the renderer to fetch, and many coalesce
//     into one render (the daemon's wake is a channel of one).
//   - Nudge is the agents' notification after each push of their ref.
//   - FluxReceiver and ArgoCD tell the GitOps tool, after each render that lands, which of its
//     sources moved: Flux's notification-controller Receiver (generic-hmac) and Argo CD's
//     webhook (GitHub's push form).
//
// Intervals stay the safety net: a notification lost, refused or never configured costs
// latency, never correctness.
package notify
