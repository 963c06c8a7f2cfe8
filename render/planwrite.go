package render

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// How a plan is written for people: a headline that counts what changes and what is wrong,
// instances that change the same way grouped with a sample ("2,000 instances: Deployment rolled out:
// image a → b"), and in markdown, each Configuration's details collapsible and the whole bounded
// for a pull-request comment. -o json keeps every instance.

const (
	// groupMin is the fewest instances changing the same way that are written as one group.
	groupMin = 10
	// groupSample is how many of a group's instances are named.
	groupSample = 3
	// MaxMarkdown bounds the markdown plan, below GitHub's 65,536-character comment limit
	// (GitLab's is larger), leaving room for the text around it.
	MaxMarkdown = 60000
)

var actionSigns = map[string]string{Started: "+", Created: "+", Rendered: "+", Updated: "~", RolledOut: "~", Removed: "-", Unrendered: "-", Retired: ">", Held: "=", Kept: "="}

// instanceGroup is instances whose changes are the same but for the objects' names.
type instanceGroup struct {
	instances []*InstancePlan
}

func (g instanceGroup) changes() []Change { return g.instances[0].Changes }

// groupInstances groups a Configuration's instances by what changes for them, in the order of
// their first instance; a group smaller than groupMin is written instance by instance.
func groupInstances(c *ConfigurationPlan) []instanceGroup {
	var groups []instanceGroup
	index := map[string]int{}
	for _, ip := range c.Instances {
		var key strings.Builder
		for _, ch := range ip.Changes {
			fmt.Fprintf(&key, "%s\x00%s\x00%s\x00%t\x00", ch.Kind, ch.Action, ch.Reason, ch.History != "")
		}
		k := key.String()
		if i, ok := index[k]; ok {
			groups[i].instances = append(groups[i].instances, ip)
			continue
		}
		index[k] = len(groups)
		groups = append(groups, instanceGroup{instances: []*InstancePlan{ip}})
	}
	var out []instanceGroup
	for _, g := range groups {
		if len(g.instances) >= groupMin {
			out = append(out, g)
			continue
		}
		for _, ip := range g.instances {
			out = append(out, instanceGroup{instances: []*InstancePlan{ip}})
		}
	}
	return out
}

// sample names the first instances of a group, for a reviewer to look one up.
func (g instanceGroup) sample(quote func(string) string) string {
	var names []string
	for _, ip := range g.instances[:min(groupSample, len(g.instances))] {
		names = append(names, quote(ip.Name))
	}
	more := ""
	if len(g.instances) > groupSample {
		more = ", …"
	}
	return "e.g. " + strings.Join(names, ", ") + more
}

// Headline is the summary with what needs a person: invalid, untrusted and held inputs and
// warnings. "nothing to change" alone would hide an invalid file whose output is kept.
func (p *Plan) Headline() string {
	parts := []string{p.Summary.text()}
	for _, n := range []struct {
		n    int
		what string
	}{
		{len(p.Errors), "invalid input(s), previous output kept"},
		{len(p.Untrusted), "untrusted input(s), previous part kept"},
		{len(p.Warnings), "warning(s)"},
	} {
		if n.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n.n, n.what))
		}
	}
	return strings.Join(parts, "; ")
}

// planStyle is how one format writes a Configuration's notes, changes and instances (grouped):
// the walk is one, the syntax each format's.
type planStyle struct {
	// indent is the instances' indent; their changes are indented once more.
	indent, more string
	note         string // a format for a note
	escape       func(string) string
	instance     func(ip *InstancePlan) string
	group        func(g instanceGroup) string
	change       func(w io.Writer, indent string, ch Change)
}

var textStyle = planStyle{
	indent: "  ", more: "    ", note: "  note: %s\n", escape: printable,
	instance: func(ip *InstancePlan) string {
		return fmt.Sprintf("  instance %s%s\n", ip.Name, instanceDetail(ip, printable))
	},
	group: func(g instanceGroup) string {
		return fmt.Sprintf("  %d instances (%s), each:\n", len(g.instances), g.sample(func(s string) string { return s }))
	},
	change: writeChangeText,
}

