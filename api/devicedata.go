package api

import (
	"strings"
)

// Bounds of what a node may report: an inventory crosses a trust boundary (edge nodes are
// exposed), and everything in it ends up in rendered manifests, plans and commit messages.
const (
	MaxInventorySize = 4 << 20 // bytes of one inventory file
	// MaxInventoryEntries bounds the lines and flow-style entries ({, [ and ,) of one inventory,
	// counted before it is parsed: a YAML parse costs about a kilobyte of memory per entry, and
	// 4 MiB of "- {id: a}" lines took 375 MiB to parse (an agent's limit is 128Mi) and 475 MiB of
	// the renderer's. A node with a thousand devices of a few properties each writes a tenth of it.
	MaxInventoryEntries = 100_000
	// MaxInventoryErrors is how many errors of one inventory are listed; the rest are counted.
	MaxInventoryErrors     = 50
	MaxDeviceIDLength      = 512 // Akri's udev ids are sysfs paths, a few hundred bytes at most
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
		// Plugin, driver and module search paths, shells' start files, package indexes, telemetry
		// endpoints and toolchain switches (the second trust review's list).
		"GST_PLUGIN_PATH": true, "GST_PLUGIN_SYSTEM_PATH": true, "LIBVA_DRIVERS_PATH": true, "LIBVA_DRIVER_NAME": true,
		"VK_ICD_FILENAMES": true, "VK_LAYER_PATH": true, "VK_DRIVER_FILES": true, "VK_ADD_DRIVER_FILES": true, "VK_INSTANCE_LAYERS": true,
		"__EGL_VENDOR_LIBRARY_FILENAMES": true, "__EGL_VENDOR_LIBRARY_DIRS": true, "__GLX_VENDOR_LIBRARY_NAME": true, "OCL_ICD_VENDORS": true, "OCL_ICD_FILENAMES": true,
		"GTK_MODULES": true, "GTK_PATH": true, "GIO_MODULE_DIR": true, "GIO_EXTRA_MODULES": true, "GDK_PIXBUF_MODULE_FILE": true,
		"ZDOTDIR": true, "INPUTRC": true, "TERMINFO": true, "TERMINFO_DIRS": true,
		"GOTOOLCHAIN": true, "GOROOT": true, "GOPATH": true, "CARGO_HOME": true, "RUSTUP_HOME": true, "RUSTC_WRAPPER": true,
		"LIBRARY_PATH": true, "CPATH": true, "PKG_CONFIG_PATH": true, "MAGIC": true, "SANE_CONFIG_DIR": true,
		"ALSA_CONFIG_PATH": true, "PULSE_SERVER": true, "PULSE_RUNTIME_PATH": true, "DBUS_SESSION_BUS_ADDRESS": true, "DBUS_SYSTEM_BUS_ADDRESS": true,
		"DISPLAY": true, "WAYLAND_DISPLAY": true, "SSH_AUTH_SOCK": true, "GNUPGHOME": true, "GIT_SSH_COMMAND": true,
	}
	refusedDevicePrefixes = []string{"LD_", "DYLD_", "PYTHON", "PERL5", "PERLLIB", "CORECLR_", "COMPLUS_", "DOTNET_", "GIT_", "MALLOC_", "OPENSSL_",
		"JAVA_", "JDK_", "NODE_", "NPM_CONFIG_", "AWS_", "AZURE_", "DOCKER_", "KUBE", "ASPNETCORE_", "ERL_", "ELIXIR_", "RUBY", "BUNDLE_", "GNUTLS_", "NSS_", "KRB5",
		"GST_", "LIBVA_", "VDPAU_", "VK_", "MESA_", "QT_", "QML", "GTK_", "GIO_", "GDK_", "GSETTINGS_", "XDG_", "PIP_", "UV_", "CONDA",
		"OTEL_", "GOOGLE_", "GCLOUD_", "CLOUDSDK_", "SSL_", "TLS_", "CUDA_", "NVIDIA_", "OMP_", "HF_", "TRANSFORMERS_", "TORCH", "CMAKE_", "CC_", "CXX_", "MAVEN_", "GRADLE_", "SBT_", "YARN_", "DENO_", "BUN_"}
	// Any name ending so passes options to a program or routes its traffic, whatever the program
	// (JAVA_OPTS, CATALINA_OPTS, MAVEN_OPTS, SOCKS_PROXY, ...).
	refusedDeviceSuffixes = []string{"_OPTS", "_OPTIONS", "_FLAGS", "_PROXY", "_CA_BUNDLE", "_CA_CERTS", "_PRELOAD",
		"_PATH", "_LIBRARY_PATH", "_PLUGIN_DIR", "_MODULE_DIR", "_MODULES", "_HOME", "_ENDPOINT", "_INDEX_URL", "_CONFIG_FILE", "_CONFIG_DIR", "_RC", "_INIT", "_HOOK", "_HOOKS"}
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
// DeviceMaySet would not (spec.allowedDeviceProperties, or the annotation
// gitbroker.dev/allowed-device-properties, comma-separated). Names match exactly.
func (c *ParsedConfiguration) AllowsDeviceProperty(name string) bool {
	for _, n := range c.Policy.AllowedDeviceProperties {
		if n == name {
			return true
		}
	}
	return false
}

// DeviceMaySet reports whether a device of the Configuration may set the environment variable
// name in its brokers. It is an allow-list: the names Akri's discovery handlers report start
// with their handler's name (UDEV_DEVNODE for udev, ONVIF_DEVICE_SERVICE_URL for onvif,
// OPCUA_DISCOVERY_URL for opcua, DEBUG_ECHO_DESCRIPTION for debugEcho; Akri's custom handlers
// also AKRI_<HANDLER>_...), so those are what a device may set, unless RefusedDeviceProperty
// refuses them still (a handler named ld or node). Any other name only when the Configuration
// allows it by name (AllowsDeviceProperty). A list of what not to allow is never complete: every
// runtime, plugin system and SDK reads variables of its own.
func (c *ParsedConfiguration) DeviceMaySet(name string) bool {
	if c.AllowsDeviceProperty(name) {
		return true
	}
	p := HandlerPropertyPrefix(c.Spec.DiscoveryHandler.Name)
	n := strings.ToUpper(name)
	return p != "" && (strings.HasPrefix(n, p) || strings.HasPrefix(n, "AKRI_"+p)) && len(n) > len(p) && !RefusedDeviceProperty(name)
}

// HandlerPropertyPrefix is the prefix of the property names a discovery handler reports, as
// Akri's handlers name them: the handler's name in upper snake case and "_" (debugEcho gives
// DEBUG_ECHO_); "" for no name.
func HandlerPropertyPrefix(handler string) string {
	var b strings.Builder
	for i, r := range handler {
		switch {
		case r >= 'A' && r <= 'Z':
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "_"
}

// yamlEntries counts the lines and flow-style entries of a YAML text: at least one per node a
// parser makes, whatever the style, so it bounds the cost of parsing it.
func yamlEntries(data []byte) int {
	n := 1
	for _, c := range data {
		switch c {
		case '\n', ',', '[', '{':
			n++
		}
	}
	return n
}
