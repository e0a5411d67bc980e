package config_test

import (
	"fmt"

	"github.com/agentfleet/fleet/config"
)

func ExampleConfig_Validate() {
	c := config.Default()
	c.Worker.Slots = 0
	c.Model.Backend = "remote"
	fmt.Println(c.Validate())
	// Output:
	// config: worker.slots must be >= 1, got 0
	// config: model.remote.base_url is required with model.backend: remote
}

func ExampleEnvVar() {
	fmt.Println(config.EnvVar("nats.tls.ca"), config.EnvVar("worker.slots"))
	// Output: FLEET_NATS_TLS_CA FLEET_WORKER_SLOTS
}