var markdownStyle = planStyle{
	indent: "", more: "  ", note: "- note: %s\n", escape: mdText,
	instance: func(ip *InstancePlan) string {
		return fmt.Sprintf("- instance `%s`%s\n", ip.Name, instanceDetail(ip, mdText))
	},
	group: func(g instanceGroup) string {
		return fmt.Sprintf("- **%d instances** (%s), each:\n", len(g.instances), g.sample(func(s string) string { return "`" + s + "`" }))
	},
	change: writeChangeMarkdown,
}

// configuration writes a Configuration's notes, its own changes, then its instances, those that
// change the same way as one group.
func (st planStyle) configuration(w io.Writer, c *ConfigurationPlan) {
	for _, n := range c.Notes {
		fmt.Fprintf(w, st.note, st.escape(n))
	}
	for _, ch := range c.Changes {
		st.change(w, st.indent, ch)
	}
	for _, g := range groupInstances(c) {
		if len(g.instances) == 1 {
			ip := g.instances[0]
			fmt.Fprint(w, st.instance(ip))
			for _, ch := range ip.Changes {
				st.change(w, st.more, ch)
			}
			continue
		}
		fmt.Fprint(w, st.group(g))
		for _, ch := range g.changes() {
			st.change(w, st.more, Change{Action: ch.Action, Kind: ch.Kind, Reason: ch.Reason})
		}
	}
}

// WriteText writes the plan for a terminal.
func (p *Plan) WriteText(w io.Writer) {
	if p.Refused != "" {
		fmt.Fprintf(w, "REFUSED: %s\n\n", p.Refused)
	}
	if len(p.Configurations) == 0 && len(p.Namespaces) == 0 {
		fmt.Fprintln(w, "No changes.")
	}
	if len(p.Clusters) > 0 {
		fmt.Fprintf(w, "Clusters changed: %s\n", strings.Join(p.Clusters, ", "))
	}
	if len(p.Rings) > 0 {
		fmt.Fprintf(w, "Cluster rollout rings: %s\n", ringsText(p.Rings))
	}
	for _, ch := range p.Namespaces {
		writeChangeText(w, "", ch)
	}
	for _, c := range p.Configurations {
		fmt.Fprintf(w, "Configuration %s/%s (%s)%s\n", c.Namespace, c.Name, brokerText(c.Broker), clusterSuffix(c.Cluster))
		textStyle.configuration(w, c)
	}
	// Reported text (device ids in errors, Job failure messages) is quoted when it holds
	// control characters, so it cannot forge lines of the plan or of a commit message.
	for _, e := range p.Errors {
		fmt.Fprintf(w, "error: %s\n", printable(e.Text))
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "warning: %s\n", printable(warn))
	}
	for _, u := range p.Untrusted {
		fmt.Fprintf(w, "untrusted: %s\n", printable(u.Text))
	}
	if p.Trust != "" {
		fmt.Fprintf(w, "Inputs: %s\n", printable(p.Trust))
	}
	fmt.Fprintf(w, "Summary: %s\n", p.Headline())
}

func writeChangeText(w io.Writer, indent string, ch Change) {
	name := " " + ch.Name
	if ch.Name == "" {
		name = ""
	}
	fmt.Fprintf(w, "%s%s %s%s %s%s", indent, actionSigns[ch.Action], ch.Kind, name, ch.Action, clusterSuffix(ch.Cluster))
	if ch.Reason != "" {
		fmt.Fprintf(w, ": %s", printable(ch.Reason))
	}
	fmt.Fprintln(w)
}

// ringsText is the rings of a rollout across clusters, in order: "canary (site-a), rest (site-b, site-c)".
func ringsText(rings []PlanRing) string {
	parts := make([]string, len(rings))
	for i, r := range rings {
		parts[i] = r.Name + " (" + strings.Join(r.Clusters, ", ") + ")"
	}
	return strings.Join(parts, ", then ")
}

// clusterSuffix names the cluster of spec.clusters a part of the plan is in; "" without.
func clusterSuffix(cluster string) string {
	if cluster == "" {
		return ""
	}
	return " in cluster " + cluster
}

