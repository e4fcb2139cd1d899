// tests/io/test_safetensors.cpp — safetensors round trips for every dtype, zero-copy views, the writer's layout
// and atomicity, and one test per kind of corrupt or truncated file (each must throw swift::Error naming the
// file, and the tensor where there is one).
//
// Invariants: every test works in its own fresh temporary directory, removed afterwards; corrupt files are
// built byte by byte here, so no fixture file is needed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace swift::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "swift_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes a safetensors file from its parts; `header_len` overrides the length field when >= 0.
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                        int64_t header_len = -1) {
    std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    uint64_t len = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
    out << header << data;
    return p;
  }

  // Opens `file` expecting a swift::Error; returns its message.
  static std::string open_error(const std::string& file) {
    try {
      SafetensorsFile::open(file);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "opening " << file << " did not throw";
    return "";
  }

  std::string dir_;
};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (needle) << "' not in: " << (haystack)

Tensor make_tensor(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    bytes[i] = static_cast<uint8_t>((i * 131 + static_cast<size_t>(seed) * 17 + 7) & 0xff);
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// ---- round trips ---------------------------------------------------------------------------------------
TEST_F(Safetensors, RoundTripEveryDtypeBitExact) {
  std::map<std::string, Tensor> tensors = {
      {"a.f32", make_tensor({3, 5}, DType::F32, 1)},   {"b.bf16", make_tensor({7}, DType::BF16, 2)},
      {"c.f16", make_tensor({2, 3, 5}, DType::F16, 3)}, {"d.i32", make_tensor({11}, DType::I32, 4)},
      {"e.i64", make_tensor({1, 13}, DType::I64, 5)},   {"f.u8", make_tensor({5}, DType::U8, 6)},
      {"g.scalar", make_tensor({}, DType::F32, 7)},     {"h.empty", make_tensor({0, 4}, DType::BF16, 8)},
  };
  // Special float values must survive bit for bit.
  float* f = tensors["a.f32"].data<float>();
  f[0] = std::numeric_limits<float>::quiet_NaN();
  f[1] = -0.0f;
  f[2] = std::numeric_limits<float>::infinity();
  const std::string file = path("all.safetensors");
  save_safetensors(file, tensors, {{"format", "pt"}, {"note", "round trip"}});
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.path(), file);
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : tensors) expected_names.push_back(name);
  EXPECT_EQ(st.names(), expected_names);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "round trip");
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(st.contains(name));
    Tensor back = st.tensor(name);
    EXPECT_TRUE(same_bytes(back, t)) << name << ": " << back.str() << " vs " << t.str();
    EXPECT_EQ(st.entry(name).dtype, t.dtype());
    EXPECT_EQ(st.entry(name).shape, t.shape());
    EXPECT_EQ(st.entry(name).end - st.entry(name).begin, t.nbytes());
  }
  EXPECT_TRUE(std::isnan(st.tensor("a.f32").item(0)));
  EXPECT_TRUE(std::signbit(st.tensor("a.f32").item(1)));
}

TEST_F(Safetensors, LayoutIsAlignedContiguousAndPadded) {
  // Odd-sized U8 and F16 tensors must not misalign the wider ones (the writer orders by element size).
  std::map<std::string, Tensor> tensors = {
      {"a.u8", make_tensor({3}, DType::U8, 1)},    {"b.f32", make_tensor({5}, DType::F32, 2)},
      {"c.f16", make_tensor({3}, DType::F16, 3)},  {"d.i64", make_tensor({3}, DType::I64, 4)},
      {"e.bf16", make_tensor({1}, DType::BF16, 5)}, {"f.i32", make_tensor({3}, DType::I32, 6)},
  };
  const std::string file = path("layout.safetensors");
  save_safetensors(file, tensors);

  std::ifstream in(file, std::ios::binary);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  EXPECT_EQ(len % 8, 0u) << "header must be padded to 8 bytes";
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  EXPECT_EQ(header.find_last_not_of(' ') + 1, json::parse(header).dump().size()) << "padding must be spaces";

  SafetensorsFile st = SafetensorsFile::open(file);
  // Contiguous, no holes, in the order I64, F32, I32, BF16, F16, U8.
  std::vector<std::string> order = {"d.i64", "b.f32", "f.i32", "e.bf16", "c.f16", "a.u8"};
  size_t offset = 0;
  for (const std::string& name : order) {
    const SafetensorsEntry& e = st.entry(name);
    EXPECT_EQ(e.begin, offset) << name;
    EXPECT_EQ(e.begin % static_cast<size_t>(dtype_info(e.dtype).block_bytes), 0u) << name;
    offset = e.end;
  }
  EXPECT_EQ(fs::file_size(file), 8 + len + offset);
  for (const auto& [name, t] : tensors) {
    Tensor v = st.tensor(name);
    EXPECT_FALSE(v.storage()->owned()) << name << " should be a zero-copy view";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.raw()) % static_cast<uintptr_t>(dtype_info(v.dtype()).block_bytes), 0u);
  }
}

