// Importer: a model description (frontends/model.h) -> a module in the smelt dialect with
//   - one smelt.weight per checkpoint tensor the forward uses (in order of first use),
//   - one smelt.state per piece of per-sequence state,
//   - func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?xVxf32>: the V4 forward of docs/ops.md, or for
//     DeepSeek-V4.1 the backbone (+ Engram) forward of the official inference code (importer_v41.cc),
//   - V4.1 with DSpark stages: func.func @dspark_draft(%ids: tensor<?x1xi32>) -> (draft ids, confidence,
//     logits), the drafter (docs/ops.md, section DSpark),
//   - module attributes smelt.model_family, smelt.config, smelt.checkpoint_files, smelt.model_dir,
//     smelt.max_seq_len.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"

#include "frontends/model.h"

namespace smelt {

struct ImportOptions {
  int64_t max_seq_len = 0;                          // state is sized for this many positions (0: default)
  bool capture_intermediates = false;               // V4.1: smelt.capture of every block's stream and pre
  std::function<void(const std::string&)> progress;  // optional progress lines
};

// The max_seq_len used when none is given: 4096, or less if the model's max_position_embeddings is less.
int64_t default_max_seq_len(const ModelConfig& c);

// Throws smelt::Error (one line naming the tensor or key) for models it cannot import.
mlir::OwningOpRef<mlir::ModuleOp> import_model(mlir::MLIRContext& ctx, const ModelDescription& m,
                                               const ImportOptions& options = {});

// The dialects smelt modules use (smelt, func).
void register_dialects(mlir::DialectRegistry& registry);

}  // namespace smelt
