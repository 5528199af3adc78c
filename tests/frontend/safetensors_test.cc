// Safetensors reader and writer: round trips of every dtype, zero-copy views, sharded checkpoints, a file
// past 4 GiB, and one test per kind of malformed file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/frontend/test_util.h"

namespace smelt {
namespace {

using test::OwnedTensor;
using test::TempDir;

// FNV-1a 64, written here from its definition (offset basis 14695981039346656037, prime 1099511628211).
uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t le64(const std::string& b, size_t at = 0) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[at + i]);
  return n;
}

TEST(FrontendSafetensors, DTypeTable) {
  // Element sizes and spellings per the safetensors format description.
  const std::vector<std::tuple<const char*, DType, size_t>> rows = {
      {"F32", DType::F32, 4},      {"BF16", DType::BF16, 2},       {"F16", DType::F16, 2},
      {"F64", DType::F64, 8},      {"I64", DType::I64, 8},         {"I32", DType::I32, 4},
      {"I16", DType::I16, 2},      {"I8", DType::I8, 1},           {"U8", DType::U8, 1},
      {"BOOL", DType::BOOL, 1},    {"F8_E4M3", DType::F8_E4M3, 1}, {"F8_E5M2", DType::F8_E5M2, 1},
      {"F8_E8M0", DType::F8_E8M0, 1}};
  for (const auto& [name, d, size] : rows) {
    EXPECT_EQ(parse_dtype(name), d) << name;
    EXPECT_EQ(dtype_name(d), name);
    EXPECT_EQ(dtype_size(d), size) << name;
  }
  EXPECT_EQ(parse_dtype("F8_E4M3FN"), DType::F8_E4M3);
  EXPECT_FALSE(parse_dtype("Q4_K"));
  EXPECT_FALSE(parse_dtype("f32"));
}

TEST(FrontendSafetensors, RoundTripEveryDTypeZeroCopy) {
  TempDir dir;
  std::mt19937_64 rng(1);
  std::vector<OwnedTensor> ts;
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I64, DType::I32, DType::I16, DType::I8,
                  DType::U8, DType::BOOL, DType::F8_E4M3, DType::F8_E5M2, DType::F8_E8M0})
    ts.push_back(test::random_tensor("t." + std::string(dtype_name(d)), d, {3, 5}, rng));
  ts.push_back(test::random_tensor("scalar", DType::F32, {}, rng));
  ts.push_back(test::random_tensor("empty", DType::BF16, {0, 7}, rng));
  ts.push_back(test::random_tensor("rank3", DType::I8, {2, 3, 4}, rng));
  const std::string path = dir / "model.safetensors";
  test::write_tensors(path, ts, {{"format", "pt"}, {"note", "hi"}});

  // The file itself, read independently: LE length, JSON header, 8-aligned data section, contiguous offsets.
  const std::string raw = test::read_file(path);
  const uint64_t n = le64(raw);
  EXPECT_EQ((8 + n) % 8, 0u);
  auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  uint64_t expect_begin = 0;
  for (const auto& t : ts) {
    auto e = header.at(t.name);
    EXPECT_EQ(e["dtype"], dtype_name(t.dtype));
    EXPECT_EQ(e["data_offsets"][0].get<uint64_t>(), expect_begin);
    expect_begin += t.bytes.size();
    EXPECT_EQ(e["data_offsets"][1].get<uint64_t>(), expect_begin);
  }
  EXPECT_EQ(raw.size(), 8 + n + expect_begin);

  SafetensorsFile f = SafetensorsFile::open(path, 7);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), raw.size());
  EXPECT_EQ(f.header_size(), n);
  EXPECT_EQ(f.header_hash(), fnv1a(raw.substr(0, 8 + n)));
  EXPECT_EQ(f.metadata().at("note"), "hi");
  ASSERT_EQ(f.tensors().size(), ts.size());
  // File order = the order written.
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(f.tensors()[i].name, ts[i].name);

  Checkpoint ck = Checkpoint::open(dir.path);
  ASSERT_EQ(ck.files().size(), 1u);
  const uint8_t* map_begin = ck.files()[0].mapping()->data();
  const uint8_t* map_end = map_begin + ck.files()[0].mapping()->size();
  uint64_t payload = 0;
  for (const auto& t : ts) {
    const TensorInfo* info = ck.find(t.name);
    ASSERT_TRUE(info) << t.name;
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    EXPECT_EQ(info->nbytes, t.bytes.size());
    EXPECT_EQ(info->file, 0u);
    auto bytes = ck.bytes(*info);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), t.bytes.begin(), t.bytes.end())) << t.name;
    if (!t.bytes.empty()) {  // a view into the mapping, not a copy
      EXPECT_GE(bytes.data(), map_begin);
      EXPECT_LE(bytes.data() + bytes.size(), map_end);
      EXPECT_EQ(bytes.data(), map_begin + info->offset);
      EXPECT_EQ(0, std::memcmp(raw.data() + info->offset, t.bytes.data(), t.bytes.size()));
    }
    payload += t.bytes.size();
  }
  EXPECT_EQ(ck.find("scalar")->numel(), 1);
  EXPECT_EQ(ck.find("empty")->numel(), 0);
  EXPECT_EQ(ck.payload_bytes(), payload);
  EXPECT_EQ(ck.find("missing"), nullptr);
  SafetensorsFile::validate_bytes(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), "mem");
}