TEST_F(Safetensors, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  const std::string file = path("keep.safetensors");
  save_safetensors(file, {{"w", Tensor::from_f32({2, 2}, {1, 2, 3, 4})}});
  Tensor w;
  {
    SafetensorsFile st = SafetensorsFile::open(file);
    w = st.tensor("w");
    EXPECT_FALSE(w.storage()->owned());
    EXPECT_EQ(st.tensor("w").raw(), w.raw()) << "two views of one tensor share the mapped bytes";
  }
  fs::remove(file);  // the mapping outlives both the SafetensorsFile and the directory entry
  EXPECT_EQ(w.item(0), 1.0);
  EXPECT_EQ(w.item(3), 4.0);
}

TEST_F(Safetensors, MisalignedTensorIsCopiedCorrectly) {
  // A header not padded to 8 bytes: the F32 tensor cannot be viewed in place.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data(8, '\0');
  float values[2] = {1.5f, -2.25f};
  std::memcpy(data.data(), values, 8);
  while ((8 + header.size()) % 8 != 3) header += ' ';  // the data block starts at 3 mod 8 (mappings are paged)
  SafetensorsFile st = SafetensorsFile::open(write_raw("misaligned.safetensors", header, data));
  Tensor x = st.tensor("x");
  EXPECT_TRUE(x.storage()->owned());
  EXPECT_EQ(x.item(0), 1.5);
  EXPECT_EQ(x.item(1), -2.25);
}

TEST_F(Safetensors, HeaderWithOnlyMetadataOrNothing) {
  SafetensorsFile empty = SafetensorsFile::open(write_raw("empty_obj.safetensors", "{}", ""));
  EXPECT_TRUE(empty.names().empty());
  SafetensorsFile meta = SafetensorsFile::open(
      write_raw("meta.safetensors", R"({"__metadata__":{"format":"pt","n":3}})", ""));
  EXPECT_EQ(meta.metadata().at("format"), "pt");
  EXPECT_EQ(meta.metadata().at("n"), "3");  // tolerated: a non-string value keeps its JSON text
}

TEST_F(Safetensors, SaveReplacesAtomicallyAndRejectsNf4) {
  const std::string file = path("w.safetensors");
  save_safetensors(file, {{"a", Tensor::from_f32({1}, {1})}});
  Tensor old_view = SafetensorsFile::open(file).tensor("a");
  save_safetensors(file, {{"b", Tensor::from_f32({1}, {2})}, {"a_again", old_view}});
  SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_FALSE(st.contains("a"));
  EXPECT_EQ(st.tensor("b").item(0), 2.0);
  EXPECT_EQ(st.tensor("a_again").item(0), 1.0);
  EXPECT_EQ(old_view.item(0), 1.0) << "a view of the replaced file must stay valid (rename, not overwrite)";

  try {
    save_safetensors(path("nf4.safetensors"), {{"q", Tensor::empty({8}, DType::NF4)}});
    ADD_FAILURE() << "NF4 must be refused";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "'q'");
    EXPECT_CONTAINS(e.what(), "nf4.safetensors");
  }
  EXPECT_FALSE(fs::exists(path("nf4.safetensors")));
  EXPECT_FALSE(fs::exists(path("nf4.safetensors.tmp")));

  try {
    save_safetensors(path("no/such/dir/x.safetensors"), {{"a", Tensor::from_f32({1}, {1})}});
    ADD_FAILURE() << "writing into a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "no/such/dir/x.safetensors");
  }
}

TEST_F(Safetensors, MissingTensorNamesFileAndTensor) {
  const std::string file = path("one.safetensors");
  save_safetensors(file, {{"present", Tensor::from_f32({1}, {1})}});
  SafetensorsFile st = SafetensorsFile::open(file);
  try {
    st.tensor("absent");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "'absent'");
    EXPECT_CONTAINS(e.what(), file);
    EXPECT_CONTAINS(e.what(), "present");
  }
}

// ---- corrupt and truncated files ------------------------------------------------------------------------
TEST_F(Safetensors, EmptyFileThrows) {
  std::string file = path("empty.safetensors");
  std::ofstream(file).close();
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "too small");
  EXPECT_CONTAINS(msg, "re-download");
}

TEST_F(Safetensors, ShortFileThrows) {
  std::string file = path("short.safetensors");
  std::ofstream(file, std::ios::binary) << "abc";
  EXPECT_CONTAINS(open_error(file), file);
}

