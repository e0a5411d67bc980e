package config

import "github.com/agentfleet/fleet/queue/client"

// ClientOptions returns the options to reach url as the client name, with
// the credentials and TLS files of the nats section: the one mapping of the
// section onto client.ConnectOptions, for the worker and for enqueue alike.
// The configuration allows credentials and TLS only with nats.url set (the
// embedded server takes none), so for a URL derived from the embedded
// server's address they are empty.
func (n NATS) ClientOptions(url, name string) client.ConnectOptions {
	return client.ConnectOptions{
		URL:       url,
		Name:      name,
		CredsFile: n.Creds,
		NKeyFile:  n.NKeySeed,
		User:      n.User,
		Password:  n.Password,
		Token:     n.Token,
		TLSCert:   n.TLS.Cert,
		TLSKey:    n.TLS.Key,
		TLSCA:     n.TLS.CA,
	}
}
