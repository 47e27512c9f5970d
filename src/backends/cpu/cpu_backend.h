// cpu_backend.h: the reference backend. Memory is host memory; each op dispatches on the
// element type to the templates in ops.h (fp32, and fp64 for gradient checks).
#pragma once
#include <memory>

#include "src/backends/backend.h"

namespace tg {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options = {});

}  // namespace tg
