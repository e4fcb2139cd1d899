// io/atomic_file.h — whole-file writes that never leave a half-written file: write `path`.tmp, flush, rename.
#pragma once

#include <string>

namespace swift::io {

// Writes `text` to `path` through `path`.tmp and a rename; throws naming the file on any failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace swift::io
