// tests/io/test_gguf.cpp — GGUF reader: metadata of every value type, the tensor table, zero-copy views,
// and corrupt or truncated files (each must throw swift::Error naming the file, never crash).
//
// Invariants: every file is synthesized by tests/io/test_gguf_writer.h into a temporary directory; no file
// outside the test is read. Dequantization is in test_gguf_dequant.cpp, model mapping in test_gguf_model.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "io/gguf.h"
#include "test_gguf_writer.h"

namespace swift::test {
namespace {

using io::GgmlType;
using io::GgufFile;

// A small valid file: a few metadata entries and three tensors.
GgufWriter small_file() {
  GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.block_count", 2);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_str_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.tensor_f32("a.weight", {4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  w.tensor_f16("b.weight", {5}, {1, -2, 0.5f, 4, 8});
  Bytes q8(34, 0);
  patch<uint16_t>(q8, 0, 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(j - 16);
  w.tensor("c.weight", GgmlType::Q8_0, {32, 1}, q8);
  return w;
}

TEST(GgufReader, MetadataOfEveryType) {
  GgufWriter w;
  w.kv_scalar<uint8_t>("u8", kGgufU8, 250);
  w.kv_scalar<int8_t>("i8", kGgufI8, -100);
  w.kv_scalar<uint16_t>("u16", kGgufU16, 65000);
  w.kv_scalar<int16_t>("i16", kGgufI16, -32000);
  w.kv_u32("u32", 4000000000u);
  w.kv_i32("i32", -2000000000);
  w.kv_u64("u64", 18000000000000000000ull);
  w.kv_scalar<int64_t>("i64", kGgufI64, -9000000000000000000ll);
  w.kv_f32("f32", 1e-5f);
  w.kv_f32("f32_half", 0.5f);
  w.kv_scalar<double>("f64", kGgufF64, 0.1);
  w.kv_bool("yes", true);
  w.kv_bool("no", false);
  w.kv_str("str", "héllo\nworld");
  w.kv_str("empty_str", "");
  w.kv_str_array("strs", {"x", "", "zz"});
  {
    Bytes b;
    put<uint32_t>(b, kGgufI32);
    put<uint64_t>(b, 3);
    for (int32_t v : {1, -2, 3}) put<int32_t>(b, v);
    w.kv("i32s", kGgufArray, b);
  }
  {
    Bytes b;  // array of 2 arrays of u8: [[1, 2], []]
    put<uint32_t>(b, kGgufArray);
    put<uint64_t>(b, 2);
    put<uint32_t>(b, kGgufU8);
    put<uint64_t>(b, 2);
    put<uint8_t>(b, 1);
    put<uint8_t>(b, 2);
    put<uint32_t>(b, kGgufU8);
    put<uint64_t>(b, 0);
    w.kv("nested", kGgufArray, b);
  }
  {
    Bytes b;
    put<uint32_t>(b, kGgufF32);
    put<uint64_t>(b, 0);
    w.kv("empty_arr", kGgufArray, b);
  }
  {
    Bytes b;  // bools and float64 in arrays
    put<uint32_t>(b, kGgufBool);
    put<uint64_t>(b, 2);
    put<uint8_t>(b, 1);
    put<uint8_t>(b, 0);
    w.kv("bools", kGgufArray, b);
  }
  TempDir dir;
  const std::string path = dir.write("meta.gguf", w.build());
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.get_int("u8"), 250);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 65000);
  EXPECT_EQ(f.get_int("i16"), -32000);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.metadata("u64").get<uint64_t>(), 18000000000000000000ull);
  EXPECT_EQ(f.get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_float("f32"), 1e-5);  // shortest decimal of the float, as Hugging Face configs write it
  EXPECT_EQ(static_cast<float>(f.get_float("f32")), 1e-5f);
  EXPECT_EQ(f.get_float("f32_half"), 0.5);
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_float("i32"), -2000000000.0);  // integers read as floats too
  EXPECT_TRUE(f.metadata("yes").get<bool>());
  EXPECT_FALSE(f.metadata("no").get<bool>());
  EXPECT_EQ(f.get_string("str"), "héllo\nworld");
  EXPECT_EQ(f.get_string("empty_str"), "");
  EXPECT_EQ(f.metadata("strs"), nlohmann::json({"x", "", "zz"}));
  EXPECT_EQ(f.metadata("i32s"), nlohmann::json({1, -2, 3}));
  EXPECT_EQ(f.metadata("nested"), nlohmann::json::parse("[[1, 2], []]"));
  EXPECT_EQ(f.metadata("empty_arr"), nlohmann::json::array());
  EXPECT_EQ(f.metadata("bools"), nlohmann::json({true, false}));
  EXPECT_EQ(f.get_int_or("missing", 7), 7);
  EXPECT_EQ(f.get_float_or("missing", 2.5), 2.5);
  EXPECT_EQ(f.get_string_or("missing", "d"), "d");
  EXPECT_EQ(f.get_string_or("str", "d"), "héllo\nworld");
  EXPECT_TRUE(f.has("nested"));
  EXPECT_FALSE(f.has("missing"));
  EXPECT_EQ(f.all_metadata().size(), 20u);
  EXPECT_TRUE(f.tensors().empty());

  expect_error([&] { f.get_int("missing"); }, {path, "'missing'", "missing"});
  expect_error([&] { f.get_int("str"); }, {path, "'str'", "integer"});
  expect_error([&] { f.get_int("f32"); }, {path, "'f32'", "integer"});
  expect_error([&] { f.get_int("u64"); }, {path, "'u64'", "int64"});
  expect_error([&] { f.get_float("str"); }, {path, "'str'", "number"});
  expect_error([&] { f.get_string("u8"); }, {path, "'u8'", "string"});
  expect_error([&] { f.metadata("nope"); }, {path, "'nope'"});
}

