// tests/data/test_gzip_hash.cpp — our DEFLATE/gzip decoder (stored, fixed, dynamic blocks; every header flag;
// multi-member; corruption), XXH64 and CRC-32 against published vectors, and the portable Rng.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/error.h"
#include "data/gzip.h"
#include "data/hash.h"
#include "data/random.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::fixtures_dir;
using testing::read_bytes;

std::string gz(const std::string& name) { return fixtures_dir() + "/gzip/" + name; }

std::string gunzip_file(const std::string& path) {
  std::string bytes = read_bytes(path);
  return gunzip(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

TEST(DataHash, Xxh64PublishedVectors) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 0), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64("abc", 0), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(hex64(0xEF46DB3751D8E999ull), "ef46db3751d8e999");
}

TEST(DataHash, StreamingEqualsOneShotForAnyChunking) {
  std::mt19937 rng(3);
  std::string data(5000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{100}, size_t{5000}}) {
    uint64_t want = xxh64(data.data(), len, 17);
    for (int trial = 0; trial < 20; ++trial) {
      Xxh64 h(17);
      size_t pos = 0;
      while (pos < len) {
        size_t take = std::min(len - pos, size_t(rng() % 70));
        h.update(data.data() + pos, take);
        pos += take;
      }
      ASSERT_EQ(h.digest(), want) << "length " << len;
    }
  }
}

TEST(DataGzip, Crc32CheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  // Continuation equals one call.
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

TEST(DataGzip, FixedHuffmanBlock) { EXPECT_EQ(gunzip_file(gz("fixed.txt.gz")), read_bytes(gz("fixed.txt"))); }

TEST(DataGzip, StoredBlocksAcrossTheirSizeLimit) {
  EXPECT_EQ(gunzip_file(gz("stored.bin.gz")), read_bytes(gz("stored.bin")));
}

TEST(DataGzip, DynamicHuffmanWithEveryHeaderFlag) {
  // FEXTRA, FNAME, FCOMMENT and FHCRC all set.
  EXPECT_EQ(gunzip_file(gz("dynamic.txt.gz")), read_bytes(gz("dynamic.txt")));
}

TEST(DataGzip, MultipleMembersAndZeroPadding) {
  EXPECT_EQ(gunzip_file(gz("multi.txt.gz")), read_bytes(gz("multi.txt")));
}

TEST(DataGzip, RealDatasetSlice) {
  std::string text = gunzip_file(fixtures_dir() + "/hh-rlhf-harmless-base-50.jsonl.gz");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 50);
  EXPECT_EQ(text.rfind("{\"chosen\": ", 0), 0u);
}

TEST(DataGzip, TruncatedStreamThrowsNamingTheFile) {
  std::string bytes = read_bytes(gz("dynamic.txt.gz"));
  for (size_t cut : {size_t{12}, size_t{40}, bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    std::string part = bytes.substr(0, cut);
    try {
      gunzip(reinterpret_cast<const uint8_t*>(part.data()), part.size(), "cut.gz");
      FAIL() << "no error for a stream cut at " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.gz"), std::string::npos) << e.what();
    }
  }
}

TEST(DataGzip, CorruptionIsDetected) {
  std::string bytes = read_bytes(gz("stored.bin.gz"));
  bytes[1000] ^= 0x40;  // inside stored data: only the CRC can tell
  try {
    gunzip(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.gz");
    FAIL() << "CRC error not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
  }
  // Flipping bits of compressed data either fails to decode or fails the CRC; it never passes silently.
  std::string dyn = read_bytes(gz("dynamic.txt.gz"));
  size_t start = dyn.find("comment") + 10;
  for (size_t i = start; i < dyn.size() - 9; ++i) {  // not the last DEFLATE byte: its high bits may be padding
    std::string bad = dyn;
    bad[i] ^= 0x10;
    EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), "flip.gz"), Error) << i;
  }
  std::string garbage = read_bytes(gz("fixed.txt.gz")) + "xyz";
  EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(), "g.gz"), Error);
  std::string plain = "not gzip at all, just text";
  EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(plain.data()), plain.size(), "p.gz"), Error);
}

TEST(DataGzip, RawStoredBlockBuiltByHand) {
  // BFINAL=1 BTYPE=00, aligned, LEN=5, NLEN=~5, "hello".
  const uint8_t stream[] = {0x01, 0x05, 0x00, 0xFA, 0xFF, 'h', 'e', 'l', 'l', 'o'};
  size_t used = 0;
  EXPECT_EQ(inflate_raw(stream, sizeof(stream), &used, "raw"), "hello");
  EXPECT_EQ(used, sizeof(stream));
  const uint8_t bad_len[] = {0x01, 0x05, 0x00, 0xFB, 0xFF, 'h', 'e', 'l', 'l', 'o'};
  EXPECT_THROW(inflate_raw(bad_len, sizeof(bad_len), &used, "raw"), Error);
}

TEST(DataRandom, EngineIsTheStandardOne) {
  // The C++ standard fixes mt19937_64's 10000th output for the default seed; our Rng draws from that engine.
  Rng rng(5489u);
  uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.next();
  EXPECT_EQ(v, 9981545732273789042ull);
}

TEST(DataRandom, BelowAndPermutation) {
  Rng a(42), b(42);
  for (int i = 0; i < 1000; ++i) {
    uint64_t x = a.below(7);
    ASSERT_LT(x, 7u);
    ASSERT_EQ(x, b.below(7));
  }
  auto p = Rng(1).permutation(1000);
  std::set<int64_t> seen(p.begin(), p.end());
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
  EXPECT_NE(p, Rng(2).permutation(1000));
  EXPECT_EQ(p, Rng(1).permutation(1000));
  EXPECT_NE(derive_seed(42, 0), derive_seed(42, 1));
  EXPECT_NE(derive_seed(42, 0, 1), derive_seed(42, 1, 0));
}

}  // namespace
}  // namespace swift::data
