// io/safetensors.h — read (mmap, zero-copy) and write safetensors files.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [b, e]},
// "__metadata__": {str: str}}, then the data block; offsets are relative to the data block.
//
// Invariants:
//  - Opening validates everything before any tensor is handed out: header length within the file, JSON
//    well-formed, known dtypes, offsets inside the data block, end - begin == numel * dtype size, no
//    overlapping tensors. A corrupt or truncated file throws swift::Error naming the file and the tensor.
//  - Tensors returned by `tensor()` view the mapping (no copy) and keep it alive.
//  - Writing goes to "<path>.tmp" and is renamed into place, so a crash never leaves a half-written file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace swift::io {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0;  // byte offsets into the data block
  size_t end = 0;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming file and tensor
  std::vector<std::string> names() const;                         // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Zero-copy CPU view of the tensor's bytes in the mapping.
  Tensor tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  size_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any dtype but NF4; non-CPU ones are copied to the CPU) atomically. The data block is laid
// out as the safetensors library does: by element size, largest first, then by name, so every tensor is
// aligned to its element size without holes.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace swift::io
