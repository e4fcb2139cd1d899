// tests/ops/test_gemm_choice_cache.cpp — ops/gemm_choice_cache.h (the on-disk record of SWIFT_GEMM_AUTOTUNE's
// choices): a missing file is empty, a recorded choice is read back by a later process, two processes' saves merge,
// a malformed or foreign file is refused naming it, an unwritable place costs a warning and keeps the choice in
// memory, and the file's place follows SWIFT_GEMM_AUTOTUNE_CACHE / XDG_CACHE_HOME / HOME. Pure C++: runs without CUDA.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "op_test_util.h"
#include "ops/gemm_choice_cache.h"

namespace swift::test {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("swift-gemm-cache-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

TEST(GemmChoiceCache, RecordsAreReadBackByALaterProcess) {
  TempDir dir;
  const std::string file = (dir.path / "sub" / "gemm-autotune.json").string();  // the directory is created
  {
    ops::GemmChoiceCache cache(file);
    EXPECT_FALSE(cache.find("GPU A", "t01 n8 m8 k8").has_value()) << "a missing file is an empty record";
    cache.record("GPU A", "t01 n8 m8 k8", 3);
    cache.record("GPU B", "t01 n8 m8 k8", 0);
    EXPECT_EQ(cache.find("GPU A", "t01 n8 m8 k8"), 3);
  }
  ASSERT_TRUE(fs::exists(file));
  for (const auto& entry : fs::directory_iterator(fs::path(file).parent_path())) {
    EXPECT_EQ(entry.path().filename().string(), "gemm-autotune.json") << "no temporary file is left";
  }
  ops::GemmChoiceCache later(file);
  EXPECT_EQ(later.find("GPU A", "t01 n8 m8 k8"), 3);
  EXPECT_EQ(later.find("GPU B", "t01 n8 m8 k8"), 0);
  EXPECT_FALSE(later.find("GPU A", "t00 n8 m8 k8").has_value());
  EXPECT_FALSE(later.find("GPU C", "t01 n8 m8 k8").has_value());
}

TEST(GemmChoiceCache, TwoProcessesSavesMerge) {
  TempDir dir;
  const std::string file = (dir.path / "gemm-autotune.json").string();
  ops::GemmChoiceCache first(file), second(file);
  EXPECT_FALSE(first.find("GPU", "p1").has_value());   // both have read the (missing) file
  EXPECT_FALSE(second.find("GPU", "p2").has_value());
  first.record("GPU", "p1", 1);
  second.record("GPU", "p2", 2);  // merges the file's p1 before writing
  ops::GemmChoiceCache reader(file);
  EXPECT_EQ(reader.find("GPU", "p1"), 1);
  EXPECT_EQ(reader.find("GPU", "p2"), 2);
  second.record("GPU", "p1", 5);  // the same product again: the latest save wins
  ops::GemmChoiceCache reader2(file);
  EXPECT_EQ(reader2.find("GPU", "p1"), 5);
}

TEST(GemmChoiceCache, MalformedForeignOrDirectoryRecordsAreRefusedByName) {
  TempDir dir;
  const fs::path file = dir.path / "gemm-autotune.json";
  const std::string name = file.string();
  write(file, "{not json");
  ops::GemmChoiceCache a(name);
  EXPECT_TRUE(throws_error([&] { (void)a.find("GPU", "p"); }, {name, "not JSON", "delete the file"}));
  write(file, R"({"format": 2, "devices": {}})");
  ops::GemmChoiceCache b(name);
  EXPECT_TRUE(throws_error([&] { (void)b.find("GPU", "p"); }, {name, "format 2", "delete the file"}));
  write(file, R"({"format": 1, "devices": {"GPU": {"p": -1}}})");
  ops::GemmChoiceCache c(name);
  EXPECT_TRUE(throws_error([&] { (void)c.find("GPU", "p"); }, {name, "devices[\"GPU\"][\"p\"]", "rank"}));
  write(file, R"({"format": 1})");
  ops::GemmChoiceCache d(name);
  EXPECT_TRUE(throws_error([&] { (void)d.find("GPU", "p"); }, {name, "devices"}));
  ops::GemmChoiceCache e(dir.path.string());
  EXPECT_TRUE(throws_error([&] { (void)e.find("GPU", "p"); }, {dir.path.string(), "is a directory", "SWIFT_GEMM_AUTOTUNE_CACHE"}));
}

TEST(GemmChoiceCache, AnUnwritablePlaceKeepsTheChoiceInMemory) {
  TempDir dir;
  write(dir.path / "a-file", "x");
  const std::string file = (dir.path / "a-file" / "gemm-autotune.json").string();  // its directory is a file
  ops::GemmChoiceCache cache(file);
  testing::internal::CaptureStderr();
  cache.record("GPU", "p", 4);
  cache.record("GPU", "q", 5);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot save the GEMM autotune record"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot save", err.find("cannot save") + 1), std::string::npos) << "warned once: " << err;
  EXPECT_EQ(cache.find("GPU", "p"), 4);
  EXPECT_EQ(cache.find("GPU", "q"), 5);
}

TEST(GemmChoiceCache, PathFollowsTheEnvironment) {
  const char* keep_cache = std::getenv("SWIFT_GEMM_AUTOTUNE_CACHE");
  const char* keep_xdg = std::getenv("XDG_CACHE_HOME");
  const char* keep_home = std::getenv("HOME");
  const std::string saved_cache = keep_cache ? keep_cache : "", saved_xdg = keep_xdg ? keep_xdg : "",
                    saved_home = keep_home ? keep_home : "";
  setenv("SWIFT_GEMM_AUTOTUNE_CACHE", "/tmp/mine.json", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(ops::gemm_choice_cache_path(), "/tmp/mine.json");
  setenv("SWIFT_GEMM_AUTOTUNE_CACHE", "", 1);
  EXPECT_EQ(ops::gemm_choice_cache_path(), "") << "set but empty: no file";
  unsetenv("SWIFT_GEMM_AUTOTUNE_CACHE");
  EXPECT_EQ(ops::gemm_choice_cache_path(), "/xdg/swift.cpp/gemm-autotune.json");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(ops::gemm_choice_cache_path(), "/home/u/.cache/swift.cpp/gemm-autotune.json");
  unsetenv("HOME");
  EXPECT_EQ(ops::gemm_choice_cache_path(), "");
  const auto restore = [](const char* name, const char* had, const std::string& value) {
    if (had) {
      setenv(name, value.c_str(), 1);
    } else {
      unsetenv(name);
    }
  };
  restore("SWIFT_GEMM_AUTOTUNE_CACHE", keep_cache, saved_cache);
  restore("XDG_CACHE_HOME", keep_xdg, saved_xdg);
  restore("HOME", keep_home, saved_home);
}

}  // namespace
}  // namespace swift::test
