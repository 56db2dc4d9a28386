// dflash_train_pipeline: the example with dflash::NullProfiler. Every timer in
// the stages compiles to nothing; the program prints progress and tokens/s.
#include "train.hpp"

int main(int argc, char** argv) { return dflash_example::train_main<dflash::NullProfiler>(argc, argv); }
