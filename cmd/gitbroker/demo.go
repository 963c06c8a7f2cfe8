package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

func newDemoCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole loop on an embedded repository, with no cluster and no network",
		Example: `  gitbroker demo
  gitbroker demo --out /tmp/gitbroker-demo    # keep the repository of the last step`,
		Long: `Demo renders an embedded GitOps repository step by step and prints the plan of each step:
the first render; a Configuration change whose new Job is held behind the running one; Job
records arriving, which retire Jobs to history/, start the next run and release a Pod broker waiting
with after:; and devices vanishing. The agent's and the recorder's writes are simulated by
editing the repository's files between renders. The last step runs on a real repository in a
temporary folder (git's file transport): every writer signs, and the renderer renders an
enrolled node but neither an unenrolled one nor a forgery.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			repo, err := readFS(fixtures.Demo())
			if err != nil {
				return err
			}
			d := &demo{w: cmd.OutOrStdout(), repo: repo, r: render.New()}
			if err := d.run(); err != nil {
				return err
			}
			if out != "" {
				if err := writeAll(out, d.repo); err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\nThe repository after the last step is in %s\n", out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, flagOut, "", "write the repository after the last step to this directory")
	return cmd
}

type demo struct {
	w    io.Writer
	repo render.Tree
	r    *render.Renderer
	step int
}

func (d *demo) run() error {
	d.say("The repository: %s", strings.Join(inputPaths(d.repo), ", "))
	if err := d.render("First render: Pod brokers for akri-debug-echo on edge-a and edge-b (foo0 is shared, bar0 is not), a firmware Job for plc-1, the Once journal-format Job for disk-7; the journal-reader broker waits (after: journal-format)"); err != nil {
		return err
	}

	if err := d.edit("configurations/plc-firmware.yaml", `FIRMWARE_VERSION: "4.2.0"`, `FIRMWARE_VERSION: "4.3.0"`); err != nil {
		return err
	}
	if err := d.render("A person commits firmware 4.3.0: the new run is held behind the running 4.2.0 Job (concurrency: Forbid)"); err != nil {
		return err
	}

	if err := d.recordRunningJobs(); err != nil {
		return err
	}
	if err := d.render("The recorder writes JobRecords for the finished Jobs: they move to history/, the 4.3.0 run starts, and the journal-reader broker (a Deployment) appears because journal-format succeeded on disk-7"); err != nil {
		return err
	}
	runs, _ := render.Runs(d.repo, render.RunFilter{DeviceID: "plc-1"})
	d.say("What ran on plc-1, from its history entry, after its Pods are long gone (gitbroker history --device plc-1):")
	fmt.Fprintln(d.w)
	render.WriteRuns(d.w, runs, 5)

	if err := d.edit("inventory/edge-a.yaml", "    - id: bar0\n      properties:\n        DEBUG_ECHO_DESCRIPTION: bar0\n", ""); err != nil {
		return err
	}
	if err := d.edit("inventory/edge-a.yaml", "  - name: plc-firmware\n    namespace: plant\n    devices:\n    - id: plc-1\n      shared: true\n      properties:\n        DEBUG_ECHO_DESCRIPTION: plc-1\n", ""); err != nil {
		return err
	}
	if err := d.render("The agent on edge-a stops seeing bar0 and plc-1: bar0's broker Deployment and Service go; the 4.3.0 Job stays, because it may still be running"); err != nil {
		return err
	}

	d.say("Files under rendered/ and history/ now:")
	for _, p := range d.repo.Owned().Paths() {
		fmt.Fprintf(d.w, "  %s\n", p)
	}
	return d.trustStep(context.Background())
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.w, format+"\n", args...)
}

func (d *demo) render(title string) error {
	d.step++
	fmt.Fprintf(d.w, "\n== Step %d: %s\n\n", d.step, title)
	res := d.r.Render(render.Request{Files: d.repo})
	res.Plan.WriteText(d.w)
	if len(res.Errors) > 0 {
		return &exitError{Code: exitInvalid, Err: res.Errors}
	}
	if res.Refused != nil {
		return &exitError{Code: exitRefused, Err: res.Refused}
	}
	for p := range d.repo.Owned() {
		delete(d.repo, p)
	}
	for p, b := range res.Files {
		d.repo[p] = b
	}
	return nil
}

func (d *demo) edit(path, old, new string) error {
	data, ok := d.repo[path]
	if !ok || !bytes.Contains(data, []byte(old)) {
		return fmt.Errorf("demo: %s does not contain the text to change", path)
	}
	d.repo[path] = bytes.Replace(data, []byte(old), []byte(new), 1)
	fmt.Fprintf(d.w, "\n(edited %s)\n", path)
	return nil
}

// recordRunningJobs does what the recorder does when the Jobs in the cluster finish.
func (d *demo) recordRunningJobs() error {
	start := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	done := metav1.NewTime(start.Add(90 * time.Second))
	for _, p := range d.repo.Paths() {
		if !strings.HasPrefix(p, render.RenderedDir) || !strings.Contains(p, "/job-") {
			continue
		}
		var job struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     batchv1.JobSpec   `json:"spec"`
		}
		if err := yaml.Unmarshal(d.repo[p], &job); err != nil {
			return fmt.Errorf("demo: reading %s: %w", p, err)
		}
		rec := api.JobRecord{
			TypeMeta:   metav1.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindJobRecord},
			ObjectMeta: metav1.ObjectMeta{Name: job.Metadata.Name, Namespace: job.Metadata.Namespace},
			Spec: api.JobRecordSpec{
				Configuration:  job.Metadata.Labels[api.LabelConfiguration],
				Instance:       job.Metadata.Labels[api.LabelInstance],
				DeviceID:       job.Metadata.Annotations[api.AnnotationDeviceID],
				RenderedFrom:   job.Metadata.Annotations[api.AnnotationRenderedFrom],
				Outcome:        api.OutcomeSucceeded,
				StartTime:      &start,
				CompletionTime: &done,
				Succeeded:      1,
			},
		}
		rec.Spec.Pods = []api.PodRecord{demoPod(rec.Name, job.Metadata.Annotations, &job.Spec, start, done)}
		data, err := yaml.Marshal(rec)
		if err != nil {
			return err
		}
		rp := api.JobRecordPath(rec.Namespace, rec.Name)
		d.repo[rp] = data
		fmt.Fprintf(d.w, "\n(the recorder wrote %s: %s)\n", rp, rec.Spec.Outcome)
	}
	return nil
}

// demoPod is the Pod the recorder would find of a demo Job: run on the Job's node, each container
// ended well, and, when the Configuration asks for logs, the line its echo command prints.
func demoPod(job string, ann map[string]string, spec *batchv1.JobSpec, start, done metav1.Time) api.PodRecord {
	ps := spec.Template.Spec
	p := api.PodRecord{Name: job + "-demo1", Phase: "Succeeded"}
	if a := ps.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if len(f.Values) > 0 && p.Node == "" {
					p.Node = f.Values[0]
				}
			}
		}
	}
	logs, _ := api.LogPolicyFromAnnotations(ann)
	for _, c := range ps.Containers {
		code := int32(0)
		cr := api.ContainerRecord{Name: c.Name, ExitCode: &code, Reason: "Completed", StartedAt: &start, FinishedAt: &done}
		if logs != nil && len(c.Command) > 0 {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			script := c.Command[len(c.Command)-1]
			if msg, ok := strings.CutPrefix(os.Expand(script, func(k string) string { return env[k] }), "echo "); ok {
				cr.SetLog([]byte(msg + "\n"))
			}
		}
		p.Containers = append(p.Containers, cr)
	}
	return p
}

func inputPaths(t render.Tree) []string {
	var out []string
	for _, p := range t.Paths() {
		if render.IsInput(p) {
			out = append(out, p)
		}
	}
	return out
}
