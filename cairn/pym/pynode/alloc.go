package pynode

/*
#include <stddef.h>
// ts_set_allocator is tree-sitter's (lib.c, built by go-tree-sitter).
extern void ts_set_allocator(void *(*)(size_t), void *(*)(size_t, size_t), void *(*)(void *, size_t), void (*)(void *));
static void pynode_c_allocator(void) { ts_set_allocator(NULL, NULL, NULL, NULL); }
*/
import "C"

// go-tree-sitter routes every allocation of the C library through a Go
// callback (a call back into Go per malloc and free), which costs a parse
// about a third more CPU (docs/PYNODE.md); its init has run by now, so this
// sets tree-sitter back to its default, the C library's malloc family.
// Memory stays compatible: the Go callbacks call the same C malloc.
func init() {
	C.pynode_c_allocator()
}
