package render

import (
	"fmt"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

func (p *pass) loadRecords(l *loaded) {
	l.records = map[string]*api.JobRecord{}
	l.recordBytes = map[string][]byte{}
	l.byDevice = map[string][]*api.JobRecord{}
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isRecordPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
		}
	}
	// Every Job of prev is looked for only when there is a record to check.
	var rendered map[string]int
	for _, f := range p.inputPaths() {
		if !isRecordPath(f) {
			continue
		}
		data := p.req.Files[f]
		parsed := p.r.recs.get(f, data, func() parsedRecordFile {
			rec, errs := api.ParseJobRecordFile(f, data)
			return parsedRecordFile{rec: rec, errs: errs}
		})
		if len(parsed.errs) > 0 {
			p.errs = append(p.errs, parsed.errs...)
			continue
		}
		k := parsed.rec.Namespace + "/" + parsed.rec.Name
		if rendered == nil {
			rendered = p.renderedJobs()
			l.rendered = rendered
		}
		if p.req.RenderedJobsOnly && rendered[k] == 0 {
			l.ignoredRecords = append(l.ignoredRecords, recordProblem(f, fmt.Sprintf("the Job %s was never rendered here; the record is ignored", k)))
			continue
		}
		// A work tree's record of a Job it never rendered is taken as written (its files are
		// the people's); one of a Job it rendered must agree with that Job, in every form.
		if rendered[k] > 0 {
			if field, why := p.recordMismatch(l, parsed.rec.JobRecord); why != "" {
				if p.req.RenderedJobsOnly {
					l.ignoredRecords = append(l.ignoredRecords, recordProblem(f, why+"; the record is ignored"))
				} else {
					p.errs = append(p.errs, fieldErrorAt(f, data, field, why+"; the record is ignored"))
				}
				continue
			}
		}
		l.records[k] = parsed.rec.JobRecord
		l.recordBytes[k] = data
	}
	for _, f := range p.prevHistoryPaths() {
		h := p.history(f)
		if h.err != nil || h.entry == nil || h.entry.record == nil {
			continue
		}
		k := h.entry.namespace + "/" + h.entry.job
		if _, ok := l.records[k]; !ok {
			l.records[k] = h.entry.record
		}
	}
	for _, k := range sortedKeys(l.records) {
		rec := l.records[k]
		dk := rec.Namespace + "/" + rec.Spec.Configuration + "/" + rec.Spec.DeviceID
		l.byDevice[dk] = append(l.byDevice[dk], rec)
	}
}

