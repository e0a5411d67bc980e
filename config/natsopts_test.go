package config

import (
	"testing"

	"github.com/agentfleet/fleet/queue/client"
)

func TestClientOptionsMapsTheNATSSection(t *testing.T) {
	t.Parallel()
	n := NATS{URL: "nats://a:4222", Creds: "c", NKeySeed: "k", User: "u", Password: "p", Token: "t",
		TLS: TLS{CA: "ca", Cert: "cert", Key: "key"}}
	got := n.ClientOptions("nats://b:4222", "fleet-x")
	want := client.ConnectOptions{URL: "nats://b:4222", Name: "fleet-x", CredsFile: "c", NKeyFile: "k", User: "u",
		Password: "p", Token: "t", TLSCA: "ca", TLSCert: "cert", TLSKey: "key"}
	if got != want {
		t.Fatalf("ClientOptions = %+v\nwant            %+v", got, want)
	}
}
