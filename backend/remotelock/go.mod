module github.com/distlock/distlock/backend/remotelock

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/distlock/distlock v0.0.0-00010101000000-000000000000
	github.com/distlock/distlock/gen v0.0.0
	google.golang.org/protobuf v1.36.12
)

require go.uber.org/goleak v1.3.0 // indirect

// Built from this repository's library and generated code; a release pins versions instead.
replace (
	github.com/distlock/distlock => ../..
	github.com/distlock/distlock/gen => ../../gen
)
