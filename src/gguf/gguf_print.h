// print_gguf: the human-readable listing behind `omnibus inspect FILE.gguf`:
// a header summary, the metadata table, the tensor table and totals per dtype.
//
// Arrays are abbreviated to 8 elements and strings to 120 characters unless
// show_all_array_elements is set (then both are printed in full).
//
// Thread-safety: reads the (immutable) file; writes only to `out`.
#pragma once

#include <cstdio>

#include "gguf/gguf_file.h"

namespace omnibus {

void print_gguf(const GgufFile& f, std::FILE* out, bool show_all_array_elements = false);

}  // namespace omnibus
