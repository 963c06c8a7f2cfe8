package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// Akri's debugEcho names, kept so Configurations and brokers written for
// Akri work unchanged.
const (
	DebugEchoName = "debugEcho"
	// DebugEchoDescription is the property each device carries.
	DebugEchoDescription = "DEBUG_ECHO_DESCRIPTION"
	// DebugEchoAvailabilityFile is Akri's default availability file.
	DebugEchoAvailabilityFile = "/tmp/debug-echo-availability.txt"
	debugEchoOffline          = "OFFLINE"
)

// DebugEcho is Akri's debugEcho discovery handler: every entry of
// discoveryDetails.descriptions is a device whose id and
// DEBUG_ECHO_DESCRIPTION property are the description, and all of them
// vanish while the availability file contains "OFFLINE".
type DebugEcho struct {
	// Shared marks the devices as visible to several nodes, as Akri's
	// DEBUG_ECHO_INSTANCES_SHARED does.
	Shared bool
	// AvailabilityFile is read on every discovery; a missing file means
	// online.
	AvailabilityFile string
}

type debugEchoDetails struct {
	Descriptions []string `json:"descriptions"`
}

// Discover implements Handler.
func (d DebugEcho) Discover(_ context.Context, req Request) ([]api.Device, error) {
	var details debugEchoDetails
	if err := yaml.Unmarshal([]byte(req.Details), &details); err != nil {
		return nil, fmt.Errorf("debugEcho discoveryDetails: %w", err)
	}
	if details.Descriptions == nil {
		return nil, errors.New("debugEcho discoveryDetails: descriptions is required")
	}
	if d.AvailabilityFile != "" {
		b, err := os.ReadFile(d.AvailabilityFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading debugEcho availability file: %w", err)
		}
		if strings.Contains(string(b), debugEchoOffline) {
			return []api.Device{}, nil
		}
	}
	devices := make([]api.Device, 0, len(details.Descriptions))
	for _, desc := range details.Descriptions {
		devices = append(devices, api.Device{
			ID:         desc,
			Shared:     d.Shared,
			Properties: map[string]string{DebugEchoDescription: desc},
		})
	}
	return devices, nil
}
