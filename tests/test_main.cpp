// The test runner: doctest, plus a listener that counts test cases so the run ends with
// the plain line "N passed, N failed" that CI reads, preceded by one line per failed test case
// (its name and its first failed check), so that the tail CI keeps names what failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int g_passed = 0, g_failed = 0, g_skipped = 0;
std::string g_first_failure;         // of the running test case: "file:line: CHECK(...)"
std::vector<std::string> g_failures;  // one line per failed test case
const doctest::TestCaseData* g_test = nullptr;

struct CountingListener : doctest::IReporter {
  explicit CountingListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    g_test = &tc;
    g_first_failure.clear();
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    if (st.testCaseSuccess) {
      g_passed++;
      return;
    }
    g_failed++;
    const doctest::TestCaseData* tc = g_test;
    g_failures.push_back(std::string("failed: \"") + (tc ? tc->m_name : "?") + "\" (" +
                         (tc ? tc->m_file.c_str() : "?") + ":" + std::to_string(tc ? tc->m_line : 0) +
                         "): " + (g_first_failure.empty() ? "see above" : g_first_failure));
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    if (g_first_failure.empty()) g_first_failure = std::string("threw ") + e.error_string.c_str();
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed || !g_first_failure.empty()) return;
    g_first_failure = std::string(a.m_file) + ":" + std::to_string(a.m_line) + ": " + a.m_expr;
  }
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
  for (const std::string& f : g_failures) printf("%s\n", f.c_str());
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return rc;
}