TEST(FrontendSafetensors, ShardedIndex) {
  TempDir dir;
  std::mt19937_64 rng(2);
  std::vector<OwnedTensor> a = {test::random_tensor("embed.weight", DType::BF16, {8, 4}, rng),
                                test::random_tensor("layers.0.attn_norm.weight", DType::F32, {4}, rng)};
  std::vector<OwnedTensor> b = {test::random_tensor("head.weight", DType::BF16, {8, 4}, rng)};
  test::write_tensors(dir / "model-00001-of-00002.safetensors", a);
  test::write_tensors(dir / "model-00002-of-00002.safetensors", b);
  // A stray file the index does not name is not part of the checkpoint.
  test::write_tensors(dir / "consolidated.safetensors", {test::random_tensor("embed.weight", DType::F32, {1}, rng)});
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"metadata": {"total_size": 144}, "weight_map": {
                        "embed.weight": "model-00001-of-00002.safetensors",
                        "layers.0.attn_norm.weight": "model-00001-of-00002.safetensors",
                        "head.weight": "model-00002-of-00002.safetensors"}})");
  Checkpoint ck = Checkpoint::open(dir.path);
  ASSERT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.find("head.weight")->file, 1u);
  EXPECT_EQ(ck.find("embed.weight")->file, 0u);
  EXPECT_EQ(ck.find("embed.weight")->dtype, DType::BF16);
  auto bytes = ck.bytes(*ck.find("head.weight"));
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), b[0].bytes.begin(), b[0].bytes.end()));
  EXPECT_EQ(ck.payload_bytes(), 64u + 16u + 64u);
}

TEST(FrontendSafetensors, DirectoryWithoutIndexTakesAllFilesSorted) {
  TempDir dir;
  std::mt19937_64 rng(3);
  test::write_tensors(dir / "b.safetensors", {test::random_tensor("x", DType::F32, {2}, rng)});
  test::write_tensors(dir / "a.safetensors", {test::random_tensor("y", DType::F32, {2}, rng)});
  test::write_file(dir / "notes.txt", "not a tensor file");
  Checkpoint ck = Checkpoint::open(dir.path);
  ASSERT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.files()[0].path(), dir / "a.safetensors");
  EXPECT_EQ(ck.find("y")->file, 0u);
  EXPECT_EQ(ck.find("x")->file, 1u);
}

// Without an index, model.safetensors is the checkpoint; other files beside it (logits, goldens) are not.
TEST(FrontendSafetensors, ModelSafetensorsWinsOverOtherFiles) {
  TempDir dir;
  std::mt19937_64 rng(4);
  test::write_tensors(dir / "model.safetensors", {test::random_tensor("w", DType::F32, {2}, rng)});
  test::write_tensors(dir / "logits.safetensors", {test::random_tensor("logits", DType::F32, {2}, rng)});
  Checkpoint ck = Checkpoint::open(dir.path);
  ASSERT_EQ(ck.files().size(), 1u);
  EXPECT_NE(ck.find("w"), nullptr);
  EXPECT_EQ(ck.find("logits"), nullptr);
}

