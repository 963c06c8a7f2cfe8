// Package details owns the table of the discovery handlers gitbroker knows (Handlers: each
// one's name, whether the agent serves it itself, and its discoveryDetails check), which the
// agent, the renderer and review read, and the discoveryDetails parsers of the built-in
// handlers (udev and debugEcho) and of Akri's own handler containers (onvif and opcua) as their
// parsers read them. The agent discovers with what they return, and the renderer refuses at
// review, with the same parser, what the agent or Akri's handler would refuse on every node.
package details

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// The built-in handlers' names, as Akri spells them.
const (
	Udev      = "udev"
	DebugEcho = "debugEcho"
)

// Akri's own handler containers, which register over its gRPC protocol.
const (
	ONVIF = "onvif"
	OPCUA = "opcua"
)

// FilterList is Akri's filter of discovered values (akri-discovery-utils' FilterList): items is
// required, action is Include (the default) or Exclude.
type FilterList struct {
	Items  []string `json:"items"`
	Action string   `json:"action,omitempty"`
}

func (f *FilterList) check(field string) error {
	if f == nil {
		return nil
	}
	if f.Items == nil {
		return fmt.Errorf("%s.items is required (a list of values, which action %s)", field, "Include or Exclude")
	}
	switch f.Action {
	case "", "Include", "Exclude":
		return nil
	}
	return fmt.Errorf("%s.action is %q; Akri knows Include and Exclude (capitalized)", field, f.Action)
}

// ONVIFDetails are Akri's onvif handler's discoveryDetails (OnvifDiscoveryDetails); as there,
// every field is optional and fields it does not know are ignored.
type ONVIFDetails struct {
	IPAddresses             *FilterList `json:"ipAddresses,omitempty"`
	MACAddresses            *FilterList `json:"macAddresses,omitempty"`
	Scopes                  *FilterList `json:"scopes,omitempty"`
	DiscoveryTimeoutSeconds *int32      `json:"discoveryTimeoutSeconds,omitempty"`
}

// ParseONVIF reads onvif's discoveryDetails as Akri's handler does.
func ParseONVIF(details string) (*ONVIFDetails, error) {
	var d ONVIFDetails
	if err := yaml.Unmarshal([]byte(details), &d); err != nil {
		return nil, fmt.Errorf("onvif discoveryDetails: %w", err)
	}
	for field, f := range map[string]*FilterList{"ipAddresses": d.IPAddresses, "macAddresses": d.MACAddresses, "scopes": d.Scopes} {
		if err := f.check(field); err != nil {
			return nil, fmt.Errorf("onvif discoveryDetails: %w", err)
		}
	}
	return &d, nil
}

// OPCUADetails are Akri's opcua handler's discoveryDetails (OpcuaDiscoveryDetails): a
// discovery method, of which Akri knows standard (a list of DiscoveryURLs, the host's local
// discovery server when empty), and an optional filter of application names.
type OPCUADetails struct {
	OPCUADiscoveryMethod *struct {
		Standard *struct {
			DiscoveryURLs []string `json:"discoveryUrls,omitempty"`
		} `json:"standard,omitempty"`
	} `json:"opcuaDiscoveryMethod"`
	ApplicationNames *FilterList `json:"applicationNames,omitempty"`
}

// ParseOPCUA reads opcua's discoveryDetails as Akri's handler does.
func ParseOPCUA(details string) (*OPCUADetails, error) {
	var d OPCUADetails
	if err := yaml.Unmarshal([]byte(details), &d); err != nil {
		return nil, fmt.Errorf("opcua discoveryDetails: %w", err)
	}
	switch {
	case d.OPCUADiscoveryMethod == nil:
		return nil, errors.New("opcua discoveryDetails: opcuaDiscoveryMethod is required (standard: {discoveryUrls: [...]})")
	case d.OPCUADiscoveryMethod.Standard == nil:
		return nil, errors.New("opcua discoveryDetails: opcuaDiscoveryMethod names no method Akri knows (standard)")
	}
	if err := d.ApplicationNames.check("applicationNames"); err != nil {
		return nil, fmt.Errorf("opcua discoveryDetails: %w", err)
	}
	return &d, nil
}

// DebugEchoDetails are debugEcho's discoveryDetails: each description is a device.
type DebugEchoDetails struct {
	Descriptions []string `json:"descriptions"`
}

// ParseDebugEcho reads debugEcho's discoveryDetails.
func ParseDebugEcho(details string) (*DebugEchoDetails, error) {
	var d DebugEchoDetails
	if err := yaml.Unmarshal([]byte(details), &d); err != nil {
		return nil, fmt.Errorf("debugEcho discoveryDetails: %w", err)
	}
	if d.Descriptions == nil {
		return nil, errors.New("debugEcho discoveryDetails: descriptions is required")
	}
	return &d, nil
}

// UdevDetails are udev's discoveryDetails: a device matching any rule is discovered.
type UdevDetails struct {
	Rules [][]UdevMatch
	// GroupRecursive groups matched devices under their top-most matched ancestor, as Akri's
	// groupRecursive does.
	GroupRecursive bool
	// Permissions are the cgroup permissions of the device nodes given to a broker: r, w and m,
	// "rwm" unless set (Akri's permissions, which its Helm chart always sets).
	Permissions string
}

