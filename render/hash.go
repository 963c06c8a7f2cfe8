package render

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/gitbroker/gitbroker/api"
)

func propsJSON(m map[string]string) []byte {
	b, _ := json.Marshal(m)
	return b
}

// The hashes of what each kind of object reads from its Configuration. They go into every
// object's gitbroker.dev/inputs-hash and key the memo of built objects, so each covers exactly
// what its builder reads: a change elsewhere in the Configuration (discoveryDetails, capacity,
// another kind's spec) leaves the object, and its file, as they were.

// deploymentHash covers buildDeployment: the PodSpec and the broker properties (the
// environment), and for one cluster of several what its brokers are told of it (clusterEnv).
func deploymentHash(c *api.ParsedConfiguration, cluster map[string]string) []byte {
	if cluster != nil {
		return specHash("deployment", c, c.Spec.BrokerSpec.BrokerPodSpec, c.Spec.BrokerProperties, cluster)
	}
	return specHash("deployment", c, c.Spec.BrokerSpec.BrokerPodSpec, c.Spec.BrokerProperties)
}

// jobHash covers buildJob: the JobSpec, the broker properties and the run policy and runID
// (the Job's name), and the cluster's environment as deploymentHash.
func jobHash(c *api.ParsedConfiguration, cluster map[string]string) []byte {
	if cluster != nil {
		return specHash("job", c, c.Spec.BrokerSpec.BrokerJobSpec, c.Spec.BrokerProperties, c.Policy.RunPolicy, c.Policy.RunID, cluster)
	}
	return specHash("job", c, c.Spec.BrokerSpec.BrokerJobSpec, c.Spec.BrokerProperties, c.Policy.RunPolicy, c.Policy.RunID)
}

// serviceHash covers buildService for one of the Configuration's service specs.
func serviceHash(c *api.ParsedConfiguration, kind string, spec *corev1.ServiceSpec) []byte {
	return specHash(kind, c, spec)
}

func specHash(kind string, c *api.ParsedConfiguration, parts ...any) []byte {
	b, _ := json.Marshal(append([]any{kind, c.Namespace, c.Name}, parts...))
	return []byte(hashHex(32, b))
}