TEST(GgufReader, TensorTableAndViews) {
  GgufWriter w = small_file();
  TempDir dir;
  const Bytes bytes = w.build();
  const std::string path = dir.write("small.gguf", bytes);
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_TRUE(f.contains("a.weight"));
  EXPECT_FALSE(f.contains("z.weight"));

  const auto& a = f.tensor_info("a.weight");
  EXPECT_EQ(a.type, GgmlType::F32);
  EXPECT_EQ(a.ne, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(a.shape(), (Shape{3, 4}));
  EXPECT_EQ(a.numel(), 12);
  EXPECT_EQ(a.bytes, 48u);
  EXPECT_EQ(a.offset, w.layout.data_pos["a.weight"]);
  EXPECT_EQ(a.offset % 32, 0u);
  const auto& c = f.tensor_info("c.weight");
  EXPECT_EQ(c.type, GgmlType::Q8_0);
  EXPECT_EQ(c.bytes, 34u);
  EXPECT_EQ(c.offset, w.layout.data_pos["c.weight"]);

  // F32 view: zero-copy into the mapping, row-major (3, 4).
  Tensor va = f.view("a.weight");
  EXPECT_EQ(va.shape(), (Shape{3, 4}));
  EXPECT_EQ(va.dtype(), DType::F32);
  EXPECT_EQ(static_cast<const void*>(va.data<float>()), static_cast<const void*>(f.data(a)));
  EXPECT_EQ(f.mapped_file()->data() + a.offset, f.data(a));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(va.item(i), i);
  // F16 view keeps F16; dequantize gives F32.
  Tensor vb = f.view("b.weight");
  EXPECT_EQ(vb.dtype(), DType::F16);
  EXPECT_EQ(vb.shape(), (Shape{5}));
  Tensor db = f.dequantize("b.weight");
  EXPECT_EQ(db.dtype(), DType::F32);
  const std::vector<float> b_expect = {1, -2, 0.5f, 4, 8};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(db.data<float>()[i], b_expect[i]);
  // Quantized: dequantize works, view refuses naming the tensor.
  Tensor dc = f.dequantize("c.weight");
  EXPECT_EQ(dc.shape(), (Shape{1, 32}));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(dc.data<float>()[j], 0.5f * static_cast<float>(j - 16));
  expect_error([&] { f.view("c.weight"); }, {path, "'c.weight'", "Q8_0"});
  expect_error([&] { f.tensor_info("z.weight"); }, {path, "'z.weight'"});
  expect_error([&] { f.dequantize("z.weight"); }, {path, "'z.weight'"});

  // The views keep the mapping alive after the GgufFile is gone.
  Tensor keep;
  {
    GgufFile g = GgufFile::open(path);
    keep = g.view("a.weight");
  }
  EXPECT_EQ(keep.item(11), 11.0);
}

TEST(GgufReader, CustomAlignmentAndVersion2) {
  GgufWriter w;
  w.version = 2;
  w.alignment = 64;
  w.kv_u32("general.alignment", 64);
  w.tensor_f32("x", {3}, {1, 2, 3});
  w.tensor_f32("y", {2, 2}, {4, 5, 6, 7});
  TempDir dir;
  const std::string path = dir.write("align.gguf", w.build());
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.tensor_info("y").offset, w.layout.data_pos["y"]);
  EXPECT_EQ(f.tensor_info("y").offset % 64, 0u);
  EXPECT_EQ(f.view("y").item(3), 7.0);
}