func brokerText(b string) string {
	switch b {
	case "Pod":
		return "Pod broker"
	case "Job":
		return "Job broker"
	case "deleted":
		return "deleted"
	case "invalid":
		return "invalid, previous output kept"
	}
	return "no broker"
}

// instanceDetail writes the instance's device and nodes; the device id is what a node reported,
// so it passes through escape (printable for text, mdText for markdown).
func instanceDetail(ip *InstancePlan, escape func(string) string) string {
	var parts []string
	if ip.DeviceID != "" {
		parts = append(parts, "device "+escape(ip.DeviceID))
	}
	if len(ip.Nodes) > 0 {
		parts = append(parts, "nodes "+strings.Join(ip.Nodes, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// WriteMarkdown writes the plan as a pull request comment: the headline and what needs a person
// first, a table by Configuration, then each Configuration's details in a collapsible section,
// all within MaxMarkdown characters (what does not fit is counted, and -o json has it).
func (p *Plan) WriteMarkdown(w io.Writer) {
	var head bytes.Buffer
	if p.Refused != "" {
		fmt.Fprintf(&head, "> **Refused:** %s\n\n", mdText(p.Refused))
	}
	fmt.Fprintf(&head, "**Summary:** %s\n\n", mdText(p.Headline()))
	if len(p.Clusters) > 0 {
		fmt.Fprintf(&head, "**Clusters changed:** %s\n\n", mdText(strings.Join(p.Clusters, ", ")))
	}
	if len(p.Rings) > 0 {
		fmt.Fprintf(&head, "**Cluster rollout rings:** %s\n\n", mdText(ringsText(p.Rings)))
	}
	if p.Trust != "" {
		fmt.Fprintf(&head, "**Inputs:** %s\n\n", mdText(p.Trust))
	}
	writeListMarkdown(&head, "Invalid inputs (their previous output is kept)", texts(p.Errors), mdCode, MaxMarkdown/4)
	writeListMarkdown(&head, "Untrusted inputs (not rendered; each writer's previous part is kept)", texts(p.Untrusted), mdCode, MaxMarkdown/8)
	for _, ch := range p.Namespaces {
		writeChangeMarkdown(&head, "", ch)
	}
	if len(p.Namespaces) > 0 {
		fmt.Fprintln(&head)
	}
	writeConfigurationTable(&head, p.Configurations, MaxMarkdown/4)
	var tail bytes.Buffer
	writeListMarkdown(&tail, "Warnings", p.Warnings, mdText, MaxMarkdown/8)

	budget := MaxMarkdown - head.Len() - tail.Len()
	var body bytes.Buffer
	left := 0
	for i, c := range p.Configurations {
		var sec bytes.Buffer
		writeConfigurationMarkdown(&sec, c)
		if body.Len()+sec.Len() > budget-200 {
			left = len(p.Configurations) - i
			break
		}
		body.Write(sec.Bytes())
	}
	if left > 0 {
		fmt.Fprintf(&body, "_The details of %d more Configuration(s) are left out to keep this comment under %d characters; `gitbroker plan -o json` lists every change._\n\n", left, MaxMarkdown)
	}
	_, _ = w.Write(head.Bytes())
	_, _ = w.Write(body.Bytes())
	_, _ = w.Write(tail.Bytes())
}

func texts(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Text
	}
	return out
}

// writeConfigurationMarkdown writes one Configuration's changes as a collapsible section.
func writeConfigurationMarkdown(w io.Writer, c *ConfigurationPlan) {
	fmt.Fprintf(w, "<details><summary><code>%s/%s</code>%s: %s</summary>\n\n", mdCodeText(c.Namespace), mdCodeText(c.Name), mdCodeText(clusterSuffix(c.Cluster)), tallyText(c))
	markdownStyle.configuration(w, c)
	fmt.Fprint(w, "\n</details>\n\n")
}

// mdCodeText escapes a name for an HTML <code> element.
func mdCodeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(printable(s))
}

// tally counts one Configuration's changes by kind and action, such as "Deployment: 3 rolled out".
func tally(c *ConfigurationPlan) map[string]map[string]int {
	t := map[string]map[string]int{}
	add := func(chs []Change) {
		for _, ch := range chs {
			if t[ch.Kind] == nil {
				t[ch.Kind] = map[string]int{}
			}
			t[ch.Kind][ch.Action]++
		}
	}
	add(c.Changes)
	for _, ip := range c.Instances {
		add(ip.Changes)
	}
	return t
}

var tallyActions = []string{Started, Created, Rendered, Updated, RolledOut, Removed, Unrendered, Retired, Held, Kept}

// brokerCell is kindCell of the broker Deployments, with the bare Pods of older renders that an
// upgrade removes.
func brokerCell(t map[string]map[string]int) string {
	cell := kindCell(t, "Deployment")
	if pods := kindCell(t, "Pod"); pods != "–" {
		cell += "; bare Pods: " + pods
	}
	return cell
}

// kindCell says what happens to one kind, such as "2 created, 1 rolled out", or "–".
func kindCell(t map[string]map[string]int, kind string) string {
	var parts []string
	for _, a := range tallyActions {
		if n := t[kind][a]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// tallyText is a Configuration's changes in one line, for its section's title, such as
// "3 Deployments created, 1 Kustomization created".
func tallyText(c *ConfigurationPlan) string {
	t := tally(c)
	var parts []string
	for _, kind := range []string{"Configuration", "Job", "Deployment", "Pod", "Service", "Kustomization"} {
		for _, a := range tallyActions {
			switch n := t[kind][a]; {
			case n == 1:
				parts = append(parts, fmt.Sprintf("1 %s %s", kind, a))
			case n > 1:
				parts = append(parts, fmt.Sprintf("%d %ss %s", n, kind, a))
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d note(s)", len(c.Notes))
	}
	return strings.Join(parts, ", ")
}

// writeConfigurationTable writes the table of changes by Configuration, one column per kind so
// no count mixes kinds, within limit characters.
func writeConfigurationTable(w io.Writer, configurations []*ConfigurationPlan, limit int) {
	if len(configurations) == 0 {
		return
	}
	var b bytes.Buffer
	fmt.Fprintln(&b, "| Configuration | Broker | Deployments | Jobs | Services | Flux Kustomizations |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	for i, c := range configurations {
		t := tally(c)
		row := fmt.Sprintf("| `%s/%s`%s | %s | %s | %s | %s | %s |\n", c.Namespace, c.Name, clusterSuffix(c.Cluster), brokerText(c.Broker),
			brokerCell(t), kindCell(t, "Job"), kindCell(t, "Service"), kindCell(t, "Kustomization"))
		if b.Len()+len(row) > limit {
			fmt.Fprintf(&b, "| … and %d more | | | | | |\n", len(configurations)-i)
			break
		}
		b.WriteString(row)
	}
	fmt.Fprintln(&b)
	_, _ = w.Write(b.Bytes())
}

// writeListMarkdown writes a titled list, when it has items, within limit characters.
func writeListMarkdown(w io.Writer, title string, items []string, escape func(string) string, limit int) {
	if len(items) == 0 {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "#### %s\n\n", title)
	for i, item := range items {
		line := fmt.Sprintf("- %s\n", escape(item))
		if b.Len()+len(line) > limit {
			fmt.Fprintf(&b, "- … and %d more\n", len(items)-i)
			break
		}
		b.WriteString(line)
	}
	fmt.Fprintln(&b)
	_, _ = w.Write(b.Bytes())
}

func writeChangeMarkdown(w io.Writer, indent string, ch Change) {
	if ch.Name == "" {
		fmt.Fprintf(w, "%s- %s **%s**", indent, ch.Kind, ch.Action)
	} else {
		fmt.Fprintf(w, "%s- %s `%s` **%s**", indent, ch.Kind, ch.Name, ch.Action)
	}
	if ch.Cluster != "" {
		fmt.Fprintf(w, " in cluster `%s`", ch.Cluster)
	}
	if ch.Reason != "" {
		fmt.Fprintf(w, ": %s", mdText(ch.Reason))
	}
	fmt.Fprintln(w)
}
