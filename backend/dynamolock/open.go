package dynamolock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("dynamodb", func(ctx context.Context, u *url.URL) (driver.Backend, error) {
		cfg, opts, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, cfg, opts...)
	})
}

// Config says how Open reaches DynamoDB.
type Config struct {
	// Table is the lock table, with the key schema CreateTable sets.
	Table string
	// Region is the AWS region; if empty, the SDK's environment chain's
	// (AWS_REGION, then the shared config file's profile).
	Region string
	// Endpoint, if set, replaces AWS's endpoint for the region: a
	// DynamoDB-compatible server such as DynamoDB Local, dynalite or
	// LocalStack, e.g. "http://127.0.0.1:8000".
	Endpoint string
	// ConnectTimeout bounds opening a connection; 0 is
	// DefaultConnectTimeout (5s).
	ConnectTimeout time.Duration
}

// maxIdlePerHost keeps enough idle connections for 64 concurrent requests
// and more (the SDK's default keeps 10, and opens a new connection for each
// request over that).
const maxIdlePerHost = 100

// Open builds a DynamoDB client of its own (NewClient), checks with one
// DescribeTable, bounded by ctx and the request timeout and not retried,
// that the table exists with the right key schema, and returns a backend
// over it. An unreachable endpoint fails at once with the dial error. Close
// closes the client's idle connections.
func Open(ctx context.Context, cfg Config, opts ...Option) (*Backend, error) {
	db, tr, err := NewClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(db, cfg.Table, opts...)
	if err != nil {
		return nil, err
	}
	b.transport = tr
	err = b.call(ctx, func(ctx context.Context) error {
		return describe(ctx, db, cfg.Table, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	})
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("dynamolock: open %s: %w", cfg.Table, err)
	}
	return b, nil
}

// NewClient checks cfg and builds the DynamoDB client Open uses, with
// credentials from the SDK's standard chain (environment, shared files and
// profiles, SSO, web identity, then the container's or the instance's role)
// as every AWS tool finds them, and connections bounded by
// cfg.ConnectTimeout. It returns the client's transport too, whose
// CloseIdleConnections the caller calls when done with the client. It
// makes no request.
func NewClient(ctx context.Context, cfg Config) (*dynamodb.Client, *http.Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	connect := cfg.ConnectTimeout
	if connect == 0 {
		connect = DefaultConnectTimeout
	}
	var load []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		load = append(load, awsconfig.WithRegion(cfg.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamolock: open: AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, nil, fmt.Errorf("dynamolock: open: %w: no region (set region in the URL, Config.Region or AWS_REGION)", driver.ErrInvalidOption)
	}
	// The SDK's transport, with a CA bundle from the configuration if one
	// is set (AWS_CA_BUNDLE), made a plain one the caller can close.
	bc, _ := awsCfg.HTTPClient.(*awshttp.BuildableClient)
	if bc == nil {
		bc = awshttp.NewBuildableClient()
	}
	tr := bc.GetTransport()
	tr.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConnsPerHost = maxIdlePerHost
	awsCfg.HTTPClient = &http.Client{Transport: tr}
	db := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return db, tr, nil
}

// validate checks what can be checked of cfg without a connection.
func (c Config) validate() error {
	if err := validTable(c.Table); err != nil {
		return err
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("dynamolock: connect timeout %v: %w: must not be negative", c.ConnectTimeout, driver.ErrInvalidOption)
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("dynamolock: endpoint %q: %w: want http://host:port or https://host", c.Endpoint, driver.ErrInvalidOption)
		}
	}
	return nil
}

// ParseURL reads the URL distlock.Open takes,
// dynamodb://TABLE?region=R&endpoint=E&connect_timeout=D&request_timeout=D&retention=D,
// as Open's Config and options, and checks the Config as NewClient does
// (the options are checked by New). It makes no connection.
func ParseURL(u *url.URL) (Config, []Option, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("dynamolock: URL %q: %w: %s", driver.RedactURL(u), driver.ErrInvalidOption, fmt.Sprintf(format, a...))
	}
	if u.User != nil || u.Path != "" || u.Port() != "" {
		return Config{}, nil, bad("want dynamodb://TABLE?region=...&endpoint=...")
	}
	cfg := Config{Table: u.Host}
	var opts []Option
	durations := map[string]func(time.Duration) error{
		"connect_timeout": func(d time.Duration) error {
			if d <= 0 {
				return errors.New("must be positive")
			}
			cfg.ConnectTimeout = d
			return nil
		},
		"request_timeout": func(d time.Duration) error { opts = append(opts, WithRequestTimeout(d)); return nil },
		"retention":       func(d time.Duration) error { opts = append(opts, WithRetention(d)); return nil },
	}
	for name, vs := range u.Query() {
		if len(vs) != 1 {
			return Config{}, nil, bad("parameter %s given %d times", name, len(vs))
		}
		v := vs[0]
		switch name {
		case "region":
			cfg.Region = v
		case "endpoint":
			cfg.Endpoint = v
		default:
			set, ok := durations[name]
			if !ok {
				return Config{}, nil, bad("unknown parameter %s (known: region, endpoint, connect_timeout, request_timeout, retention)", name)
			}
			d, err := time.ParseDuration(v)
			if err == nil {
				err = set(d)
			}
			if err != nil {
				return Config{}, nil, bad("parameter %s=%q: %v", name, v, err)
			}
		}
	}
	if err := cfg.validate(); err != nil {
		return Config{}, nil, err
	}
	return cfg, opts, nil
}