TEST(GgufReader, UnsupportedTypeOpensButCannotDequantize) {
  GgufWriter w;
  w.tensor("iq", static_cast<GgmlType>(16), {256}, Bytes(66, 0));  // IQ2_XXS: known geometry, no dequantizer
  TempDir dir;
  const std::string path = dir.write("iq.gguf", w.build());
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(std::string(io::ggml_type_name(f.tensor_info("iq").type)), "IQ2_XXS");
  expect_error([&] { f.dequantize("iq"); }, {path, "'iq'", "IQ2_XXS", "cannot be dequantized"});
}

// ---- corrupt files ------------------------------------------------------------------------------------------

struct Corrupt {
  TempDir dir;
  std::string path;
  void expect(const Bytes& bytes, const std::vector<std::string>& parts) {
    path = dir.write("bad.gguf", bytes);
    std::vector<std::string> all = {"'" + path + "'"};
    all.insert(all.end(), parts.begin(), parts.end());
    expect_error([&] { GgufFile::open(path); }, all);
  }
};

TEST(GgufCorrupt, BadMagic) {
  Corrupt c;
  Bytes b = small_file().build();
  b[0] = 'X';
  c.expect(b, {"not a GGUF file", "XGUF"});
  c.expect(Bytes{'G', 'G'}, {"not a GGUF file", "2 bytes"});
  c.expect(Bytes{}, {"not a GGUF file"});
}

TEST(GgufCorrupt, Versions) {
  Corrupt c;
  GgufWriter w = small_file();
  w.version = 1;
  c.expect(w.build(), {"version 1 is not supported"});
  w.version = 4;
  c.expect(w.build(), {"unsupported GGUF version 4"});
  w.version = 0x03000000;  // version 3 written big-endian
  c.expect(w.build(), {"big-endian"});
}

TEST(GgufCorrupt, HugeCounts) {
  Corrupt c;
  GgufWriter w = small_file();
  Bytes b = w.build();
  patch<uint64_t>(b, w.layout.tensor_count_pos, 1ull << 60);
  c.expect(b, {"tensor count", "impossible"});
  b = w.build();
  patch<uint64_t>(b, w.layout.kv_count_pos, 0xffffffffffffull);
  c.expect(b, {"metadata key/value count", "impossible"});
  b = w.build();  // array count past the file: the token list claims 2^40 strings
  patch<uint64_t>(b, w.layout.value_pos["tokenizer.ggml.tokens"] + 4, 1ull << 40);
  c.expect(b, {"array element count", "tokenizer.ggml.tokens"});
  b = w.build();  // one tensor more than the file holds: the next "tensor info" reads past the end
  patch<uint64_t>(b, w.layout.tensor_count_pos, 4);
  c.expect(b, {});
}

TEST(GgufCorrupt, StringLengthPastEof) {
  Corrupt c;
  GgufWriter w = small_file();
  Bytes b = w.build();
  patch<uint64_t>(b, w.layout.value_pos["general.architecture"], 1ull << 33);
  c.expect(b, {"string length", "general.architecture", "past the end of the file"});
  // A key whose length runs past the end.
  GgufWriter w2;
  w2.kv_str("k", "v");
  b = w2.build();
  patch<uint64_t>(b, 24, 1000);  // the first key's length (after magic, version and the two counts)
  c.expect(b, {"string length 1000", "metadata entry #0"});
}

TEST(GgufCorrupt, TensorOffsets) {
  Corrupt c;
  GgufWriter w = small_file();
  Bytes b = w.build();
  const auto start = w.layout.data_start;
  patch<uint64_t>(b, w.layout.offset_pos["a.weight"], ((b.size() - start) / 32 + 1) * 32);  // aligned, past the end
  c.expect(b, {"tensor 'a.weight' data [", "extends past the end of the file", "truncated"});
  b = w.build();
  patch<uint64_t>(b, w.layout.offset_pos["c.weight"], 0xffffffffffffffe0ull);  // aligned, overflows
  c.expect(b, {"tensor 'c.weight'", "past the end of the file"});
  b = w.build();
  patch<uint64_t>(b, w.layout.offset_pos["b.weight"], 33);
  c.expect(b, {"tensor 'b.weight'", "offset 33", "alignment 32"});
  b = w.build();  // the last tensor's data cut short
  b.resize(b.size() - 1);
  c.expect(b, {"tensor 'c.weight' data [", "truncated; download it again"});
}

