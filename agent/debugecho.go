package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/gitbroker/gitbroker/agent/details"
	"github.com/gitbroker/gitbroker/api"
)

// Akri's debugEcho names, kept so Configurations and brokers written for
// Akri work unchanged.
const (
	DebugEchoName = details.DebugEcho
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

// Discover implements Handler.
func (d DebugEcho) Discover(_ context.Context, req Request) ([]api.Device, error) {
	spec, err := details.ParseDebugEcho(req.Details)
	if err != nil {
		return nil, err
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
	devices := make([]api.Device, 0, len(spec.Descriptions))
	for _, desc := range spec.Descriptions {
		devices = append(devices, api.Device{
			ID:         desc,
			Shared:     d.Shared,
			Properties: map[string]string{DebugEchoDescription: desc},
		})
	}
	return devices, nil
}
