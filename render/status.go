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