// A 5 GiB sparse file with a tensor placed past 4 GiB: offsets and sizes must be 64-bit all the way.
TEST(FrontendSafetensors, FileLargerThan4GiB) {
  TempDir dir;
  const std::string path = dir / "big.safetensors";
  const uint64_t begin = (uint64_t(4) << 30) + 4096 * 3;  // relative to the data section
  std::vector<HeaderEntry> entries = {{"small", DType::F32, {2}, 0, 8}, {"far", DType::I64, {3}, begin, begin + 24}};
  std::vector<uint8_t> header = encode_safetensors_header(entries);
  const uint64_t data_start = header.size();
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(5) << 30), 0);
  ASSERT_EQ(pwrite(fd, header.data(), header.size(), 0), ssize_t(header.size()));
  const int64_t far[3] = {-1, 0x123456789abcdefll, 42};
  ASSERT_EQ(pwrite(fd, far, sizeof far, off_t(data_start + begin)), ssize_t(sizeof far));
  ::close(fd);

  Checkpoint ck = Checkpoint::open(dir.path);
  const TensorInfo* t = ck.find("far");
  ASSERT_TRUE(t);
  EXPECT_EQ(ck.files()[0].file_size(), uint64_t(5) << 30);
  EXPECT_EQ(t->offset, data_start + begin);
  EXPECT_GT(t->offset, uint64_t(1) << 32);
  EXPECT_EQ(t->nbytes, 24u);
  auto bytes = ck.bytes(*t);
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(0, std::memcmp(bytes.data(), far, 24));
  EXPECT_EQ(ck.payload_bytes(), 32u);
}

// ---- malformed files: each error names the file and the tensor ----

class FrontendSafetensorsBad : public ::testing::Test {
 protected:
  TempDir dir;
  std::string put(const std::string& header, size_t data_bytes, const std::string& name = "model.safetensors") {
    test::write_file(dir / name, test::raw_safetensors(header, data_bytes));
    return dir / name;
  }
  // The same error from the file and from validate_bytes on its bytes.
  void expect(const std::string& path, std::initializer_list<std::string> parts) {
    test::expect_error_parts(test::error_of([&] { SafetensorsFile::open(path); }), parts);
    std::string raw = test::read_file(path);
    test::expect_error_parts(test::error_of([&] {
      SafetensorsFile::validate_bytes(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), path);
    }), parts);
    test::expect_error_parts(test::error_of([&] { Checkpoint::open(dir.path); }), parts);
  }
};

TEST_F(FrontendSafetensorsBad, ShorterThan8Bytes) {
  test::write_file(dir / "model.safetensors", "abcde");
  expect(dir / "model.safetensors", {"model.safetensors", "5 bytes", "8-byte"});
  test::write_file(dir / "model.safetensors", "");
  expect(dir / "model.safetensors", {"model.safetensors", "0 bytes"});
}

TEST_F(FrontendSafetensorsBad, HeaderLengthPastEnd) {
  std::string raw = test::raw_safetensors("{}", 0);
  raw[0] = char(200);  // claims 200 header bytes, file has 10
  test::write_file(dir / "model.safetensors", raw);
  expect(dir / "model.safetensors", {"model.safetensors", "header length 200", "10 bytes"});
  raw.assign(8, char(0xff));  // 2^64 - 1
  test::write_file(dir / "model.safetensors", raw);
  expect(dir / "model.safetensors", {"model.safetensors", "header length 18446744073709551615"});
}

TEST_F(FrontendSafetensorsBad, HeaderNotJson) {
  expect(put("{\"a\": [1, 2", 0), {"model.safetensors", "not valid JSON"});
  expect(put("\"just a string\"", 0), {"model.safetensors", "not a JSON object"});
  expect(put("[1, 2]", 0), {"model.safetensors", "not a JSON object"});
}

TEST_F(FrontendSafetensorsBad, UnknownDType) {
  expect(put(R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", 2),
         {"model.safetensors", "tensor 'w'", "unknown dtype \"Q4_K\""});
  expect(put(R"({"w": {"dtype": 7, "shape": [2], "data_offsets": [0, 2]}})", 2), {"tensor 'w'", "dtype"});
}

TEST_F(FrontendSafetensorsBad, ShapeDisagreesWithOffsets) {
  expect(put(R"({"layers.0.attn.wq_a.weight": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 96]}})", 96),
         {"model.safetensors: tensor 'layers.0.attn.wq_a.weight' has data_offsets [0, 96] but shape [4, 8] x BF16 "
          "needs 64 bytes"});
  // A shape whose byte count overflows 64 bits cannot match any range.
  expect(put(R"({"huge": {"dtype": "F32", "shape": [4611686018427387904, 4611686018427387904], "data_offsets": [0, 8]}})", 8),
         {"model.safetensors", "tensor 'huge'", "needs 18446744073709551615 bytes"});
  expect(put(R"({"neg": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
         {"tensor 'neg'", "shape entry -1"});
  expect(put(R"({"noshape": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), {"tensor 'noshape'", "'shape'"});
}

TEST_F(FrontendSafetensorsBad, OffsetsOutOfRange) {
  expect(put(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 16),
         {"model.safetensors", "tensor 'w'", "[8, 24]", "past the end of the data section (16 bytes)"});
  expect(put(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16),
         {"model.safetensors", "tensor 'w'", "[8, 4]", "end before begin"});
  expect(put(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 16), {"tensor 'w'", "data_offsets"});
  expect(put(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 16), {"tensor 'w'", "data_offsets"});
}

TEST_F(FrontendSafetensorsBad, OverlappingRanges) {
  expect(put(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]},
                 "c": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 32),
         {"model.safetensors", "'a' [0, 16]", "'c' [8, 24]", "overlap"});
  // Empty tensors overlap nothing; holes between tensors are allowed.
  put(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]}})", 32);
  EXPECT_EQ(Checkpoint::open(dir.path).tensors().size(), 3u);
}