// UdevMatch is one match key of a udev rule, such as KERNEL=="video*" or ATTRS{idVendor}!="046d".
type UdevMatch struct {
	Field   string // KERNEL, ATTR, ...
	Attr    string // the {…} part
	Negate  bool
	Pattern *regexp.Regexp
}

type udevDetails struct {
	UdevRules       []string `json:"udevRules"`
	GroupRecursive  bool     `json:"groupRecursive,omitempty"`
	Permissions     *string  `json:"permissions,omitempty"`
	VFIOPassthrough bool     `json:"vfioPassthrough,omitempty"`
}

// ParseUdev reads udev's discoveryDetails: udevRules, each a udev rule of match keys (KERNEL,
// SUBSYSTEM, DRIVER, DEVPATH, TAG, ATTR{…}, ENV{…} and the parent-walking KERNELS, SUBSYSTEMS,
// DRIVERS, ATTRS{…}, TAGS, with == or != and glob patterns).
func ParseUdev(details string) (*UdevDetails, error) {
	var raw udevDetails
	if err := yaml.UnmarshalStrict([]byte(details), &raw); err != nil {
		return nil, fmt.Errorf("udev discoveryDetails: %w", err)
	}
	if raw.UdevRules == nil {
		return nil, errors.New("udev discoveryDetails: udevRules is required")
	}
	if raw.VFIOPassthrough {
		return nil, errors.New("udev discoveryDetails: vfioPassthrough is not supported by gitbroker's built-in udev handler " +
			"(a VFIO device needs its IOMMU group's /dev/vfio nodes, which it does not compute); " +
			"run Akri's udev discovery handler container for such devices, with a discoveryHandler name of its own")
	}
	d := &UdevDetails{Rules: make([][]UdevMatch, len(raw.UdevRules)), GroupRecursive: raw.GroupRecursive, Permissions: "rwm"}
	if raw.Permissions != nil {
		p := *raw.Permissions
		if p == "" || strings.Trim(p, "rwm") != "" || len(p) > 3 {
			return nil, fmt.Errorf("udev discoveryDetails: permissions %q: want one or more of r, w and m (such as \"rw\" or \"rwm\")", p)
		}
		d.Permissions = p
	}
	for i, r := range raw.UdevRules {
		m, err := parseUdevRule(r)
		if err != nil {
			return nil, fmt.Errorf("udev discoveryDetails: udevRules[%d]: %w", i, err)
		}
		d.Rules[i] = m
	}
	return d, nil
}

var (
	udevKeyRe = regexp.MustCompile(`^\s*([A-Z]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"([^"]*)"\s*(?:,|$)`)
	// udevFields lists the match keys and whether they take {attr}.
	udevFields = map[string]bool{
		"DEVPATH": false, "KERNEL": false, "KERNELS": false, "SUBSYSTEM": false, "SUBSYSTEMS": false,
		"DRIVER": false, "DRIVERS": false, "TAG": false, "TAGS": false,
		"ATTR": true, "ATTRS": true, "ENV": true,
	}
)

// parseUdevRule parses one udev rule into its match keys. Assignment keys and operators are
// refused, as Akri does: discovery only matches.
func parseUdevRule(rule string) ([]UdevMatch, error) {
	rest := strings.TrimSpace(rule)
	if rest == "" {
		return nil, errors.New("empty udev rule")
	}
	var out []UdevMatch
	for rest != "" {
		m := udevKeyRe.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot parse udev rule %q near %q: expected KEY==\"value\" or KEY!=\"value\"", rule, rest)
		}
		field, attr, op, value := m[1], m[2], m[3], m[4]
		takesAttr, known := udevFields[field]
		switch {
		case !known:
			return nil, fmt.Errorf("udev rule %q: unsupported field %s (supported: DEVPATH, KERNEL, KERNELS, SUBSYSTEM, SUBSYSTEMS, DRIVER, DRIVERS, TAG, TAGS, ATTR{…}, ATTRS{…}, ENV{…})", rule, field)
		case takesAttr && attr == "":
			return nil, fmt.Errorf("udev rule %q: %s needs a {name}", rule, field)
		case !takesAttr && strings.Contains(m[0][:strings.Index(m[0], op)], "{"):
			return nil, fmt.Errorf("udev rule %q: %s takes no {name}", rule, field)
		case op != "==" && op != "!=":
			return nil, fmt.Errorf("udev rule %q: %s%s is an assignment; discovery rules only match with == or !=", rule, field, op)
		}
		re, err := globRegexp(value)
		if err != nil {
			return nil, fmt.Errorf("udev rule %q: pattern %q: %w", rule, value, err)
		}
		out = append(out, UdevMatch{Field: field, Attr: attr, Negate: op == "!=", Pattern: re})
		rest = strings.TrimSpace(rest[len(m[0]):])
	}
	return out, nil
}

// globRegexp turns a udev pattern (*, ?, [...], alternatives with |) into an anchored regular
// expression. Unlike shell globs, * crosses "/", as in udev.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^(?:")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '|':
			b.WriteString("|")
		case '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 0 {
				return nil, errors.New("unclosed [")
			}
			class := pattern[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(")$")
	return regexp.Compile(b.String())
}
