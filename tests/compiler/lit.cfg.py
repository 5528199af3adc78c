# lit configuration of the compiler tests: *.mlir (smelt-opt) and *.test (smelt-compile) files here.
import os

import lit.formats

config.name = "smelt-compiler"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.smelt_test_exec_root
config.environment["PATH"] = os.pathsep.join(
    [config.smelt_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])

# The V4.1 goldens (read-only, beside the checkout): tests that use them say `REQUIRES: v41-goldens`.
goldens = getattr(config, "smelt_goldens_v41", "")
if goldens and os.path.exists(os.path.join(goldens, "tiny_backbone", "model.safetensors")):
    config.available_features.add("v41-goldens")
    config.substitutions.append(("%goldens", goldens))
