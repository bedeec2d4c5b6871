package redisstore

// PutScript is the record's write, for the benchmark of a first run's
// commands.
var PutScript = putScript
