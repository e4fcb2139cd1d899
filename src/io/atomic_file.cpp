// io/atomic_file.cpp — temporary file + rename.
#include "io/atomic_file.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace swift::io {

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SWIFT_CHECK(out.good(), "cannot write '{}'", tmp);
    out << text;
    out.flush();
    SWIFT_CHECK(out.good(), "writing '{}' failed (disk full?)", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SWIFT_CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace swift::io
