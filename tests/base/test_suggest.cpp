// "Did you mean": the edit distance and the closest names; this machine's memory and the
// out-of-memory error that names what an allocation was for.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "src/base/host_memory.h"
#include "src/base/suggest.h"

using namespace tg;

TEST_CASE("suggest: edit distance counts a swap of neighbours as one edit") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("steps", "steps") == 0);
  CHECK(edit_distance("stpes", "steps") == 1);           // a swap
  CHECK(edit_distance("precison", "precision") == 1);    // an insertion
  CHECK(edit_distance("precisiion", "precision") == 1);  // a deletion
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("ca", "abc") == 3);  // optimal string alignment: no edit of a swapped pair
}

TEST_CASE("suggest: the closest names, best first, and nothing when none is close") {
  const std::vector<std::string> keys = {"train.steps",   "train.seed",   "optim.lr",
                                         "eval.every",    "sample.every", "checkpoint.every",
                                         "precision.mode"};
  CHECK(closest_names("train.stpes", keys) == std::vector<std::string>{"train.steps"});
  CHECK(closest_names("precison.mode", keys) == std::vector<std::string>{"precision.mode"});
  // The key without its section, or in the wrong one.
  CHECK(closest_names("steps", keys) == std::vector<std::string>{"train.steps"});
  CHECK(closest_names("train.lr", keys) == std::vector<std::string>{"optim.lr"});
  CHECK(closest_names("every", keys).size() == 3);  // at most three
  CHECK(closest_names("xyzzy", keys).empty());
  CHECK(closest_names("train.steps", keys).empty());  // the name itself is no suggestion
  CHECK(did_you_mean("train.stpes", keys, "--") == " (did you mean '--train.steps'?)");
  CHECK(did_you_mean("every", {"eval.every", "sample.every"}) ==
        " (did you mean 'eval.every' or 'sample.every'?)");
  CHECK(did_you_mean("xyzzy", keys).empty());
}

TEST_CASE("host memory: /proc/meminfo's MemAvailable and MemTotal, in bytes") {
  const HostMemory m = parse_meminfo(
      "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   12288000 kB\n");
  CHECK(m.total == 24576000ull * 1024);
  CHECK(m.available == 12288000ull * 1024);
  CHECK(parse_meminfo("nothing here\n").total == 0);
  const HostMemory here = host_memory();
  CHECK(here.total > 0);
  CHECK(here.available <= here.total);
  CHECK(fmt_bytes(512) == "512 B");
  CHECK(fmt_bytes(1.5 * 1024 * 1024) == "1.5 MiB");
  CHECK(fmt_bytes(1.2 * 1024 * 1024 * 1024) == "1.2 GiB");
}

TEST_CASE("host memory: an out-of-memory error names what the allocation was for") {
  CHECK(std::string(AllocPurpose::current()).empty());
  {
    AllocPurpose outer("the weights");
    CHECK(std::string(AllocPurpose::current()) == "the weights");
    {
      AllocPurpose inner("the activations");
      CHECK(std::string(AllocPurpose::current()) == "the activations");
    }
    CHECK(std::string(AllocPurpose::current()) == "the weights");
  }
  CHECK(std::string(AllocPurpose::current()).empty());
  const OutOfMemory e(3 << 20, "the activations");
  CHECK(std::string(e.what()) ==
        "out of host memory allocating 3.0 MiB (3145728 bytes) for the activations");
  CHECK(std::string(OutOfMemory(64, "").what()) == "out of host memory allocating 64 B (64 bytes)");
}