TEST_F(FrontendSafetensorsBad, DuplicateNames) {
  expect(put(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                 "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
         {"model.safetensors", "tensor 'w'", "twice"});
  std::mt19937_64 rng(4);
  TempDir d2;
  test::write_tensors(d2 / "a.safetensors", {test::random_tensor("w", DType::F32, {1}, rng)});
  test::write_tensors(d2 / "b.safetensors", {test::random_tensor("w", DType::F32, {1}, rng)});
  EXPECT_SMELT_ERROR(Checkpoint::open(d2.path), "tensor 'w'", "a.safetensors", "b.safetensors");
}

TEST_F(FrontendSafetensorsBad, Metadata) {
  expect(put(R"({"__metadata__": {"format": 1}})", 0), {"model.safetensors", "__metadata__", "'format'"});
  expect(put(R"({"__metadata__": [1]})", 0), {"model.safetensors", "__metadata__"});
}

TEST_F(FrontendSafetensorsBad, IndexNamesMissingFileOrTensor) {
  std::mt19937_64 rng(5);
  test::write_tensors(dir / "model-1.safetensors", {test::random_tensor("a", DType::F32, {1}, rng)});
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), "model.safetensors.index.json", "tensor 'b'", "model-2.safetensors",
                     "does not exist");
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map": {"a": "model-1.safetensors", "c": "model-1.safetensors"}})");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), "model.safetensors.index.json", "tensor 'c'", "model-1.safetensors",
                     "no such tensor");
  test::write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), "model.safetensors.index.json", "tensor 'a'");
  test::write_file(dir / "model.safetensors.index.json", R"({"weight_map": )");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), "model.safetensors.index.json", "not valid JSON");
  test::write_file(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), "model.safetensors.index.json", "weight_map");
}

TEST_F(FrontendSafetensorsBad, NoFiles) {
  EXPECT_SMELT_ERROR(Checkpoint::open(dir.path), dir.path, "no *.safetensors");
  EXPECT_SMELT_ERROR(Checkpoint::open(dir / "nope"), "nope");
  EXPECT_SMELT_ERROR(SafetensorsFile::open(dir / "nope.safetensors"), "nope.safetensors", "cannot open");
  EXPECT_SMELT_ERROR(MappedFile::open(dir.path), dir.path, "not a regular file");
}

TEST(FrontendSafetensorsWriter, RejectsInconsistentTensors) {
  TempDir dir;
  std::vector<uint8_t> six(6);
  EXPECT_SMELT_ERROR(write_safetensors(dir / "out.safetensors", {{"w", DType::F32, {2}, six}}), "out.safetensors",
                     "tensor 'w'", "6 bytes", "needs 8");
  std::vector<uint8_t> eight(8);
  EXPECT_SMELT_ERROR(
      write_safetensors(dir / "out.safetensors", {{"w", DType::F32, {2}, eight}, {"w", DType::F32, {2}, eight}}),
      "out.safetensors", "tensor 'w'", "twice");
  EXPECT_FALSE(std::filesystem::exists(dir / "out.safetensors"));
  EXPECT_SMELT_ERROR(write_safetensors(dir.path + "/no/such/dir/x.safetensors", {}), "x.safetensors");
}

// The V4.1 golden checkpoint (shared/ beside the checkout): counts from its README, an independent record.
TEST(FrontendSafetensors, ReadsV41Golden) {
  std::string path = std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_backbone/model.safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  Checkpoint ck = Checkpoint::open(path);
  EXPECT_EQ(ck.tensors().size(), 637u);
  EXPECT_EQ(ck.payload_bytes(), 8970784u);
  std::map<std::string, int> counts;
  for (const auto& [name, t] : ck.tensors()) counts[std::string(dtype_name(t.dtype))]++;
  EXPECT_EQ(counts, (std::map<std::string, int>{{"BF16", 55}, {"F32", 64}, {"F8_E4M3", 67}, {"F8_E8M0", 259}, {"I8", 192}}));
  EXPECT_EQ(ck.files()[0].metadata().at("format"), "pt");
}

}  // namespace
}  // namespace smelt
