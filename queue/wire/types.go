package wire

// Node is the source node a job works on (docs/PROTOCOL.md §5).
type Node struct {
	// ID identifies the node within its project (for example "path.py::func").
	ID string `json:"id" msgpack:"id"`
	// Name is the function or class name, or the file name for a whole file.
	Name string `json:"name" msgpack:"name"`
	// Type is "function", "class", "method", "file" or empty.
	Type string `json:"type" msgpack:"type"`
	// FilePath is the node's file, relative to the workspace root.
	FilePath string `json:"file_path" msgpack:"file_path"`
	// Text is the node's source text.
	Text string `json:"text" msgpack:"text"`
}
