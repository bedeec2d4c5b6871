package dynamolock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/driver"
)

// The expressions' attribute names, one map per kind of request (DynamoDB
// refuses names an expression does not use). They are only read.
var (
	grantNames = map[string]string{"#t": attrToken, "#v": attrVersion, "#l": attrLease, "#x": ExpiresAttribute,
		"#f": attrFence, "#m": attrMeta}
	renewNames = map[string]string{"#t": attrToken, "#v": attrVersion, "#l": attrLease, "#x": ExpiresAttribute}
	freeNames  = map[string]string{"#t": attrToken, "#v": attrVersion, "#l": attrLease, "#x": ExpiresAttribute,
		"#m": attrMeta}
	releaseNames = map[string]string{"#t": attrToken, "#v": attrVersion, "#l": attrLease, "#x": ExpiresAttribute,
		"#m": attrMeta, "#r": attrFreedBy}
)

const (
	// grantSet writes a grant: token, a new version, the lease, the garbage
	// collection time and the next fence. A new item's first fence is the
	// granting client's clock in microseconds (see the package doc).
	grantSet = "SET #t = :t, #v = :v, #l = :l, #x = :x, #f = if_not_exists(#f, :base) + :one"
	// free is the condition of an ordinary acquisition.
	free = "attribute_not_exists(#t)"
	// freeOrAbandoned also takes over the version :seen, which this backend
	// has seen unchanged for a full lease.
	freeOrAbandoned = free + " OR #v = :seen"
	// freeUpdate ends a hold and leaves the item with its fence.
	freeUpdate = "REMOVE #t, #v, #l, #m SET #x = :x"
	// releaseUpdate also records the releasing token.
	releaseUpdate = freeUpdate + ", #r = :t"
)

// Acquire takes req.Key in one conditional UpdateItem: if the item has no
// holder, or (takeover) if its holder's record version is one this backend
// has seen unchanged for a full lease. The same write advances the fence. A
// refusal reads the item (DynamoDB sends it back with the refusal; dynalite
// does not, so then one consistent GetItem) to note the holder's version.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("dynamolock: metadata: %w", err)
	}
	now := b.opts.now()
	values := map[string]types.AttributeValue{
		":t": s(req.Token), ":v": s(newVersion()), ":l": n(leaseMillis(req.TTL)),
		":x": n(now.Add(req.TTL + b.opts.retention).Unix()), ":base": n(now.UnixMicro()), ":one": n(1),
	}
	update, cond := grantSet, free
	if meta != "" {
		update += ", #m = :m"
		values[":m"] = s(meta)
	} else {
		update += " REMOVE #m"
	}
	if v, ok := b.seen.expired(req.Key, now); ok {
		cond = freeOrAbandoned
		values[":seen"] = s(v)
	}
	var (
		out  *dynamodb.UpdateItemOutput
		held lock
	)
	err = b.call(ctx, func(ctx context.Context) error {
		o, err := b.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: b.table, Key: keyOf(req.Key),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: grantNames, ExpressionAttributeValues: values,
			ReturnValues:                        types.ReturnValueUpdatedOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, b.perCall...)
		out = o
		held, err = b.refusal(ctx, req.Key, err)
		return err
	})
	var fence uint64
	switch {
	case err != nil:
		return driver.Grant{}, b.fail(err)
	case out != nil:
		old, err := decode(out.Attributes)
		if err != nil {
			return driver.Grant{}, b.fail(err)
		}
		fence = old.fence + 1
		if old.fence == 0 { // a new item, or one written before it had a fence
			fence = uint64(now.UnixMicro()) + 1
		}
	case held.token == req.Token:
		// A repeat by the holding token (a retry whose first reply was lost,
		// by the SDK or the caller): the hold is renewed from now, as the
		// caller counts it, by a write conditional on the token still
		// holding.
		switch err := b.Renew(ctx, req.Key, req.Token, req.TTL); {
		case errors.Is(err, driver.ErrNotHeld):
			return driver.Grant{}, fmt.Errorf("%w: the repeated grant ended meanwhile", driver.ErrNotAcquired)
		case err != nil:
			return driver.Grant{}, err
		}
		fence = held.fence
	default:
		if held.held {
			b.seen.saw(req.Key, held.version, held.lease, b.opts.now())
		}
		return driver.Grant{}, driver.ErrNotAcquired
	}
	b.seen.forget(req.Key)
	return driver.Grant{Fence: fence}, nil
}

// refusal returns the item a conditional write err refused: the one
// DynamoDB sent back with the refusal, or, from a server that sends none
// (dynalite), the item as a consistent GetItem reads it. Any other err is
// returned as it is, and nil is the zero lock.
func (b *Backend) refusal(ctx context.Context, key string, err error) (lock, error) {
	item, no := refused(err)
	if !no {
		return lock{}, err
	}
	if len(item) == 0 {
		if item, err = b.get(ctx, key); err != nil {
			return lock{}, err
		}
	}
	return decode(item)
}