TEST(GgufCorrupt, TensorInfoFields) {
  Corrupt c;
  GgufWriter w = small_file();
  Bytes b = w.build();
  patch<uint32_t>(b, w.layout.type_pos["b.weight"], 5);  // removed Q4_2
  c.expect(b, {"tensor 'b.weight'", "unknown ggml type 5"});
  b = w.build();
  patch<uint32_t>(b, w.layout.type_pos["b.weight"], 1000);
  c.expect(b, {"unknown ggml type 1000"});
  b = w.build();
  patch<uint32_t>(b, w.layout.ndims_pos["a.weight"], 5);
  c.expect(b, {"tensor 'a.weight'", "5 dimensions"});
  b = w.build();
  patch<uint32_t>(b, w.layout.ndims_pos["a.weight"], 0);
  c.expect(b, {"tensor 'a.weight'", "0 dimensions"});
  b = w.build();
  patch<int64_t>(b, w.layout.ndims_pos["a.weight"] + 4, -4);
  c.expect(b, {"tensor 'a.weight'", "negative size"});
  b = w.build();  // Q8_0 rows must be whole 32-element blocks
  patch<int64_t>(b, w.layout.ndims_pos["c.weight"] + 4, 16);
  c.expect(b, {"tensor 'c.weight'", "not a whole number of 32-element blocks"});
  b = w.build();  // dims whose product overflows int64
  patch<int64_t>(b, w.layout.ndims_pos["a.weight"] + 4, int64_t{1} << 40);
  patch<int64_t>(b, w.layout.ndims_pos["a.weight"] + 12, int64_t{1} << 40);
  c.expect(b, {"tensor 'a.weight'", "overflow"});
  b = w.build();  // a huge but representable tensor: its data runs past the end
  patch<int64_t>(b, w.layout.ndims_pos["a.weight"] + 12, int64_t{1} << 40);
  c.expect(b, {"tensor 'a.weight' data", "past the end"});
}

TEST(GgufCorrupt, MetadataValues) {
  Corrupt c;
  {
    GgufWriter w;
    w.kv_u32("x", 1);
    Bytes b = w.build();
    patch<uint32_t>(b, w.layout.value_pos["x"] - 4, 13);
    c.expect(b, {"key 'x'", "unknown value type 13"});
  }
  {
    GgufWriter w;
    Bytes arr;
    put<uint32_t>(arr, 99);
    put<uint64_t>(arr, 1);
    w.kv("arr", kGgufArray, arr);
    c.expect(w.build(), {"unknown array element type 99", "'arr'"});
  }
  {
    GgufWriter w;
    w.kv_scalar<uint8_t>("flag", kGgufBool, 2);
    c.expect(w.build(), {"bool value 2", "'flag'"});
  }
  {
    GgufWriter w;
    w.kv_u32("dup", 1);
    w.kv_u32("dup", 2);
    c.expect(w.build(), {"'dup' appears twice"});
  }
  {
    GgufWriter w;
    w.kv_u32("general.alignment", 24);
    c.expect(w.build(), {"general.alignment", "power of two"});
  }
  {
    GgufWriter w;
    w.tensor_f32("t", {1}, {1});
    w.tensor_f32("t", {1}, {2});
    c.expect(w.build(), {"'t' appears twice"});
  }
  {
    GgufWriter w;  // arrays nested 100 deep
    Bytes nested;
    for (int i = 0; i < 100; ++i) {
      put<uint32_t>(nested, kGgufArray);
      put<uint64_t>(nested, 1);
    }
    put<uint32_t>(nested, kGgufU8);
    put<uint64_t>(nested, 0);
    w.kv("deep", kGgufArray, nested);
    c.expect(w.build(), {"nested deeper", "'deep'"});
  }
}

// Every prefix of a valid file is a truncated file: each must throw naming the file, none may crash.
TEST(GgufCorrupt, EveryTruncationThrows) {
  GgufWriter w = small_file();
  const Bytes full = w.build();
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string path = dir.write("cut.gguf", Bytes(full.begin(), full.begin() + static_cast<long>(n)));
    try {
      GgufFile::open(path);
      // Only the data section's zero padding after the last tensor may be cut without harm; there is none.
      ADD_FAILURE() << "a file cut to " << n << " of " << full.size() << " bytes opened";
    } catch (const swift::Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

// Random byte changes in the header and tables: open() either succeeds or throws swift::Error; when it
// succeeds every tensor can be read within the file.
TEST(GgufCorrupt, RandomBytesNeverCrash) {
  GgufWriter w = small_file();
  const Bytes full = w.build();
  TempDir dir;
  std::mt19937 rng(12345);
  int opened = 0;
  for (int trial = 0; trial < 600; ++trial) {
    Bytes b = full;
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < changes; ++k) b[rng() % w.layout.data_start] = static_cast<uint8_t>(rng());
    const std::string path = dir.write("fuzz.gguf", b);
    try {
      GgufFile f = GgufFile::open(path);
      ++opened;
      for (const auto& t : f.tensors()) {
        ASSERT_LE(t.offset + t.bytes, b.size());
        if (io::ggml_type_dequantizable(t.type) && t.numel() < (1 << 20)) f.dequantize(t.name);
      }
    } catch (const swift::Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace swift::test