TEST_F(Safetensors, MissingFileThrows) { EXPECT_CONTAINS(open_error(path("nope.safetensors")), "nope.safetensors"); }

TEST_F(Safetensors, HeaderLengthPastEndOfFileThrows) {
  std::string file = write_raw("past.safetensors", "{}", "", 1000);
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "header length 1000");
  // A huge length must not overflow the bounds check.
  EXPECT_CONTAINS(open_error(write_raw("huge.safetensors", "{}", "", INT64_MAX)), "huge.safetensors");
}

TEST_F(Safetensors, HeaderLengthTooSmallThrows) {
  EXPECT_CONTAINS(open_error(write_raw("zero.safetensors", "{}", "", 0)), "zero.safetensors");
  EXPECT_CONTAINS(open_error(write_raw("one.safetensors", "{}", "", 1)), "header length 1");
}

TEST_F(Safetensors, BadJsonThrows) {
  std::string file = write_raw("bad.safetensors", R"({"x": {"dtype": "F32", )", "");
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "JSON");
  EXPECT_CONTAINS(open_error(write_raw("array.safetensors", "[1, 2]", "")), "array.safetensors");
}

TEST_F(Safetensors, OffsetsOutsideDataBlockThrow) {
  std::string file = write_raw("outside.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                               std::string(16, '\0'));
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "past the data block");
}

TEST_F(Safetensors, TruncatedDataThrows) {
  const std::string file = path("trunc.safetensors");
  save_safetensors(file, {{"a", make_tensor({64}, DType::F32, 1)}, {"b", make_tensor({64}, DType::F32, 2)}});
  fs::resize_file(file, fs::file_size(file) - 3);
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "'b'");  // the last tensor is the one cut short
  EXPECT_CONTAINS(msg, "truncated or corrupt");
}

TEST_F(Safetensors, WrongSizeThrows) {
  std::string file = write_raw("size.safetensors", R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})",
                               std::string(16, '\0'));
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "needs 12");
}

TEST_F(Safetensors, OverlapThrows) {
  std::string file = write_raw("overlap.safetensors",
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               std::string(16, '\0'));
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "'a'");
  EXPECT_CONTAINS(msg, "'b'");
  EXPECT_CONTAINS(msg, "overlaps");
  // Empty tensors may share an offset with anything.
  SafetensorsFile ok = SafetensorsFile::open(write_raw(
      "empty_ok.safetensors",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
      std::string(8, '\0')));
  EXPECT_EQ(ok.tensor("z").numel(), 0);
}

TEST_F(Safetensors, UnsupportedAndUnknownDtypesThrow) {
  std::string file = write_raw("f64.safetensors", R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                               std::string(8, '\0'));
  std::string msg = open_error(file);
  EXPECT_CONTAINS(msg, "unsupported dtype F64 for tensor 'x' in file '" + file + "'");
  for (const char* dtype : {"I8", "BOOL", "F8_E4M3", "U16"}) {
    std::string f = write_raw(std::string(dtype) + ".safetensors",
                              std::string(R"({"t":{"dtype":")") + dtype + R"(","shape":[1],"data_offsets":[0,1]}})",
                              std::string(8, '\0'));
    EXPECT_CONTAINS(open_error(f), std::string("unsupported dtype ") + dtype + " for tensor 't'");
  }
  std::string unknown = write_raw("xyz.safetensors", R"({"t":{"dtype":"XYZ","shape":[1],"data_offsets":[0,1]}})",
                                  std::string(8, '\0'));
  msg = open_error(unknown);
  EXPECT_CONTAINS(msg, "unknown dtype 'XYZ'");
  EXPECT_CONTAINS(msg, "'t'");
  EXPECT_CONTAINS(msg, unknown);
}

TEST_F(Safetensors, MalformedEntriesThrow) {
  struct Case {
    const char* name;
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {"no_dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", "dtype"},
      {"neg_shape", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "shape"},
      {"float_shape", R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "shape"},
      {"no_offsets", R"({"t":{"dtype":"F32","shape":[1]}})", "data_offsets"},
      {"three_offsets", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "data_offsets"},
      {"neg_offset", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "data_offsets"},
      {"reversed", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "end before"},
      {"not_object", R"({"t":[1,2]})", "object"},
      {"overflow", R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "overflow"},
      {"bad_meta", R"({"__metadata__":[1]})", "__metadata__"},
  };
  for (const Case& c : cases) {
    std::string file = write_raw(std::string(c.name) + ".safetensors", c.header, std::string(8, '\0'));
    std::string msg = open_error(file);
    EXPECT_CONTAINS(msg, file);
    EXPECT_CONTAINS(msg, c.expect);
    if (std::string(c.name) != "bad_meta") {
      EXPECT_CONTAINS(msg, "'t'");
    }
  }
}

}  // namespace
}  // namespace swift::io
