// The test runner: doctest, plus a listener that counts test cases so the run ends with
// the plain line "N passed, N failed" that CI reads.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

namespace {

int g_passed = 0, g_failed = 0, g_skipped = 0;

struct CountingListener : doctest::IReporter {
  explicit CountingListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    if (st.testCaseSuccess)
      g_passed++;
    else
      g_failed++;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override { g_skipped++; }
};

}  // namespace

DOCTEST_REGISTER_LISTENER("counting", 1, CountingListener);

int comm_selftest();  // tests/comm/test_comm.cpp

int main(int argc, char** argv) {
  // Re-run under mpirun by tests/comm/test_comm.cpp: check the collectives and exit.
  if (getenv("TG_COMM_SELFTEST")) return comm_selftest() == 0 ? 0 : 1;
  // train.device=auto stays on the CPU in the binaries the CPU tests run, GPU or not (the
  // CUDA tests in tests/cuda/ ask for device=cuda explicitly).
  setenv("TG_TEST_AUTO_DEVICE", "cpu", 0);
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return rc;
}
