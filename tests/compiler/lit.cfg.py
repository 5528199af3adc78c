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

# Plans for GPU targets need NVRTC (the kernels are compiled at plan time): tests that write one say
# `REQUIRES: nvrtc` and share the cuda_backend tests' kernel cache (%kernel_cache).
if getattr(config, "smelt_have_nvrtc", "OFF") in ("ON", "1", "TRUE"):
    config.available_features.add("nvrtc")
config.substitutions.append(("%kernel_cache", getattr(config, "smelt_kernel_cache", "")))
