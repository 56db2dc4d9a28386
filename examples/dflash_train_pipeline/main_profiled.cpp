// dflash_train_pipeline_profiled: the same program with the accumulating
// profiler over every key the pipeline can record (known at compile time).
#include "train.hpp"

int main(int argc, char** argv) {
  return dflash_example::train_main<dflash::AccumulatingProfiler<dflash_example::train_keys>>(argc, argv);
}
