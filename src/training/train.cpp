// train.cpp: the training loop over a Trainer: a step, then evaluation, sample and checkpoint
// when due.
#include "train.h"

#include "signals.h"
#include "trainer.h"

namespace tg {
using json = nlohmann::json;

json run_training(const Config& cfg) {
  Trainer trainer(cfg);
  // From here the first SIGTERM, SIGINT or SIGHUP stops the run after the step in flight.
  const StopSignals stop_signals;
  trainer.start();
  while (!trainer.done()) {
    const StepResult r = trainer.step();
    trainer.log_step(r);
    if (r.stop_signal && !trainer.done()) trainer.stop_on_signal(r.stop_signal);
    const int64_t step = r.step;
    if (cfg.train.stop_at_step > 0 && step == cfg.train.stop_at_step && !trainer.done())
      return trainer.stop_early();
    if (trainer.done()) break;  // the last step's evaluation, sample and save come in finish()
    if (trainer.has_val() && cfg.eval.every > 0 && step % cfg.eval.every == 0)
      trainer.log_val(step, trainer.evaluate());
    if (cfg.sample.every > 0 && step % cfg.sample.every == 0) trainer.sample();
    if (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0) trainer.save();
  }
  return trainer.finish();
}

}  // namespace tg
