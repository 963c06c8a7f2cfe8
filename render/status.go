package render

import "github.com/gitbroker/gitbroker/api"

// loadStatus reads the records of one of the recorder's kinds (api.StatusKinds) from the
// inputs, in path order: each is parsed by parse and handed to add. A file that cannot be read
// or does not parse is an error naming it, and is handed to add as nil, for a kind whose
// invalid record still says something (a rollout that is not known to be Available).
func loadStatus[R any](p *pass, isPath func(string) bool, parse func(file string, data []byte) (*R, api.ErrorList), add func(file string, r *R)) {
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
		}
	}
	for _, f := range p.inputPaths() {
		if !isPath(f) {
			continue
		}
		r, errs := parse(f, p.req.Files[f])
		if len(errs) > 0 {
			p.errs = append(p.errs, errs...)
			add(f, nil)
			continue
		}
		add(f, r)
	}
}

// followedKinds are the recorder's kinds whose change a scoped pass follows to the
// Configurations it reaches (scopeFor): a JobRecord to its Job's, a RolloutRecord to its
// Deployment's. A change to any other kind's records renders the pass whole, so a kind added
// to api.StatusKinds is never missed by a scoped pass, only rendered at a whole pass's cost
// until scopeFor learns where it reaches.
var followedKinds = map[string]bool{api.KindJobRecord: true, api.KindRolloutRecord: true}

// unfollowedStatus are the inputs of the recorder's kinds a scoped pass does not follow, by
// path.
func (p *pass) unfollowedStatus() map[string][]byte {
	out := map[string][]byte{}
	for _, f := range p.inputPaths() {
		if k, ok := api.StatusKindOf(f); ok && !followedKinds[k.Kind] {
			out[f] = p.req.Files[f]
		}
	}
	return out
}
