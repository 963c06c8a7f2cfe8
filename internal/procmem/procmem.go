// Package procmem owns what the tests compare a real process's memory with: its peak resident
// memory, and the memory limit deploy/ gives the workload it runs as (docs/TRUST.md, "every
// process stays inside its deploy/ memory limit").
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Peak is a running process's peak resident memory in bytes (VmHWM in /proc/<pid>/status): the
// high-water mark of its own address space. getrusage's maxrss would not do for a child of a
// test, as Linux carries the parent's high-water mark across fork and exec.
func Peak(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}

// DeployLimit is the memory limit, in bytes, of the one container of a deploy/ workload
// manifest (a Deployment or a DaemonSet).
func DeployLimit(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var w struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &w); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if n := len(w.Spec.Template.Spec.Containers); n != 1 {
		return 0, fmt.Errorf("%s: %d containers, expected one", path, n)
	}
	limit := w.Spec.Template.Spec.Containers[0].Resources.Limits.Memory()
	if limit.IsZero() {
		return 0, fmt.Errorf("%s sets no memory limit", path)
	}
	return limit.Value(), nil
}
