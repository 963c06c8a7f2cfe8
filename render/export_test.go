package render

// ScopedPasses counts the passes of r that were scoped to the Configurations a change reached.
func ScopedPasses(r *Renderer) int { return r.scoped }
