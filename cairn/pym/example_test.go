package pym_test

import (
	"fmt"

	"github.com/agentfleet/fleet/cairn/pym"
)

func ExampleParse() {
	src := `from grail import external, Input

path: str = Input("path")  # file to read
limit: int = Input("limit", default=80)
node_text: str = Input("node_text", default="")

@external
async def read_file(path: str) -> str:
    ...

text = await read_file(path)
[n for n, line in enumerate(text.splitlines(), 1) if len(line) > limit]
`
	f, err := pym.Parse("tools/long_lines.pym", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(f.Schema()))
	for _, e := range f.Externals {
		fmt.Printf("external %s async=%v returns %s\n", e.Name, e.Async, e.Returns)
	}
	fmt.Printf("%q\n", f.Script.Code[:44])
	// Output:
	// {"type":"object","properties":{"path":{"type":"string","description":"file to read"},"limit":{"type":"integer","default":80}},"required":["path"],"additionalProperties":false}
	// external read_file async=true returns str
	// "\n\npath: str = Input(\"path\")  # file to read\n"
}
