// ops/gemm_choice_cache.cpp — see gemm_choice_cache.h.
#include "ops/gemm_choice_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace swift::ops {

namespace {

constexpr int kFormat = 1;

}  // namespace

GemmChoiceCache::GemmChoiceCache(std::string path) : path_(std::move(path)) {}

GemmChoiceCache::Record GemmChoiceCache::read_file() const {
  Record out;
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) {
    fail("GEMM autotune record '{}' is a directory; set SWIFT_GEMM_AUTOTUNE_CACHE to a file's path", path_);
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;  // no record yet
  std::stringstream text;
  text << in.rdbuf();
  const auto bad = [&](const std::string& why) {
    fail("GEMM autotune record '{}': {}; delete the file (SWIFT_GEMM_AUTOTUNE times the products again and rewrites it)",
         path_, why);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("format") || !j["format"].is_number_integer()) bad("no integer \"format\"");
  if (j["format"].get<int>() != kFormat) bad("format " + j["format"].dump() + ", this build reads format 1");
  if (!j.contains("devices") || !j["devices"].is_object()) bad("no \"devices\" object");
  for (const auto& [device, products] : j["devices"].items()) {
    if (!products.is_object()) bad("devices[\"" + device + "\"] is not an object");
    for (const auto& [product, rank] : products.items()) {
      if (!rank.is_number_integer() || rank.get<int>() < 0) {
        bad("devices[\"" + device + "\"][\"" + product + "\"] is not a rank (an integer >= 0)");
      }
      out[device][product] = rank.get<int>();
    }
  }
  return out;
}

void GemmChoiceCache::load_locked() {
  if (loaded_) return;
  record_ = read_file();
  loaded_ = true;
}

std::optional<int> GemmChoiceCache::find(const std::string& device, const std::string& product) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  const auto d = record_.find(device);
  if (d == record_.end()) return std::nullopt;
  const auto p = d->second.find(product);
  if (p == d->second.end()) return std::nullopt;
  return p->second;
}

void GemmChoiceCache::record(const std::string& device, const std::string& product, int rank) {
  SWIFT_CHECK(rank >= 0, "GEMM autotune record: rank {} for '{}' is negative", rank, product);
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  record_[device][product] = rank;
  // Merge with what other processes saved meanwhile (ours win), then write a whole new file and rename it.
  Record merged = read_file();
  for (const auto& [d, products] : record_) {
    for (const auto& [p, r] : products) merged[d][p] = r;
  }
  record_ = merged;
  nlohmann::json j;
  j["format"] = kFormat;
  j["devices"] = nlohmann::json::object();
  for (const auto& [d, products] : record_) {
    for (const auto& [p, r] : products) j["devices"][d][p] = r;
  }
  std::error_code ec;
  const std::filesystem::path target(path_);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  const std::string tmp = path_ + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  bool ok = !ec;
  if (ok) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << "\n";
    out.flush();
    ok = out.good();
  }
  if (ok) {
    std::filesystem::rename(tmp, target, ec);
    ok = !ec;
  }
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    if (!warned_) {
      std::fprintf(stderr,
                   "swift: cannot save the GEMM autotune record '%s' (the choices stay in this process; set "
                   "SWIFT_GEMM_AUTOTUNE_CACHE to a writable file)\n",
                   path_.c_str());
      warned_ = true;
    }
  }
}

std::string gemm_choice_cache_path() {
  if (const char* e = std::getenv("SWIFT_GEMM_AUTOTUNE_CACHE")) return e;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != 0) {
    return std::string(x) + "/swift.cpp/gemm-autotune.json";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != 0) {
    return std::string(h) + "/.cache/swift.cpp/gemm-autotune.json";
  }
  return "";
}

}  // namespace swift::ops
