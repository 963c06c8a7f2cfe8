// Module helm builds the helm program: the e2e suite runs docs/DEPLOYING.md's Akri migration
// with it (helm upgrade of Akri's chart), and make bench-helm compares `helm template` on an
// equivalent chart (fixtures/helm) with `gitbroker render` on the same fleet.
module github.com/gitbroker/gitbroker/e2e/tools/helm

go 1.26.0
require helm.sh/helm/v3 v3.22.0 // indirect
