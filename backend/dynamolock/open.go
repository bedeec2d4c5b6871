package dynamolock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("dynamodb", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "dynamolock"

// Config is what a dynamodb:// URL says: how Open reaches DynamoDB, and
// the backend's options.
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
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// maxIdlePerHost keeps enough idle connections for 64 concurrent requests
// and more (the SDK's default keeps 10, and opens a new connection for each
// request over that).
const maxIdlePerHost = 100

// Open builds a DynamoDB client of its own (NewClient) from rawURL (see
// ParseURL), checks with one DescribeTable, bounded by ctx and the request
// timeout and not retried, that the table exists with the right key
// schema, and returns a backend over it. opts apply after the URL's. An
// unreachable endpoint fails at once with the dial error. Close closes the
// client's idle connections.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := urlq.Parse(pkg, rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u, opts...)
}

// openURL is Open after url.Parse, and distlock.Open's way in.
func openURL(ctx context.Context, u *url.URL, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	db, tr, err := NewClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(db, cfg.Table, append(slices.Clip(cfg.Options), opts...)...)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	b.transport = tr
	err = b.call(ctx, func(ctx context.Context) error {
		return describe(ctx, db, cfg.Table, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	})
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("dynamolock: connect: %w", err)
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

// ParseURL reads a dynamodb:// URL without connecting:
//
//	dynamodb://TABLE?region=R&endpoint=E&connect_timeout=D&request_timeout=D&retention=D
//
// region, endpoint and connect_timeout set Config's fields; request_timeout
// and retention set WithRequestTimeout and WithRetention. It checks the
// Config as NewClient does and the options as New does. Any other
// parameter is an error matching driver.ErrInvalidOption, as is an invalid
// value.
func ParseURL(u *url.URL) (Config, error) {
	if u.Scheme != "dynamodb" {
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want dynamodb", u.Scheme)
	}
	if u.User != nil || u.Path != "" || u.Port() != "" {
		return Config{}, urlq.Invalidf(pkg, "host", "want dynamodb://TABLE?region=...&endpoint=...")
	}
	cfg := Config{Table: u.Host}
	r := urlq.New(pkg, u.Query())
	r.String("region", &cfg.Region)
	r.String("endpoint", &cfg.Endpoint)
	r.Func("connect_timeout", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 5s")
		}
		cfg.ConnectTimeout = d
		return nil
	})
	var d time.Duration
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	if r.Duration("retention", &d) {
		cfg.Options = append(cfg.Options, WithRetention(d))
	}
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
