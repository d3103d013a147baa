// Footprints and model files against StarPU's shipped models (tools/perfmodels/sampling).
#include "error.hpp"
#include "perfmodel.hpp"

#include <gtest/gtest.h>

#include <filesystem>

using namespace numasim;

static const std::string kShipped =
    std::string(NUMASIM_SOURCE_ROOT) + "/.deps/src/starpu-1.4.10/tools/perfmodels/sampling";

TEST(Footprint, MatchesStarpuLuModels) {
  // Hashes of the 960-tile entries in starpu_dlu_lu_model_{gemm,trsm_ll,getrf}.sirocco.
  EXPECT_EQ(matrix_task_footprint(3, 960, 960), 0x24c84a50u);
  EXPECT_EQ(matrix_task_footprint(2, 960, 960), 0xff82dda0u);
  EXPECT_EQ(matrix_task_footprint(1, 960, 960), 0x617e5fe6u);
  EXPECT_EQ(matrix_task_footprint(3, 320, 320), 0xd46431bbu);
}

TEST(PerfModel, ReadsShippedSiroccoGemm) {
  if (!std::filesystem::exists(kShipped))
    GTEST_SKIP() << "StarPU sources not unpacked (run envs/setup.sh)";
  PerfModel m = PerfModel::load(kShipped, "starpu_dlu_lu_model_gemm", "sirocco");
  ASSERT_NE(m.arch(1, 2, 1), nullptr);
  const HistoryEntry* e = m.lookup(1, 2, 1, matrix_task_footprint(3, 960, 960), 3ull * 960 * 960 * 8);
  ASSERT_NE(e, nullptr);
  EXPECT_NEAR(e->mean_us, 1754.881, 1e-3); // cuda2_impl0, hash 24c84a50
  EXPECT_EQ(e->nsample, 4853u);
  EXPECT_EQ(m.lookup(1, 2, 1, 0x12345678u, 12345), nullptr);
}

TEST(PerfModel, MissingFileIsInputError) {
  EXPECT_THROW(PerfModel::load("/nonexistent", "dgemm", "nohost"), InputError);
}

TEST(PerfModel, TruncatedFileIsInputError) {
  EXPECT_THROW(PerfModel::parse("45\n1\n1\n0\n", "x", "s"), InputError);
  EXPECT_THROW(PerfModel::parse("44\n", "x", "s"), InputError);
}
