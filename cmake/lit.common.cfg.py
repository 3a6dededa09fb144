# Shared lit configuration for the IR-in/IR-out golden tests (core/ir/test, core/passes/test), the MLIR
# convention: each test file's RUN lines pipe `oar ir ...` into FileCheck. Run through CTest (ir.lit.*),
# which passes the paths of the tools: --param oar=... --param filecheck=... --param llvm_bin=... --param exec_root=...
import os
import lit.formats

suite = os.path.basename(os.path.dirname(config.test_source_root))  # ir, passes
config.name = "oar-ir:" + suite
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".oir"]
config.excludes = ["Inputs"]

params = lit_config.params
for required in ("oar", "filecheck", "llvm_bin", "exec_root"):
    if required not in params:
        lit_config.fatal("missing --param %s=... (run these tests through ctest -R ir.lit)" % required)
config.test_exec_root = os.path.join(params["exec_root"], suite)  # %t files go to the build tree
config.substitutions.append(("%oar", params["oar"]))
config.substitutions.append(("FileCheck", params["filecheck"]))
config.substitutions.append(("split-file", os.path.join(params["llvm_bin"], "split-file")))
config.substitutions.append(("not ", os.path.join(params["llvm_bin"], "not") + " "))
# A clean environment: no IR printing or device settings leak in from the caller.
for var in ("OAR_IR_PRINT", "OAR_DEVICE", "OAR_PLUGIN_PATH"):
    config.environment.pop(var, None)
