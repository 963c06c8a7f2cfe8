package render

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
)

// A built object is looked up in the memo by the hash of what its builder reads, so a builder
// that reads something its hash does not cover serves a stale object from a kept Renderer when
// only that thing changes. These tests change every field of a Configuration, one at a time, and
// every field of an instance, and fail when a builder's output changes while its key does not.

const hashPodConfiguration = `apiVersion: gitbroker.dev/v1alpha1
kind: Configuration
metadata:
  name: cam
  namespace: plant
  labels: {team: vision}
  annotations: {note: kept, gitbroker.dev/offline-grace-period: 5m}
spec:
  capacity: 2
  shards: 2
  allowedDeviceProperties: [SERIAL]
  discoveryHandler:
    name: onvif
    discoveryDetails: "ipAddresses: {action: Exclude, items: []}"
    discoveryProperties:
    - name: user
      value: admin
  brokerProperties: {RESOLUTION: "1080"}
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: ghcr.io/project-akri/akri/onvif-video-broker:latest
        resources:
          limits: {"{{PLACEHOLDER}}": "1", cpu: 100m}
  instanceServiceSpec:
    type: ClusterIP
    ports: [{name: grpc, port: 80, targetPort: 8083}]
  configurationServiceSpec:
    type: ClusterIP
    ports: [{name: grpc, port: 80, targetPort: 8083}]
`

const hashJobConfiguration = `apiVersion: gitbroker.dev/v1alpha1
kind: Configuration
metadata:
  name: firmware
  namespace: plant
spec:
  capacity: 1
  discoveryHandler: {name: debugEcho, discoveryDetails: "descriptions: [a]"}
  brokerProperties: {VERSION: "2"}
  jobPolicy: {runPolicy: OnChange, concurrency: Allow, historyLimit: 3, runID: r1, logs: {tailLines: 20}}
  brokerSpec:
    brokerJobSpec:
      backoffLimit: 1
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: flash
            image: busybox:1.36
            command: [sh, -c, "echo $VERSION"]
`

func parsedConfiguration(t *testing.T, doc string) *api.ParsedConfiguration {
	t.Helper()
	cfgs, errs := api.ParseConfigurations("configurations/c.yaml", []byte(doc), "default")
	if len(errs) > 0 || len(cfgs) != 1 {
		t.Fatalf("parsing the test Configuration: %v", errs)
	}
	return cfgs[0]
}

func hashInstance(cfg *api.ParsedConfiguration) *instance {
	return &instance{cfg: cfg, name: cfg.Name + "-a1b2c3", digest: "a1b2c3", deviceID: "dev-1",
		nodes: []string{"edge-a", "edge-b"}, properties: map[string]string{"SERIAL": "42"}, folder: "rendered/plant/" + cfg.Name}
}

// builder is one kind of object: what it writes and the memo key it is looked up by.
type builder struct {
	name  string
	build func(in *instance) []byte
	key   func(in *instance) string
	// least is how many changes of the Configuration must change what it builds (default 20):
	// DRA's objects read only its name, namespace, capacity and how much of the device a broker asks for.
	least int
}

// The keys are worked out as the render works them out: podInputs and instanceJobHash.
var hashBuilders = []builder{
	{"Deployment", func(in *instance) []byte {
		return buildDeployment(in, deploymentOptions{Node: "edge-a", Env: in.env(), InputsHash: "ih", Replicas: 1})
	},
		func(in *instance) string { return podBuildInputs(in).keys[0] }, 0},
	{"Deployment (DRA)", func(in *instance) []byte {
		return buildDeployment(in, deploymentOptions{Node: "edge-a", Env: in.env(), InputsHash: "ih", DRA: true, Replicas: 1})
	},
		func(in *instance) string { return podBuildInputsDRA(in).keys[0] }, 0},
	{"shared Deployment (DRA)", func(in *instance) []byte {
		shared := *in
		shared.shared = true
		pi := podBuildInputsDRA(&shared)
		return buildDeployment(&shared, deploymentOptions{Node: pi.nodes[0], Env: shared.env(), InputsHash: "ih", DRA: true, Replicas: pi.replicas})
	}, func(in *instance) string {
		shared := *in
		shared.shared = true
		return podBuildInputsDRA(&shared).keys[0]
	}, 0},
	{"ResourceSlice", func(in *instance) []byte {
		attrs, _ := draAttributes(in)
		return buildResourceSlice(in, in.nodes, attrs, "name", "ih")
	}, func(in *instance) string { return resourceSliceHash(in, in.nodes) }, 2},
	{"ResourceClaimTemplate", func(in *instance) []byte {
		return buildClaimTemplate(in, api.DRADeviceClassName(in.cfg.Namespace, in.cfg.Name), claimCount(in.cfg), "ih")
	}, func(in *instance) string { return claimTemplateHash(in, claimCount(in.cfg)) }, 2},
	{"DeviceClass", func(in *instance) []byte {
		return buildDeviceClass(in.cfg, api.DRADeviceClassName(in.cfg.Namespace, in.cfg.Name), "ih")
	}, func(in *instance) string { return deviceClassHash(in.cfg) }, 2},
	{"instance Service", func(in *instance) []byte {
		return buildService(in.cfg, in.cfg.Spec.InstanceServiceSpec, instanceServiceName(in.name), in.labels(), nil, "ih")
	}, func(in *instance) string { return "svc/" + podBuildInputs(in).serviceHash }, 0},
}

