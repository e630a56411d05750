// advise_huge_pages (moenum/huge_pages.h): a large buffer advised before its first touch is backed by
// transparent huge pages where the kernel offers them; small buffers and null are left alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "large_matrix.h"
#include "moenum/huge_pages.h"
#include "moenum/tensor.h"

namespace moenum {
namespace {

// The kernel's THP mode: the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto a = all.find('['), b = all.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : all.substr(a + 1, b - a - 1);
}

// kB of AnonHugePages in the mappings of /proc/self/smaps that overlap [p, p + bytes).
int64_t huge_kb(const void* p, size_t bytes) {
  std::ifstream f("/proc/self/smaps");
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  std::string line;
  bool inside = false;
  int64_t kb = 0;
  while (std::getline(f, line)) {
    uintptr_t a = 0, b = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> a >> dash >> b && dash == '-') {
      inside = a < hi && b > lo;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) kb += std::stoll(line.substr(14));
  }
  return kb;
}

TEST(HugePages, AdvisedLargeBufferGetsHugePagesWhereOffered) {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages are '" << mode << "' here";
  const size_t bytes = size_t{64} << 20;
  char* p = static_cast<char*>(std::malloc(bytes));
  ASSERT_NE(p, nullptr);
  advise_huge_pages(p, bytes);
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  const int64_t kb = huge_kb(p, bytes);
  std::free(p);
  // the kernel may fall short of huge pages under fragmentation, but not for all 64 MB of them
  EXPECT_GT(kb, 0) << "no AnonHugePages in the advised mapping (THP " << mode << ")";
}

TEST(HugePages, SmallOrNullIsLeftAlone) {
  advise_huge_pages(nullptr, size_t{1} << 30);
  char small[4096];
  advise_huge_pages(small, sizeof small);  // below kHugePageAdviseMin: no madvise on the stack
  small[0] = 1;
  EXPECT_EQ(small[0], 1);
}

TEST(HugePages, LargeMatricesAndTensorsKeepTheirValues) {
  reference::Matrix m = reference::large_matrix(2048, 2048);  // 32 MB: advised
  m.setConstant(1.5);
  const reference::Matrix t = reference::transposed(m);
  EXPECT_EQ(t.rows(), 2048);
  EXPECT_EQ(t(7, 3), 1.5);
  Tensor z({int64_t{1} << 23}, "fp32");  // 32 MB through the tensors' allocator: zeroed as ever
  EXPECT_EQ(z.f32()[12345], 0.0f);
}

}  // namespace
}  // namespace moenum
