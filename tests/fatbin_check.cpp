// linmeta_fatbin_check: lists the CUDA code embedded in object files or static libraries
// and fails unless every required code is there (the ctest cuda_fatbin; no GPU and no
// cuobjdump needed).
//
//   linmeta_fatbin_check [--require sm_NN|compute_NN]... FILE...
//
// nvcc embeds a fatbinary per translation unit: a header (magic 0xBA55ED50, version 1, header
// size, payload size) followed by entries, each with a kind (1 = PTX, 2 = ELF machine code)
// and the architecture number at byte 28 of the entry header.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kMagic = 0xBA55ED50;

template <class T>
T load(const std::vector<char>& d, size_t at) {
  T v{};
  std::memcpy(&v, d.data() + at, sizeof v);
  return v;
}

/// "sm_90" / "compute_90" for every entry of every well-formed fatbinary in `d`.
std::set<std::string> codes(const std::vector<char>& d) {
  std::set<std::string> out;
  for (size_t i = 0; i + 16 <= d.size(); ++i) {
    if (load<uint32_t>(d, i) != kMagic || load<uint16_t>(d, i + 4) != 1) continue;
    const size_t header = load<uint16_t>(d, i + 6);
    const uint64_t size = load<uint64_t>(d, i + 8);
    if (header < 16 || size > d.size() - i - header) continue;
    const size_t end = i + header + size;
    for (size_t e = i + header; e + 32 <= end;) {
      const uint16_t kind = load<uint16_t>(d, e);
      const uint32_t entry_header = load<uint32_t>(d, e + 4);
      const uint64_t payload = load<uint64_t>(d, e + 8);
      if ((kind != 1 && kind != 2) || entry_header < 32 || payload > end - e - entry_header) break;
      out.insert((kind == 1 ? "compute_" : "sm_") + std::to_string(load<uint32_t>(d, e + 28)));
      e += entry_header + payload;
    }
    i = end - 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> required, files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require") == 0 && i + 1 < argc)
      required.emplace_back(argv[++i]);
    else
      files.emplace_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: linmeta_fatbin_check [--require sm_NN|compute_NN]... FILE...\n");
    return 2;
  }
  std::set<std::string> found;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "linmeta_fatbin_check: cannot open %s\n", f.c_str());
      return 2;
    }
    const std::vector<char> data{std::istreambuf_iterator<char>(in), {}};
    std::string list;
    for (const auto& c : codes(data)) {
      list += " " + c;
      found.insert(c);
    }
    std::printf("%s:%s\n", f.c_str(), list.empty() ? " no CUDA code" : list.c_str());
  }
  int missing = 0;
  for (const auto& r : required)
    if (!found.contains(r)) {
      std::printf("MISSING %s\n", r.c_str());
      ++missing;
    }
  return missing == 0 ? 0 : 1;
}