var hashJobBuilders = []builder{
	{"Job", func(in *instance) []byte { b, _ := buildJob(in, nil, "ih", false).bytes("commit"); return b },
		func(in *instance) string { return jobKey(in.cfg, instanceJobHash(jobHash(in.cfg, nil), in)) }, 0},
	{"Job (DRA)", func(in *instance) []byte { b, _ := buildJob(in, nil, "ih", true).bytes("commit"); return b },
		func(in *instance) string {
			return jobKey(in.cfg, draJobHash(in, instanceJobHash(jobHash(in.cfg, nil), in))) + "/dra"
		}, 0},
	{"ResourceClaimTemplate of a Job", func(in *instance) []byte {
		return buildClaimTemplate(in, api.DRADeviceClassName(in.cfg.Namespace, in.cfg.Name), claimCount(in.cfg), "ih")
	}, func(in *instance) string { return claimTemplateHash(in, claimCount(in.cfg)) }, 2},
}

// podBuildInputs is what renderPodBrokers keys a Pod broker instance's objects by; its first
// Deployment is on edge-a.
func podBuildInputs(in *instance) podBrokerInputs {
	cfg := in.cfg
	return podInputs(cfg, in, deploymentHash(cfg, nil), serviceHash(cfg, "instance-service", cfg.Spec.InstanceServiceSpec), nil, nil, false, clusterInputs{})
}

// podBuildInputsDRA is podBuildInputs in DRA mode.
func podBuildInputsDRA(in *instance) podBrokerInputs {
	cfg := in.cfg
	return podInputs(cfg, in, deploymentHash(cfg, nil), serviceHash(cfg, "instance-service", cfg.Spec.InstanceServiceSpec), nil, nil, true, clusterInputs{})
}

func TestBuildersReadOnlyWhatTheirHashCovers(t *testing.T) {
	for _, tc := range []struct {
		doc      string
		builders []builder
	}{{hashPodConfiguration, hashBuilders}, {hashJobConfiguration, hashJobBuilders}} {
		base := hashInstance(parsedConfiguration(t, tc.doc))
		paths := fieldPaths(reflect.TypeOf(base.cfg).Elem(), nil, map[reflect.Type]bool{})
		if len(paths) < 100 {
			t.Fatalf("only %d fields of a Configuration found to change", len(paths))
		}
		changedSome := map[string]int{}
		for _, p := range paths {
			in := hashInstance(parsedConfiguration(t, tc.doc))
			if !p.apply(reflect.ValueOf(in.cfg).Elem()) {
				continue
			}
			for _, b := range tc.builders {
				if bytes.Equal(b.build(in), b.build(base)) {
					continue
				}
				changedSome[b.name]++
				if b.key(in) == b.key(base) {
					t.Errorf("the %s builder reads %s, which its hash does not cover", b.name, p)
				}
			}
		}
		for _, b := range tc.builders {
			// The walk must reach what the builder does read, or it proves nothing.
			least := b.least
			if least == 0 {
				least = 20
			}
			if changedSome[b.name] < least {
				t.Errorf("only %d changes of the Configuration changed the %s: the walk misses fields", changedSome[b.name], b.name)
			}
		}
	}
}

