// smelt-tiny-v4 DIR [--ratios 0,4,8,4] [--hash-layers N] [--seed S] [--experts E]: writes the synthetic tiny V4
// checkpoint of tiny_v4.h (used by the lit tests).
#include <cstdio>
#include <sstream>
#include <string>

#include "frontends/error.h"
#include "tests/compiler/tiny_v4.h"

int main(int argc, char** argv) {
  try {
    if (argc < 2 || (argc % 2) != 0)
      throw smelt::Error("usage: smelt-tiny-v4 DIR [--ratios 0,4,8,4] [--hash-layers N] [--seed S] [--experts E]");
    std::vector<int> ratios = {0, 4, 8, 4};
    int hash_layers = 2;
    unsigned seed = 1;
    int experts = 4;
    for (int i = 2; i + 1 < argc; i += 2) {
      std::string a = argv[i], v = argv[i + 1];
      if (a == "--ratios") {
        ratios.clear();
        std::stringstream ss(v);
        for (std::string t; std::getline(ss, t, ',');) ratios.push_back(std::stoi(t));
      } else if (a == "--hash-layers") {
        hash_layers = std::stoi(v);
      } else if (a == "--experts") {
        experts = std::stoi(v);
      } else if (a == "--seed") {
        seed = unsigned(std::stoul(v));
      } else {
        throw smelt::Error("unknown option " + a);
      }
    }
    smelt::test::write_tiny_v4(argv[1], ratios, hash_layers, seed, experts);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