// recordMismatch says how a record disagrees with the Job it names, as the renderer rendered
// it (its Configuration, instance and device), or "" when it agrees: a record may retire, and
// release the Pods waiting on, only the very Job it is the outcome of. The Job is looked for
// where the record's own claims put it (history/ by its path, rendered/ in the claimed
// Configuration's folder), so a record that claims another Configuration finds nothing.
func (p *pass) recordMismatch(l *loaded, rec *api.JobRecord) (field, why string) {
	ns, name, cfgName, inst := rec.Namespace, rec.Name, rec.Spec.Configuration, rec.Spec.Instance
	if _, ok := p.prev[historyPath(ns, cfgName, inst, name)]; ok {
		h := p.history(historyPath(ns, cfgName, inst, name))
		if h.err == nil && h.entry != nil && h.entry.record != nil && h.entry.record.Spec.DeviceID != rec.Spec.DeviceID {
			return "spec.deviceID", fmt.Sprintf("it names device %q, but the Job %s/%s ran for device %q", rec.Spec.DeviceID, ns, name, h.entry.record.Spec.DeviceID)
		}
		return "", ""
	}
	var candidates []string
	if cfg, ok := l.configs[ns+"/"+cfgName]; ok {
		candidates = append(candidates, p.instanceFolder(cfg, inst)+"/job-"+name+".yaml")
	}
	candidates = append(candidates, configFolder(ns, cfgName)+"/job-"+name+".yaml")
	file := ""
	for _, c := range candidates {
		if _, ok := p.prev[c]; ok {
			file = c
			break
		}
	}
	if file == "" {
		// Shards that changed since: look through the claimed Configuration's folder.
		prefix, suffix := configFolder(ns, cfgName)+"/", "/job-"+name+".yaml"
		for f := range p.prev {
			if strings.HasPrefix(f, prefix) && strings.HasSuffix(f, suffix) && strings.Count(f[len(prefix):], "/") == 1 {
				file = f
				break
			}
		}
	}
	if file == "" {
		return "spec.configuration", fmt.Sprintf("it names Configuration %s and instance %s, but the Job %s/%s was not rendered for them", cfgName, inst, ns, name)
	}
	h := p.head(file, p.prev[file])
	if h.err != nil {
		return "metadata.name", fmt.Sprintf("the Job %s/%s it names cannot be read", ns, name)
	}
	jns := h.Metadata.Namespace
	if jns == "" {
		jns = ns
	}
	switch {
	case jns != ns || h.Metadata.Name != name:
		return "metadata.name", fmt.Sprintf("it names the Job %s/%s, but %s holds %s/%s", ns, name, file, jns, h.Metadata.Name)
	case h.Metadata.Labels[api.LabelConfiguration] != cfgName:
		return "spec.configuration", fmt.Sprintf("it names Configuration %s, but the Job %s/%s belongs to %q", cfgName, ns, name, h.Metadata.Labels[api.LabelConfiguration])
	case h.Metadata.Labels[api.LabelInstance] != inst:
		return "spec.instance", fmt.Sprintf("it names instance %s, but the Job %s/%s ran for instance %q", inst, ns, name, h.Metadata.Labels[api.LabelInstance])
	case h.Metadata.Annotations[api.AnnotationDeviceID] != rec.Spec.DeviceID:
		return "spec.deviceID", fmt.Sprintf("it names device %q, but the Job %s/%s ran for device %q", rec.Spec.DeviceID, ns, name, h.Metadata.Annotations[api.AnnotationDeviceID])
	}
	return "", ""
}

// fieldErrorAt is an error at field of a one-document file, with the field's line when the
// file parses.
func fieldErrorAt(file string, data []byte, field, msg string) *api.FieldError {
	e := &api.FieldError{File: file, Field: field, Message: msg}
	if docs, err := api.SplitDocuments(file, data); err == nil && len(docs) == 1 {
		e.Line = docs[0].LineOf(field)
	}
	return e
}

// renderedJobs is every Job (namespace/name) in the previous rendered/ and history/.
// Each counts the files that name the Job (a kept Renderer brings the count up to date with
// each render's diff: keepScope).
func (p *pass) renderedJobs() map[string]int {
	if p.scoping.onLast && p.r.scope != nil && p.r.scope.rendered != nil {
		return p.r.scope.rendered
	}
	out := map[string]int{}
	for f, data := range p.prev {
		if job, ok := p.jobOf(f, data); ok {
			out[job]++
		}
	}
	return out
}

// jobOf is the Job (namespace/name) a file of rendered/ or history/ holds, if it holds one.
func (p *pass) jobOf(f string, data []byte) (string, bool) {
	if ref, ok := parseObjectPath(f); ok && ref.kind == "job" {
		h := p.head(f, data)
		if h.err != nil || h.Metadata.Name == "" {
			return "", false
		}
		ns := h.Metadata.Namespace
		if ns == "" {
			ns = ref.namespace
		}
		return ns + "/" + h.Metadata.Name, true
	}
	if strings.HasPrefix(f, historyJobsDir) {
		if h := p.historyOf(f, data); h.err == nil && h.entry != nil {
			return h.entry.namespace + "/" + h.entry.job, true
		}
	}
	return "", false
}

func (p *pass) history(f string) historyParse { return p.historyOf(f, p.prev[f]) }

func (p *pass) historyOf(f string, data []byte) historyParse {
	return p.r.hist.get(f, data, func() historyParse {
		e, err := parseHistory(f, data)
		return historyParse{entry: e, err: err}
	})
}

func (p *pass) head(f string, data []byte) *objectHead {
	return p.r.heads.get(f, data, func() *objectHead { return parseHead(data) })
}