// get reads key's item with a strongly consistent read; nil if none.
func (b *Backend) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	out, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: b.table, Key: keyOf(key), ConsistentRead: aws.Bool(true)}, b.perCall...)
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// Renew writes a new record version and ttl if token holds key: waiters
// that saw the old version start counting again.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	now := b.opts.now()
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: b.table, Key: keyOf(key),
			UpdateExpression: aws.String("SET #v = :v, #l = :l, #x = :x"), ConditionExpression: aws.String("#t = :t"),
			ExpressionAttributeNames: renewNames,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":t": s(token), ":v": s(newVersion()), ":l": n(leaseMillis(ttl)), ":x": n(now.Add(ttl + b.opts.retention).Unix()),
			},
		}, b.perCall...)
		return err
	})
	if _, no := refused(err); no {
		return driver.ErrNotHeld
	}
	if err != nil {
		return b.fail(err)
	}
	return nil
}

// Release ends token's hold of key, keeping the item and its fence, and
// records token as the last to release it: a release repeated by the SDK
// after a lost reply, refused, is then told from one by a token that does
// not hold the key.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	var l lock
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: b.table, Key: keyOf(key),
			UpdateExpression: aws.String(releaseUpdate), ConditionExpression: aws.String("#t = :t"),
			ExpressionAttributeNames: releaseNames,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":t": s(token), ":x": n(b.opts.now().Add(b.opts.retention).Unix()),
			},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, b.perCall...)
		if err == nil {
			l.freedBy = token
			return nil
		}
		l, err = b.refusal(ctx, key, err)
		return err
	})
	switch {
	case err != nil:
		return b.fail(err)
	case l.freedBy != token:
		return driver.ErrNotHeld
	}
	return nil
}

// ForceRelease ends the hold of key whatever token holds it, in one
// conditional UpdateItem, and returns the hold it ended. The item and its
// fence stay. If key is not held it returns an error matching
// driver.ErrNotHeld and changes nothing. The holder learns of it at its next
// renewal.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	var out *dynamodb.UpdateItemOutput
	err := b.call(ctx, func(ctx context.Context) (err error) {
		out, err = b.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: b.table, Key: keyOf(key),
			UpdateExpression: aws.String(freeUpdate), ConditionExpression: aws.String("attribute_exists(#t)"),
			ExpressionAttributeNames: freeNames,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":x": n(b.opts.now().Add(b.opts.retention).Unix()),
			},
			ReturnValues: types.ReturnValueAllOld,
		}, b.perCall...)
		return err
	})
	if _, no := refused(err); no {
		return driver.Info{}, driver.ErrNotHeld
	}
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	l, err := decode(out.Attributes)
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	return b.info(l), nil
}

// info describes l. Its TTL is what is left of the holder's lease as this
// backend sees it (see sightings.left): no client's clock is compared with
// another's.
func (b *Backend) info(l lock) driver.Info {
	if !l.held {
		return driver.Info{Key: l.key, Fence: l.fence}
	}
	return driver.Info{Key: l.key, Held: true, Fence: l.fence, Meta: l.meta,
		TTL: b.seen.left(l.key, l.version, l.lease, b.opts.now())}
}

// Inspect reads key's item with a strongly consistent read. A released key
// reports the fence of its last grant while its item exists.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	var item map[string]types.AttributeValue
	err := b.call(ctx, func(ctx context.Context) (err error) {
		item, err = b.get(ctx, key)
		return err
	})
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	if item == nil {
		return driver.Info{Key: key}, nil
	}
	l, err := decode(item)
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	return b.info(l), nil
}

// List returns the held locks whose keys start with prefix, sorted by key:
// a strongly consistent Scan of the whole table, filtered by DynamoDB, a
// page (1 MB of items read) per request, each within the request timeout.
// It reads every item of the table, so it costs in proportion to the table,
// not to the answer.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	in := &dynamodb.ScanInput{
		TableName: b.table, ConsistentRead: aws.Bool(true),
		FilterExpression:         aws.String("attribute_exists(#t)"),
		ExpressionAttributeNames: map[string]string{"#t": attrToken},
	}
	if prefix != "" {
		in.FilterExpression = aws.String("attribute_exists(#t) AND begins_with(#k, :p)")
		in.ExpressionAttributeNames["#k"] = KeyAttribute
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": s(prefix)}
	}
	var infos []driver.Info
	for {
		var out *dynamodb.ScanOutput
		err := b.call(ctx, func(ctx context.Context) (err error) {
			out, err = b.db.Scan(ctx, in, b.perCall...)
			return err
		})
		if err != nil {
			return nil, b.fail(err)
		}
		for _, item := range out.Items {
			l, err := decode(item)
			if err != nil {
				// The client names the prefix; the item is one of its keys.
				return nil, b.fail(fmt.Errorf("key %q: %w", str(item[KeyAttribute]), err))
			}
			infos = append(infos, b.info(l))
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	slices.SortFunc(infos, func(x, y driver.Info) int { return strings.Compare(x.Key, y.Key) })
	return infos, nil
}
