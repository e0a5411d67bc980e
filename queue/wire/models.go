package wire

import "github.com/agentfleet/fleet/fleettype"

// Models (docs/PROTOCOL.md "Models"): GGUF models and LoRA adapters kept
// in a JetStream Object Store bucket, one object per version, named
// "<name>@<version>", with the metadata below (the sha256 is computed by
// the pusher and checked again by every worker that fetches the object).
const (
	// BucketModels is the Object Store bucket of models and adapters.
	BucketModels = "fleet_models"
	// ModelMetaName .. ModelMetaArch are the object metadata keys.
	ModelMetaName    = "fleet-name"
	ModelMetaVersion = "fleet-version"
	ModelMetaKind    = "fleet-kind"
	ModelMetaSHA256  = "fleet-sha256"
	ModelMetaSize    = "fleet-size"
	ModelMetaArch    = "fleet-arch"
	// ModelMetaTrainPrefix prefixes the training metadata a model trained
	// by fleet-train carries (its GGUF keys general.fleet.train.<key>,
	// stored as fleet-train-<key>): data digest, hyper-parameters, final
	// losses, eval score.
	ModelMetaTrainPrefix = "fleet-train-"
)

// CodeModelUnavailable fails a job whose agent names a model or adapter
// that cannot be used: not in the store, not matching its digest, not a
// loadable GGUF, a missing local file. Not retried.
const CodeModelUnavailable fleettype.ErrorCode = "QUEUE_009"
