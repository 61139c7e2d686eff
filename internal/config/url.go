package config

import (
	"errors"
	"net/url"
)

func checkAMQPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return errors.New("must start with amqp:// or amqps://")
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	return nil
}

func withPassword(raw, password string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("not a URL")
	}
	user := "guest"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}
