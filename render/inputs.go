package render

import (
	"sort"

	"github.com/gitbroker/gitbroker/api"
)

type parsedConfigFile struct {
	configs []*api.ParsedConfiguration
	errs    api.ErrorList
}

type parsedInventoryFile struct {
	inv  *api.ParsedInventory
	errs api.ErrorList
}

type parsedRecordFile struct {
	rec  *api.ParsedJobRecord
	errs api.ErrorList
}

// IsInput reports whether a path is an input of the renderer: the settings, a Configuration, an
// inventory, or a record of any of the recorder's kinds (api.StatusKinds).
func IsInput(p string) bool {
	return p == api.SettingsPath || isConfigurationPath(p) || isInventoryPath(p) || api.IsStatusPath(p) || isClusterRecordPath(p)
}

// isClusterRecordPath reports whether p is a record of one cluster's recorder, with
// spec.clusters (status/<cluster>/...).
func isClusterRecordPath(p string) bool {
	_, _, ok := api.SplitClusterStatusPath(p)
	return ok
}

func isConfigurationPath(p string) bool { return api.IsConfigurationPath(p) }

func isInventoryPath(p string) bool { return api.IsInventoryPath(p) }

func isRecordPath(p string) bool { return api.IsJobRecordPath(p) }

func sortedStrings(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
