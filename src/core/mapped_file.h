// core/mapped_file.h — read-only memory map of a whole file.
//
// Invariants:
//  - A MappedFile is immutable and shared (std::shared_ptr); tensors viewing it keep it alive.
//  - Opening a missing or unreadable file throws swift::Error naming the path and the OS reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace swift {

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace swift
