// smelt-opt: mlir-opt for the smelt dialect. Parses text IR, runs --pass-pipeline / named passes, prints IR.
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "compiler/dialect/dialect.h"
#include "compiler/passes/passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  registry.insert<smelt::SmeltDialect, mlir::func::FuncDialect>();
  smelt::register_passes();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "smelt optimizer driver\n", registry));
}
