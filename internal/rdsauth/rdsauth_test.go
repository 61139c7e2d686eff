package rdsauth_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/binlog-relay/binlog-relay/internal/rdsauth"
)

const secretKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

func staticCreds() aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: secretKey, Source: "test"}, nil
	})
}

// The SDK's signer, offline: the token is a presigned connect request for
// the user at the endpoint dialled, valid 15 minutes, signed for rds-db in
// the region, and never holds the secret key.
func TestSDKTokenNamesEndpointUserAndLifetime(t *testing.T) {
	tokens := rdsauth.NewWith("eu-west-1", "relay", staticCreds(), rdsauth.BuildAuthToken)
	tok, err := tokens.Password(context.Background(), "db-1.abc.eu-west-1.rds.amazonaws.com:3306")
	if err != nil {
		t.Fatal(err)
	}
	host, query, ok := strings.Cut(tok, "?")
	if !ok || host != "db-1.abc.eu-west-1.rds.amazonaws.com:3306" {
		t.Fatalf("token does not start with the endpoint: %q", tok)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	if q.Get("Action") != "connect" || q.Get("DBUser") != "relay" || q.Get("X-Amz-Expires") != "900" ||
		!strings.Contains(q.Get("X-Amz-Credential"), "/eu-west-1/rds-db/aws4_request") || q.Get("X-Amz-Signature") == "" {
		t.Fatalf("token query: %v", q)
	}
	if strings.Contains(tok, secretKey) {
		t.Fatal("the token holds the secret key")
	}
	other, err := tokens.Password(context.Background(), "db-2.abc.eu-west-1.rds.amazonaws.com:3306")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(other, "db-2.") {
		t.Fatalf("a token for another host is signed for %q", other)
	}
}

// Every Password call signs anew, for the address asked: nothing is cached.
func TestEachPasswordIsSignedAfresh(t *testing.T) {
	var addrs []string
	n := 0
	fake := func(_ context.Context, endpoint, region, user string, _ aws.CredentialsProvider) (string, error) {
		n++
		addrs = append(addrs, endpoint)
		if region != "eu-west-1" || user != "relay" {
			t.Errorf("signed for %s in %s", user, region)
		}
		return fmt.Sprintf("token-%d", n), nil
	}
	tokens := rdsauth.NewWith("eu-west-1", "relay", staticCreds(), fake)
	seen := map[string]bool{}
	for _, addr := range []string{"a:3306", "a:3306", "b:3307"} {
		tok, err := tokens.Password(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok] {
			t.Fatalf("token %q handed out twice", tok)
		}
		seen[tok] = true
	}
	if strings.Join(addrs, ",") != "a:3306,a:3306,b:3307" {
		t.Fatalf("signed for %v", addrs)
	}
}

// A failure to sign says for whom and where, and holds no secret.
func TestSigningErrorsNameTheConnectionNotTheSecret(t *testing.T) {
	denied := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no EC2 IMDS role found")
	})
	_, err := rdsauth.NewWith("eu-west-1", "relay", denied, rdsauth.BuildAuthToken).Password(context.Background(), "db:3306")
	if err == nil || !strings.Contains(err.Error(), "relay@db:3306") || !strings.Contains(err.Error(), "no EC2 IMDS role found") {
		t.Fatalf("error: %v", err)
	}
	_, err = rdsauth.NewWith("eu-west-1", "relay", staticCreds(), func(context.Context, string, string, string, aws.CredentialsProvider) (string, error) {
		return "", nil
	}).Password(context.Background(), "db:3306")
	if err == nil || !strings.Contains(err.Error(), "empty token") {
		t.Fatalf("an empty token was accepted: %v", err)
	}
	_, err = rdsauth.NewWith("eu-west-1", "relay", nil, rdsauth.BuildAuthToken).Password(context.Background(), "db:3306")
	if err == nil || strings.Contains(err.Error(), secretKey) {
		t.Fatalf("no credentials: %v", err)
	}
}
