// Package dynamolock is a distlock backend on DynamoDB: every acquisition,
// renewal and release is one conditional write (compare-and-swap on the
// item of the key), and no decision depends on any clock showing the right
// time.
//
//	b, err := dynamolock.New(client, "locks") // a *dynamodb.Client you own
//	c, err := distlock.Open(ctx, "dynamodb://locks?region=eu-west-1")
//
// # Guarantee
//
// A key is held by at most one token at a time, provided the clocks of the
// clients run at about the same rate: a client's lease of d must not last
// less than d minus the client's drift margin (1% + 2ms) on another client's
// clock. Their times of day may differ by any amount. DynamoDB's condition
// expressions cannot read a server clock, so a lease cannot expire in the
// store. Instead, as in the AWS DynamoDB Lock Client, each grant and each
// renewal writes a new random record version number (rvn) with the lease; a
// client may take over a held key only once it has seen the same version
// for a full lease by its own monotonic clock, counted from when the reply
// that showed it arrived, and the takeover is conditional on that version
// still being there. The holder's own validity is counted from before it
// wrote that version, so it ends first. A waiter whose takeover is refused
// because the holder renewed starts counting again.
//
// So an abandoned lock is taken over between one and two leases after its
// holder stopped renewing (a full lease from the waiter's first sight,
// which may come up to one lease after the last renewal). Each backend
// keeps its sightings in memory: a process that starts waiting counts from
// its own first sight.
//
// Each acquisition attempt is one conditional UpdateItem; a refused one also
// reads the item (DynamoDB sends it back with the refusal; dynalite does not,
// so there one consistent GetItem follows) to note the holder's version. A
// ConditionalCheckFailedException is driver.ErrNotAcquired (acquire) or
// driver.ErrNotHeld (renew, release, force release), never a store error.
// A grant or release whose reply was lost after DynamoDB applied it, and
// that the SDK's retryer sent again, is recognised by its token: the repeat's
// refusal is reported as the success it was. (A repeated ForceRelease is
// reported as driver.ErrNotHeld.)
//
// # Fences
//
// The item's fence attribute is advanced in the same conditional write that
// grants, so fences strictly increase in grant order for as long as the item
// exists, across releases, expiries, takeovers and force releases, and
// through anything the table survives. A new item (the key's first grant, or
// the first after its item was deleted by Time to Live or by hand) starts at
// the granting client's clock in microseconds since 1970, plus one: above
// every fence the deleted item had as long as that client's clock is not
// behind the clock that created the deleted item by more than the time
// between (at least WithRetention when Time to Live deleted it).
//
// # What stays in the table
//
// Release and ForceRelease end the hold but keep the item: its key, fence,
// the token of the last release (freed_by) and expires_at. So the table
// keeps one small item (about 100 bytes) per key ever locked, unless Time
// to Live is on for expires_at (CreateTable with TableOptions.TimeToLive):
// then DynamoDB deletes an item some time after expires_at, which is the
// writer's clock plus WithRetention (default 24h) after a release, or plus
// lease and retention after a grant or renewal. Time to Live collects
// garbage only: DynamoDB deletes late (by up to days), and no lock decision
// reads expires_at. With it on, a client whose clock is behind the true time
// by more than the retention could see its held item deleted; keep clocks
// within hours, as NTP does.
//
// # Table
//
// One table, partition key KeyAttribute ("lock_key", a string), no sort key;
// on-demand or provisioned billing. CreateTable makes it; CheckTable checks
// its key schema and Time to Live. The item's attributes: token (the
// holder's; absent while free), rvn, lease_ms, fence, meta (the holder's
// metadata as JSON), freed_by and expires_at.
//
// # Waiting
//
// DynamoDB has no notifications, so a waiter polls: the client's jittered
// backoff, from 1ms up to 50ms between attempts, bounded by the wait and so
// by the takeover time. Each poll of a held key costs one refused write
// (DynamoDB still charges a write unit for it) and, off AWS, one read.
//
// # Throttling
//
// ProvisionedThroughputExceededException and ThrottlingException are
// retried by the SDK's retryer with its backoff (for DynamoDB: 4 attempts,
// jittered exponential backoff), within the request timeout; Throttled
// counts every throttled attempt (telemetry.NewThrottleCounter exports it to
// Prometheus). One that is still throttled after the last attempt reaches
// the caller as a store error.
//
// # Open, URL and timeouts
//
//	dynamodb://TABLE?region=REGION&endpoint=URL&connect_timeout=5s&request_timeout=5s&retention=24h
//
// Every parameter is optional; region falls back to the SDK's environment
// (AWS_REGION, the shared config's profile) and endpoint to AWS's for the
// region (set it for DynamoDB Local, dynalite or LocalStack). Open (and so
// the URL) takes credentials from the SDK's standard chain, as every AWS
// tool does: environment variables, shared credentials and config files
// (AWS_PROFILE, SSO), web identity, then the ECS container's or the EC2
// instance's role. That is what a service on AWS expects, and secrets stay
// out of URLs; the cost is that Open pulls in the SDK's config module
// (AWS's own modules only). New takes a client you built in any other way.
//
// Any other parameter is an error matching driver.ErrInvalidOption;
// ParseURL reads a URL into a Config without connecting, and NewClient
// builds the client Open would from a Config.
//
// connect_timeout (Config.ConnectTimeout, default DefaultConnectTimeout, 5s)
// bounds opening a connection; request_timeout (WithRequestTimeout, default
// DefaultRequestTimeout, 5s) bounds each request with the SDK's retries of
// it, also when the caller's context has no deadline. Open checks the table
// with one DescribeTable that is not retried: an endpoint where nothing
// listens fails at once with the dial error, a missing table or a wrong key
// schema says so. A client passed to New keeps its own HTTP settings; the
// request timeout applies to it too.
//
// After Close every call returns an error matching driver.ErrClosed; calls
// in progress finish.
package dynamolock
