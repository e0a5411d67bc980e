package metrics

// NATSDisconnected counts a drop of the worker's NATS connection
// (fleet_nats_disconnects_total). Call it from the connection's disconnect
// handler.
func (m *Metrics) NATSDisconnected() { m.natsDown.Inc() }

// NATSReconnected counts the connection coming back after a drop
// (fleet_nats_reconnects_total). Call it from the reconnect handler.
func (m *Metrics) NATSReconnected() { m.natsUp.Inc() }

// SetNATSConnectedFunc sets the function read at each scrape for
// fleet_nats_connected: 1 when it returns true (the connection is up), 0
// otherwise. Pass one that reports false until the first connection exists,
// so a worker waiting for its server says so. nil removes the series.
func (m *Metrics) SetNATSConnectedFunc(f func() bool) {
	m.fc.conn.Store(&f)
}
