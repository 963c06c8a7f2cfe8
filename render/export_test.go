package render

// ScopedPasses counts the passes of r that were scoped to the Configurations a change reached.
func ScopedPasses(r *Renderer) int { return r.scoped }

// OutOfScope counts the scoped passes of r that reached further than their Configurations and
// ran again whole.
func OutOfScope(r *Renderer) int { return r.outOfScope }

// RenderedJobs is the count of rendered Jobs r keeps for its next pass, and the same counted
// afresh over its last output; nil when it keeps none.
func RenderedJobs(r *Renderer) (kept, counted map[string]int) {
	if r.scope == nil || r.scope.rendered == nil {
		return nil, nil
	}
	p := &pass{r: New(), prev: r.last.files}
	return r.scope.rendered, p.renderedJobs()
}
