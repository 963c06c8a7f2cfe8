package render

import (
	"sort"
	"strings"

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

// IsInput reports whether a path is an input of the renderer.
func IsInput(p string) bool {
	return p == "gitbroker.yaml" || isConfigurationPath(p) || isInventoryPath(p) || isRecordPath(p) || api.IsNodeLossPath(p) || api.IsRolloutPath(p)
}

func isConfigurationPath(p string) bool { return api.IsConfigurationPath(p) }

func isInventoryPath(p string) bool { return api.IsInventoryPath(p) }

func isRecordPath(p string) bool {
	return strings.HasPrefix(p, api.JobRecordsDir+"/") && strings.HasSuffix(p, ".yaml")
}

func sortedStrings(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
