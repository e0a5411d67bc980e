package ledger_test

import (
	"testing"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
)

// The conformance suite on its three targets: the in-memory fake, the
// JetStream ledger on one embedded server, and the JetStream ledger on a
// 3-node cluster with R3 streams.

func TestConformanceMemory(t *testing.T) {
	ledgertest.Run(t, ledgertest.MemoryHarness)
}

func TestConformanceSingleNode(t *testing.T) {
	ledgertest.Run(t, jsHarnessOn(ledger.SingleNode))
}

func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ledgertest.Run(t, jsHarnessOn(ledger.R3Cluster))
}

// The Broker side's suite on the in-memory fake and on one embedded server.

func TestBrokerConformanceMemory(t *testing.T) {
	ledgertest.RunBroker(t, ledgertest.MemoryBrokerHarness)
}

func TestBrokerConformanceSingleNode(t *testing.T) {
	ledgertest.RunBroker(t, func(t *testing.T) ledgertest.BrokerHarness { return newJSHarness(t, ledger.SingleNode(t)) })
}
