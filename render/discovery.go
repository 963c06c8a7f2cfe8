package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/agent/details"
	"github.com/gitbroker/gitbroker/api"
)

// Discovery in review. What a Configuration asks the agents to discover renders no object by
// itself, so a mistake in it showed nowhere: a handler name no agent serves, details the agent
// refuses on every node, a changed rule that will replace brokers once the agents rediscover.

// checkDiscovery refuses discoveryDetails a built-in handler or Akri's onvif and opcua would
// refuse (with the agent's own parser, and one that reads them as Akri's handlers do) and warns
// about a handler name that is neither built in, nor Akri's, nor listed in gitbroker.yaml.
func (p *pass) checkDiscovery(l *loaded, set *configSet) {
	known := knownHandlers(l.settings.DiscoveryHandlers)
	for _, f := range set.files {
		for _, c := range set.parsed[f].configs {
			h := c.Spec.DiscoveryHandler
			if details.Checked(h.Name) {
				if err := details.Check(h.Name, h.DiscoveryDetails); err != nil {
					who := "the agent"
					if !details.Builtin(h.Name) {
						who = "Akri's " + h.Name + " handler"
					}
					set.errs[f] = append(set.errs[f], c.Doc.Errorf("spec.discoveryHandler.discoveryDetails",
						"%v (%s would refuse it on every node, and discover nothing)", err, who))
				}
				if details.Builtin(h.Name) {
					continue
				}
			}
			if !slices.Contains(known, h.Name) {
				e := c.Doc.Errorf("spec.discoveryHandler.name", "no discovery handler %q is known, so no agent will discover devices for Configuration %s%s (known: %s; list the handlers your fleet runs in gitbroker.yaml spec.discoveryHandlers)",
					h.Name, c.Key(), didYouMean(h.Name, known), strings.Join(known, ", "))
				p.warn("%s", e.Error())
			}
		}
	}
}

// knownHandlers are the handler names plan knows: the agent's own, Akri's and the listed ones.
func knownHandlers(listed []string) []string {
	known := append(details.Names(), listed...)
	sort.Strings(known)
	return slices.Compact(known)
}

// didYouMean suggests the known name nearest to name, when it is a likely typo.
func didYouMean(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// discoveryDigest digests what a Configuration asks the agents to discover: the handler, its
// details and its properties. The metadata file keeps it, so the next plan can say that a change
// to it will replace brokers once the agents rediscover.
func discoveryDigest(c *api.ParsedConfiguration) string {
	b, _ := json.Marshal(c.Spec.DiscoveryHandler) // struct fields in their order: deterministic
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}
