// Package rdsauth makes the passwords of RDS IAM database authentication
// (RDS for MySQL and MariaDB, Aurora MySQL): a token the AWS SDK signs with
// the process's AWS credentials for one database user and one endpoint.
// A token lives 15 minutes and is checked only when a connection signs in,
// so the relay asks for a fresh one for every new connection and never
// keeps one.
//
// Tokens are secrets: nothing here logs one, and no error holds one.
package rdsauth

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
)

// Signer signs one token for user at endpoint (host:port) in region:
// auth.BuildAuthToken, or a fake in tests.
type Signer func(ctx context.Context, endpoint, region, user string, creds aws.CredentialsProvider) (string, error)

// BuildAuthToken is the AWS SDK's Signer.
func BuildAuthToken(ctx context.Context, endpoint, region, user string, creds aws.CredentialsProvider) (string, error) {
	return auth.BuildAuthToken(ctx, endpoint, region, user, creds)
}

// Tokens signs tokens for one database user.
type Tokens struct {
	region string
	user   string
	creds  aws.CredentialsProvider
	sign   Signer
}

// New reads the AWS SDK's default configuration for region: credentials
// from the environment, the shared config and credentials files, a web
// identity (EKS), or the ECS or EC2 role. Nothing is fetched until the
// first token; the SDK caches and refreshes the credentials.
func New(ctx context.Context, region, user string) (*Tokens, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return NewWith(region, user, cfg.Credentials, BuildAuthToken), nil
}

// NewWith is New with the credentials and the signer given.
func NewWith(region, user string, creds aws.CredentialsProvider, sign Signer) *Tokens {
	return &Tokens{region: region, user: user, creds: creds, sign: sign}
}

// Password signs a fresh token for a new connection to addr (host:port),
// the server it dials: the token names the endpoint it was signed for.
func (t *Tokens) Password(ctx context.Context, addr string) (string, error) {
	if t.creds == nil {
		return "", fmt.Errorf("signing an RDS IAM token for %s@%s: no AWS credentials found", t.user, addr)
	}
	token, err := t.sign(ctx, addr, t.region, t.user, t.creds)
	if err != nil {
		return "", fmt.Errorf("signing an RDS IAM token for %s@%s in %s: %w", t.user, addr, t.region, err)
	}
	if token == "" {
		return "", fmt.Errorf("signing an RDS IAM token for %s@%s in %s: %w", t.user, addr, t.region, errEmpty)
	}
	return token, nil
}

var errEmpty = errors.New("the signer returned an empty token")
