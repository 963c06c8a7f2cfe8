// Package akripb is the generated Go code for Akri's discovery-handler
// protocol (discovery.proto beside it). Regenerate with `make generate`.
package akripb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative discovery.proto
