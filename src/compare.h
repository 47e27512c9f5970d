// compare.h: `train_gpt compare`: the same training run in several precision modes, from the
// same seed on the same data, summarised in report.md with plots and the raw metrics.
#pragma once

namespace tg {

int cmd_compare(int argc, char** argv);

}  // namespace tg
