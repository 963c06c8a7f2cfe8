package api

import (
	"strings"
)

// Bounds of what a node may report: an inventory crosses a trust boundary (edge nodes are
// exposed), and everything in it ends up in rendered manifests, plans and commit messages.
const (
	MaxInventorySize       = 4 << 20 // bytes of one inventory file
	MaxDeviceIDLength      = 512     // Akri's udev ids are sysfs paths, a few hundred bytes at most
	MaxPropertiesPerDevice = 64
	MaxPropertyNameLength  = 128
	MaxPropertyValueSize   = 8 << 10 // bytes of one property value
	// MaxPropertiesSize bounds the names and values of one device's properties together: each
	// becomes two environment variables (KEY and KEY_<DIGEST>) in every container that gets the
	// device, and 64 values of 8 KiB made a 4.2 MB Pod, above the API server's request limit.
	MaxPropertiesSize  = 16 << 10
	MaxMountsPerDevice = 32
)

// Device property names that change how a process loads code or where it connects. A device
// reporting one could run its own code in every broker, or redirect a broker's traffic, so they
// are refused from devices unless the Configuration allows them by name.
var (
	refusedDeviceNames = map[string]bool{
		"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true, "PROMPT_COMMAND": true, "IFS": true,
		"PATH": true, "HOME": true, "TMPDIR": true,
		"NODE_OPTIONS": true, "NODE_PATH": true, "NODE_EXTRA_CA_CERTS": true,
		"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "CLASSPATH": true,
		"RUBYOPT": true, "RUBYLIB": true, "GEM_PATH": true, "GEM_HOME": true,
		"GCONV_PATH": true, "GLIBC_TUNABLES": true, "LOCPATH": true, "NLSPATH": true,
		"HOSTALIASES": true, "RES_OPTIONS": true, "LOCALDOMAIN": true,
		"HTTP_PROXY": true, "HTTPS_PROXY": true, "FTP_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true,
		"GRPC_PROXY": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "REQUESTS_CA_BUNDLE": true, "CURL_CA_BUNDLE": true,
		"KUBERNETES_SERVICE_HOST": true, "KUBERNETES_SERVICE_PORT": true,
		"GODEBUG": true, "GOFLAGS": true, "LUA_INIT": true, "LUA_PATH": true, "LUA_CPATH": true,
		"PHPRC": true, "PHP_INI_SCAN_DIR": true, "TCLLIBPATH": true, "MALLOC_CONF": true,
		"NODE_TLS_REJECT_UNAUTHORIZED": true, "KUBECONFIG": true, "SSLKEYLOGFILE": true, "WGETRC": true, "CURL_HOME": true,
		"CONTAINER_HOST": true, "GOOGLE_APPLICATION_CREDENTIALS": true, "GOPROXY": true, "GONOSUMDB": true, "GOPRIVATE": true,
		"PERL_MB_OPT": true, "PERL_MM_OPT": true, "EDITOR": true, "VISUAL": true, "PAGER": true, "BROWSER": true,
	}
	refusedDevicePrefixes = []string{"LD_", "DYLD_", "PYTHON", "PERL5", "PERLLIB", "CORECLR_", "COMPLUS_", "DOTNET_", "GIT_", "MALLOC_", "OPENSSL_",
		"JAVA_", "JDK_", "NODE_", "NPM_CONFIG_", "AWS_", "AZURE_", "DOCKER_", "KUBE", "ASPNETCORE_", "ERL_", "ELIXIR_", "RUBY", "BUNDLE_", "GNUTLS_", "NSS_", "KRB5"}
	// Any name ending so passes options to a program or routes its traffic, whatever the program
	// (JAVA_OPTS, CATALINA_OPTS, MAVEN_OPTS, SOCKS_PROXY, ...).
	refusedDeviceSuffixes = []string{"_OPTS", "_OPTIONS", "_FLAGS", "_PROXY", "_CA_BUNDLE", "_CA_CERTS", "_PRELOAD"}
)

// propertiesSize is the bytes of a device's property names and values.
func propertiesSize(props map[string]string) int {
	n := 0
	for k, v := range props {
		n += len(k) + len(v)
	}
	return n
}

// RefusedDeviceProperty reports whether a device may not set the environment variable name
// unless its Configuration allows it. Names are compared without case: http_proxy is read as
// well as HTTP_PROXY.
func RefusedDeviceProperty(name string) bool {
	n := strings.ToUpper(name)
	if refusedDeviceNames[n] {
		return true
	}
	for _, p := range refusedDevicePrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range refusedDeviceSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// AllowsDeviceProperty reports whether the Configuration lets devices set name although
// RefusedDeviceProperty refuses it (spec.allowedDeviceProperties, or the annotation
// gitbroker.dev/allowed-device-properties, comma-separated). Names match exactly.
func (c *ParsedConfiguration) AllowsDeviceProperty(name string) bool {
	for _, n := range c.Policy.AllowedDeviceProperties {
		if n == name {
			return true
		}
	}
	return false
}
