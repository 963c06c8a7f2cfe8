// Module helm builds the helm program for make bench-helm, which compares `helm template` on an
// equivalent chart (fixtures/helm) with `gitbroker render` on the same fleet. The e2e suite does
// not use it, and build.sh all does not build it.
module github.com/gitbroker/gitbroker/e2e/tools/helm

go 1.26.0
require helm.sh/helm/v3 v3.22.0 // indirect