// Every field of an instance is either in the memo key of the objects built from it or not
// read by their builders; a new field must be added here to say which.
func TestInstanceFieldsAreKeyed(t *testing.T) {
	change := map[string]func(in *instance){
		"cfg":        nil, // TestBuildersReadOnlyWhatTheirHashCovers
		"name":       func(in *instance) { in.name += "x" },
		"digest":     func(in *instance) { in.digest = "d4e5f6" },
		"deviceID":   func(in *instance) { in.deviceID += "x" },
		"shared":     func(in *instance) { in.shared = !in.shared },
		"nodes":      func(in *instance) { in.nodes = []string{"edge-a"} },
		"properties": func(in *instance) { in.properties = map[string]string{"SERIAL": "43"} },
		"collided":   func(in *instance) { in.collided = !in.collided },
		"folder":     func(in *instance) { in.folder += "x" },
		"broker":     func(in *instance) { in.broker = &podBrokerInputs{} },
		"jobHash":    func(in *instance) { in.jobHash = "x" },
		"disputed":   func(in *instance) { in.disputed = "x" },
	}
	typ := reflect.TypeOf(instance{})
	for i := range typ.NumField() {
		if _, ok := change[typ.Field(i).Name]; !ok {
			t.Errorf("instance.%s is new: say here how to change it, so the test checks that the objects' keys cover it", typ.Field(i).Name)
		}
	}
	for _, tc := range []struct {
		doc      string
		builders []builder
	}{{hashPodConfiguration, hashBuilders}, {hashJobConfiguration, hashJobBuilders}} {
		for field, f := range change {
			if f == nil {
				continue
			}
			base := hashInstance(parsedConfiguration(t, tc.doc))
			in := hashInstance(parsedConfiguration(t, tc.doc))
			f(in)
			for _, b := range tc.builders {
				if !bytes.Equal(b.build(in), b.build(base)) && b.key(in) == b.key(base) {
					t.Errorf("the %s builder reads instance.%s, which its key does not cover", b.name, field)
				}
			}
		}
	}
}

// fieldPath is a way to reach one field of a value and change it.
type fieldPath []step

type step struct {
	name  string
	apply func(v reflect.Value) reflect.Value // the next value on the way, made when nil or empty
}

func (p fieldPath) String() string {
	var b strings.Builder
	for _, s := range p {
		b.WriteString(s.name)
	}
	return strings.TrimPrefix(b.String(), ".")
}

// apply follows the path, making what is missing on the way, and changes the value at its end.
func (p fieldPath) apply(v reflect.Value) bool {
	for _, s := range p {
		v = s.apply(v)
		if !v.IsValid() {
			return false
		}
	}
	return changeLeaf(v)
}

var (
	quantityType = reflect.TypeOf(resource.Quantity{})
	timeType     = reflect.TypeOf(metav1.Time{})
	microType    = reflect.TypeOf(metav1.MicroTime{})
)

// fieldPaths lists the paths to every leaf under t: each scalar, each map (given one entry
// more), and the first element of each slice. A type already on the way is not entered again.
func fieldPaths(t reflect.Type, prefix fieldPath, onPath map[reflect.Type]bool) []fieldPath {
	leaf := func() []fieldPath { return []fieldPath{append(fieldPath(nil), prefix...)} }
	switch {
	case t == quantityType || t == timeType || t == microType:
		return leaf()
	case onPath[t]:
		return nil
	}
	onPath[t] = true
	defer delete(onPath, t)
	with := func(s step) fieldPath { return append(append(fieldPath(nil), prefix...), s) }
	switch t.Kind() {
	case reflect.Pointer:
		return fieldPaths(t.Elem(), with(step{"", func(v reflect.Value) reflect.Value {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			return v.Elem()
		}}), onPath)
	case reflect.Struct:
		var out []fieldPath
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := "." + f.Name
			if f.Anonymous {
				name = ""
			}
			out = append(out, fieldPaths(f.Type, with(step{name, func(v reflect.Value) reflect.Value { return v.Field(i) }}), onPath)...)
		}
		return out
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return leaf()
		}
		return fieldPaths(t.Elem(), with(step{"[0]", func(v reflect.Value) reflect.Value {
			if v.Len() == 0 {
				v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
			}
			return v.Index(0)
		}}), onPath)
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return nil
	}
	return leaf()
}

// changeLeaf changes a value so that it differs from what it was.
func changeLeaf(v reflect.Value) bool {
	if !v.CanSet() {
		return false
	}
	switch {
	case v.Type() == quantityType:
		q := v.Interface().(resource.Quantity)
		q.Add(resource.MustParse("7"))
		v.Set(reflect.ValueOf(q))
		return true
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(metav1.Unix(v.Interface().(metav1.Time).Unix()+3600, 0)))
		return true
	case v.Type() == microType:
		v.Set(reflect.ValueOf(metav1.NewMicroTime(v.Interface().(metav1.MicroTime).Add(3600))))
		return true
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		key := reflect.New(v.Type().Key()).Elem()
		if !changeLeaf(key) {
			return false
		}
		val := reflect.New(v.Type().Elem()).Elem()
		changeLeaf(val)
		v.SetMapIndex(key, val)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			// Raw JSON (FieldsV1, RawExtension) must stay JSON to be written.
			v.SetBytes([]byte(`{"changed":{}}`))
			return true
		}
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	default:
		panic(fmt.Sprintf("cannot change a %s", v.Type()))
	}
	return true
}
