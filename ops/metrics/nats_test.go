package metrics

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNATSConnectionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, reg, nil)
	mfs := scrape(t, srv)
	want(t, mfs, 0, "fleet_nats_disconnects_total")
	want(t, mfs, 0, "fleet_nats_reconnects_total")
	if _, ok := mfs["fleet_nats_connected"]; ok {
		t.Error("fleet_nats_connected reported without a function")
	}

	var up atomic.Bool
	m.SetNATSConnectedFunc(up.Load)
	want(t, scrape(t, srv), 0, "fleet_nats_connected")
	up.Store(true)
	want(t, scrape(t, srv), 1, "fleet_nats_connected")

	m.NATSDisconnected()
	up.Store(false)
	m.NATSDisconnected()
	m.NATSReconnected()
	mfs = scrape(t, srv)
	want(t, mfs, 2, "fleet_nats_disconnects_total")
	want(t, mfs, 1, "fleet_nats_reconnects_total")
	want(t, mfs, 0, "fleet_nats_connected")

	m.SetNATSConnectedFunc(nil)
	if _, ok := scrape(t, srv)["fleet_nats_connected"]; ok {
		t.Error("fleet_nats_connected still reported after SetNATSConnectedFunc(nil)")
	}
}
